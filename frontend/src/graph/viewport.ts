// Pan and zoom of an SVG through its viewBox: the wheel zooms around the
// pointer, dragging pans, and the keyboard does both (arrows pan, + and -
// zoom, 0 fits) when the drawing has focus. Buttons call the same methods.

export interface Box {
  x: number;
  y: number;
  width: number;
  height: number;
}

const ZOOM_STEP = 1.25;
const PAN_FRACTION = 0.1;
const MIN_WIDTH = 40;

export class Viewport {
  private box: Box;
  private drag: { x: number; y: number; box: Box } | null = null;
  /** Set once the user pans or zooms: a late first layout must not move the view then. */
  private moved = false;

  constructor(
    private readonly svg: SVGSVGElement,
    private readonly bounds: Box,
  ) {
    this.box = { ...bounds };
    this.apply();
    svg.addEventListener("wheel", (event) => this.onWheel(event), { passive: false });
    svg.addEventListener("pointerdown", (event) => this.onPointerDown(event));
    svg.addEventListener("pointermove", (event) => this.onPointerMove(event));
    svg.addEventListener("pointerup", () => (this.drag = null));
    svg.addEventListener("pointercancel", () => (this.drag = null));
    svg.addEventListener("keydown", (event) => this.onKey(event));
  }

  /** The visible part of the drawing, in layout coordinates. */
  get view(): Box {
    return { ...this.box };
  }

  fit(): void {
    this.moved = true;
    this.box = { ...this.bounds };
    this.apply();
  }

  /**
   * Starts where one layout unit is at least `minScale` screen pixels: the whole
   * drawing if it fits so, else a window centred on `focus` (its end, `focus`'s
   * right edge, if `focus` is wider). Waits until the drawing has a size on screen.
   */
  startReadable(focus: Box, minScale: number): void {
    const observer = new ResizeObserver(() => {
      const rect = this.svg.getBoundingClientRect();
      if (rect.width === 0 || rect.height === 0) return;
      observer.disconnect();
      if (this.moved) return;
      const { bounds } = this;
      if (Math.min(rect.width / bounds.width, rect.height / bounds.height) >= minScale) return;
      const width = Math.min(bounds.width, rect.width / minScale);
      const height = Math.min(bounds.height, rect.height / minScale);
      const x = focus.width > width ? focus.x + focus.width - width : focus.x + focus.width / 2 - width / 2;
      const y = focus.height > height ? focus.y : focus.y + focus.height / 2 - height / 2;
      this.box = {
        x: clamp(x, bounds.x, bounds.x + bounds.width - width),
        y: clamp(y, bounds.y, bounds.y + bounds.height - height),
        width,
        height,
      };
      this.apply();
    });
    observer.observe(this.svg);
  }

  /** Zooms by `factor` (> 1 zooms in) around (cx, cy) in layout coordinates. */
  zoom(factor: number, cx = this.box.x + this.box.width / 2, cy = this.box.y + this.box.height / 2): void {
    this.moved = true;
    const width = Math.max(MIN_WIDTH, Math.min(this.bounds.width * 8, this.box.width / factor));
    const scale = width / this.box.width;
    this.box = {
      x: cx - (cx - this.box.x) * scale,
      y: cy - (cy - this.box.y) * scale,
      width,
      height: this.box.height * scale,
    };
    this.apply();
  }

  /** Moves the view, at its zoom, so that (x, y) in layout coordinates is its centre. */
  centreOn(x: number, y: number): void {
    this.moved = true;
    this.box = { ...this.box, x: x - this.box.width / 2, y: y - this.box.height / 2 };
    this.apply();
  }

  pan(dx: number, dy: number): void {
    this.moved = true;
    this.box = { ...this.box, x: this.box.x + dx, y: this.box.y + dy };
    this.apply();
  }

  private apply(): void {
    const { x, y, width, height } = this.box;
    this.svg.setAttribute("viewBox", `${x} ${y} ${width} ${height}`);
  }

  /** Layout units per screen pixel (the drawing keeps its aspect ratio). */
  private unitsPerPixel(): number {
    const rect = this.svg.getBoundingClientRect();
    if (rect.width === 0 || rect.height === 0) return 1;
    return Math.max(this.box.width / rect.width, this.box.height / rect.height);
  }

  private toLayout(clientX: number, clientY: number): [number, number] {
    const rect = this.svg.getBoundingClientRect();
    const k = this.unitsPerPixel();
    const cx = this.box.x + this.box.width / 2 + (clientX - rect.left - rect.width / 2) * k;
    const cy = this.box.y + this.box.height / 2 + (clientY - rect.top - rect.height / 2) * k;
    return [cx, cy];
  }

  private onWheel(event: WheelEvent): void {
    event.preventDefault();
    const [cx, cy] = this.toLayout(event.clientX, event.clientY);
    this.zoom(event.deltaY < 0 ? ZOOM_STEP : 1 / ZOOM_STEP, cx, cy);
  }

  private onPointerDown(event: PointerEvent): void {
    if (event.button !== 0 || (event.target as Element).closest("[data-clickable]") !== null) return;
    this.moved = true;
    this.drag = { x: event.clientX, y: event.clientY, box: { ...this.box } };
    this.svg.setPointerCapture(event.pointerId);
  }

  private onPointerMove(event: PointerEvent): void {
    if (this.drag === null) return;
    const k = this.unitsPerPixel();
    this.box = {
      ...this.drag.box,
      x: this.drag.box.x - (event.clientX - this.drag.x) * k,
      y: this.drag.box.y - (event.clientY - this.drag.y) * k,
    };
    this.apply();
  }

  private onKey(event: KeyboardEvent): void {
    if (event.target !== this.svg) return;
    const stepX = this.box.width * PAN_FRACTION;
    const stepY = this.box.height * PAN_FRACTION;
    const actions: Record<string, () => void> = {
      ArrowLeft: () => this.pan(-stepX, 0),
      ArrowRight: () => this.pan(stepX, 0),
      ArrowUp: () => this.pan(0, -stepY),
      ArrowDown: () => this.pan(0, stepY),
      "+": () => this.zoom(ZOOM_STEP),
      "=": () => this.zoom(ZOOM_STEP),
      "-": () => this.zoom(1 / ZOOM_STEP),
      "0": () => this.fit(),
    };
    const action = actions[event.key];
    if (action === undefined) return;
    event.preventDefault();
    action();
  }
}

function clamp(value: number, low: number, high: number): number {
  return Math.max(low, Math.min(value, high));
}
