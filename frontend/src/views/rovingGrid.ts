// Keyboard movement in a grid of controls with one tab stop (a "roving
// tabindex"): Tab enters and leaves the grid, arrow keys move inside it, Home
// and End jump within a row. A matrix of thousands of cells stays one Tab away.

export type GridRow = (HTMLElement | null)[];

export class RovingGrid {
  private readonly position = new Map<HTMLElement, [number, number]>();
  private current: HTMLElement | null = null;

  constructor(private readonly rows: readonly GridRow[]) {
    rows.forEach((row, r) =>
      row.forEach((element, c) => {
        if (element === null) return;
        element.tabIndex = -1;
        this.position.set(element, [r, c]);
      }),
    );
    const first = rows.flat().find((e): e is HTMLElement => e !== null) ?? null;
    this.setCurrent(first);
  }

  /** Handles arrow/Home/End keys from inside `container`. */
  attach(container: HTMLElement): void {
    container.addEventListener("keydown", (event) => this.onKey(event));
    container.addEventListener("focusin", (event) => {
      const target = event.target as HTMLElement;
      if (this.position.has(target)) this.setCurrent(target);
    });
  }

  /** Makes `element` the grid's tab stop, and optionally focuses it. */
  setCurrent(element: HTMLElement | null | undefined, focus = false): void {
    if (element === null || element === undefined || !this.position.has(element)) return;
    if (this.current !== null) this.current.tabIndex = -1;
    this.current = element;
    element.tabIndex = 0;
    if (focus) element.focus();
  }

  private onKey(event: KeyboardEvent): void {
    const at = this.position.get(event.target as HTMLElement);
    if (at === undefined) return;
    const [r, c] = at;
    const moves: Record<string, () => HTMLElement | null> = {
      ArrowUp: () => this.scan(r, c, -1, 0),
      ArrowDown: () => this.scan(r, c, 1, 0),
      ArrowLeft: () => this.scan(r, c, 0, -1),
      ArrowRight: () => this.scan(r, c, 0, 1),
      Home: () => this.scan(r, -1, 0, 1),
      End: () => this.scan(r, this.rows[r]!.length, 0, -1),
    };
    const move = moves[event.key];
    if (move === undefined) return;
    event.preventDefault();
    const next = move();
    if (next !== null) this.setCurrent(next, true);
  }

  /** The first control from (r, c), exclusive, stepping by (dr, dc). */
  private scan(r: number, c: number, dr: number, dc: number): HTMLElement | null {
    for (let i = r + dr, j = c + dc; i >= 0 && i < this.rows.length; i += dr, j += dc) {
      const row = this.rows[i]!;
      if (j < 0 || j >= row.length) return null;
      const element = row[j] ?? null;
      if (element !== null) return element;
    }
    return null;
  }
}
