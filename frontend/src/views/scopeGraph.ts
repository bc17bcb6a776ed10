// The scope graph: scopes, inputs and losses of the FlowGraph, folded to a
// depth and laid out by dagre, drawn as SVG. Choosing a loss highlights the
// scopes it updates at the shown step and the edges between them; blocked
// edges are dashed red with a ⊘, and clicking one (or Enter on it) shows the
// blocking op, its type, cause and source line.

import type { FlowGraph } from "../api";
import { h, replaceChildren } from "../dom";
import { type FoldedEdge, type FoldedGraph, foldGraph, foldId, maxScopeDepth, readableDepth } from "../graph/fold";
import { type Layout, layoutGraph, nodeText } from "../graph/layout";
import { type Box, Viewport } from "../graph/viewport";
import { frameworkName } from "../framework";
import { escapeName, shortName } from "../names";
import { svg } from "../svg";
import { renderBlockedDetails, renderEdgeDetails } from "./blockedDetails";

/** The folded graph starts with at most this many scope nodes. */
export const READABLE_SCOPES = 60;

const MIN_VIEW = { width: 900, height: 360 };
/** Node labels are drawn LABEL_PX layout units tall (style.ts); a large graph
 * opens where they are START_LABEL_PX on screen (the least readable is 10). */
const LABEL_PX = 12;
const START_LABEL_PX = 11;

/** The flow state of (loss, scope) at the shown step, or null if unknown. */
export type StateOf = (loss: string, scope: string) => string | null;

export class ScopeGraphView {
  readonly element: HTMLElement;
  private readonly lossSelect: HTMLSelectElement;
  private readonly depthInput: HTMLInputElement;
  private readonly drawing = h("div", { className: "gs-graph-drawing" });
  private readonly details = h("div", { attrs: { id: "gs-blocked", "aria-live": "polite" } });
  private folded: FoldedGraph;
  private layout: Layout;
  private nodeElements = new Map<string, SVGGElement>();
  private edgeElements = new Map<string, SVGGElement>();
  private stateOf: StateOf;
  private viewport: Viewport | null = null;

  constructor(
    private readonly graph: FlowGraph,
    stateOf: StateOf,
  ) {
    this.stateOf = stateOf;
    const losses = graph.losses.map((l) => l.name);
    this.lossSelect = h(
      "select",
      { attrs: { id: "gs-graph-loss" }, on: { change: () => void this.highlight() } },
      h("option", { attrs: { value: "" } }, "none"),
      ...losses.map((loss) => h("option", { attrs: { value: loss, title: escapeName(loss) } }, shortName(loss))),
    );
    if (losses.length > 0) this.lossSelect.value = losses[0]!;
    const deepest = maxScopeDepth(graph);
    const depth = readableDepth(graph, READABLE_SCOPES);
    this.depthInput = h("input", {
      attrs: { id: "gs-graph-depth", type: "number", min: "1", max: String(deepest), value: String(depth) },
      on: { change: () => this.refold() },
    });
    this.folded = foldGraph(graph, depth);
    this.layout = layoutGraph(this.folded);
    const button = (label: string, title: string, action: () => void): HTMLButtonElement =>
      h("button", { attrs: { type: "button", title, "aria-label": title }, on: { click: action } }, label);
    const framework = frameworkName(graph.source);
    this.element = h(
      "section",
      { className: "gs-graph", attrs: { id: "gs-graph", "aria-label": "scope graph" } },
      h("h2", {}, "Scope graph", framework && h("span", { className: "gs-muted gs-framework", attrs: { id: "gs-graph-framework" } }, ` traced from ${framework}`)),
      h(
        "div",
        { className: "gs-controls" },
        h("label", {}, "Highlight loss", this.lossSelect),
        h("label", {}, "Fold below depth", this.depthInput),
        button("+", "zoom in", () => this.viewport?.zoom(1.25)),
        button("−", "zoom out", () => this.viewport?.zoom(0.8)),
        button("Fit", "fit the graph", () => this.viewport?.fit()),
        h("span", { className: "gs-muted" }, "Drag or arrow keys pan; wheel or +/− zoom. Click an edge to select it; blocked edges (dashed red ⊘) show their op."),
      ),
      this.drawing,
      this.details,
    );
    this.draw();
  }

  /** New per-step states: re-highlights without a new layout. */
  setStates(stateOf: StateOf): void {
    this.stateOf = stateOf;
    this.highlight();
  }

  /**
   * Shows what a finding names: highlights `loss`'s path and marks the edge
   * `edge` ("critic/l2 -> loss:actor", a FlowGraph edge) as folded at the shown
   * depth, centred in the view. Returns whether the edge is drawn.
   */
  showFinding(loss: string, edge: string): boolean {
    if (loss !== "" && Array.from(this.lossSelect.options).some((o) => o.value === loss)) {
      this.lossSelect.value = loss;
      this.highlight();
    }
    for (const element of this.edgeElements.values()) element.removeAttribute("data-finding");
    const named = this.graph.edges.find((e) => `${e.src} -> ${e.dst}` === edge);
    if (named === undefined) return false;
    const kindOf = new Map(this.graph.nodes.map((n) => [n.id, n.kind]));
    const depth = this.folded.depth;
    const id = `${foldId(named.src, kindOf.get(named.src), depth)}\u0000${foldId(named.dst, kindOf.get(named.dst), depth)}`;
    const element = this.edgeElements.get(id);
    if (element === undefined) return false;
    element.setAttribute("data-finding", "true");
    const points = this.layout.edges.get(id)?.points ?? [];
    const mid = points[Math.floor(points.length / 2)];
    if (mid !== undefined) this.viewport?.centreOn(mid.x, mid.y);
    return true;
  }

  private refold(): void {
    const max = Number(this.depthInput.max);
    const depth = Math.min(max, Math.max(1, Math.round(Number(this.depthInput.value) || 1)));
    if (depth === this.folded.depth) return;
    this.folded = foldGraph(this.graph, depth);
    this.layout = layoutGraph(this.folded);
    this.draw();
  }

  private draw(): void {
    const { layout, folded } = this;
    const edgesLayer = svg("g", { class: "gs-edges" });
    const nodesLayer = svg("g", { class: "gs-nodes" });
    this.nodeElements = new Map();
    this.edgeElements = new Map();
    for (const edge of folded.edges) {
      const element = this.edge(edge);
      this.edgeElements.set(edge.id, element);
      edgesLayer.appendChild(element);
    }
    for (const placed of layout.nodes) {
      const { node } = placed;
      const text = nodeText(node);
      const group = svg(
        "g",
        { class: "gs-node", "data-id": node.id, "data-kind": node.kind, transform: `translate(${placed.x - placed.width / 2},${placed.y - placed.height / 2})` },
        svg("title", {}, node.members > 1 ? `${escapeName(node.id)}: ${node.members} scopes folded` : escapeName(node.id)),
        svg("rect", { width: placed.width, height: placed.height, rx: node.kind === "scope" ? 4 : 14 }),
        svg("text", { x: placed.width / 2, y: placed.height / 2, "text-anchor": "middle", "dominant-baseline": "central" }, text),
      );
      this.nodeElements.set(node.id, group);
      nodesLayer.appendChild(group);
    }
    const drawing = svg(
      "svg",
      {
        id: "gs-graph-svg",
        class: "gs-graph-svg",
        tabindex: 0,
        role: "img",
        "aria-label": `scope graph: ${folded.nodes.length} nodes, ${folded.edges.length} edges, folded below depth ${folded.depth}`,
        "data-depth": folded.depth,
        "data-nodes": folded.nodes.length,
        preserveAspectRatio: "xMidYMid meet",
      },
      svg(
        "defs",
        {},
        svg("marker", { id: "gs-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" },
          svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "gs-arrow" })),
      ),
      edgesLayer,
      nodesLayer,
    );
    // A small graph is not blown up past MIN_VIEW: it stays centred at about 1:1.
    const width = Math.max(layout.width, MIN_VIEW.width);
    const height = Math.max(layout.height, MIN_VIEW.height);
    const bounds = { x: (layout.width - width) / 2, y: (layout.height - height) / 2, width, height };
    this.viewport = new Viewport(drawing, bounds);
    replaceChildren(this.drawing, drawing);
    replaceChildren(this.details, h("p", { className: "gs-muted" }, folded.edges.some((e) => e.blocked.length > 0 || e.blockedFor.length > 0)
      ? "Click an edge to select it; a blocked one shows the op that cuts the gradient."
      : "No gradient path is blocked in this graph."));
    const lit = this.highlight();
    this.viewport.startReadable(this.focusBox(lit), START_LABEL_PX / LABEL_PX);
  }

  /** The box around the nodes of the highlighted loss's path (all nodes if none is). */
  private focusBox(lit: ReadonlySet<string>): Box {
    const placed = this.layout.nodes.filter((p) => lit.size === 0 || lit.has(p.node.id));
    const left = Math.min(...placed.map((p) => p.x - p.width / 2));
    const top = Math.min(...placed.map((p) => p.y - p.height / 2));
    const right = Math.max(...placed.map((p) => p.x + p.width / 2));
    const bottom = Math.max(...placed.map((p) => p.y + p.height / 2));
    return { x: left, y: top, width: right - left, height: bottom - top };
  }

  private edge(edge: FoldedEdge): SVGGElement {
    const points = this.layout.edges.get(edge.id)?.points ?? [];
    const d = points.map((p, i) => `${i === 0 ? "M" : "L"} ${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" ");
    const blocked = edge.blockedFor.length > 0;
    // data-clickable: a press on an edge selects it instead of starting a pan (viewport.ts).
    const group = svg("g", { class: blocked ? "gs-edge gs-edge-blocked" : "gs-edge", "data-src": edge.src, "data-dst": edge.dst, "data-blocked": String(blocked), "data-clickable": "true" });
    const names = `${escapeName(edge.src)} → ${escapeName(edge.dst)}`;
    group.appendChild(svg("title", {}, `${names}: ${edge.tensors} tensor${edge.tensors === 1 ? "" : "s"}${blocked ? `; gradient blocked for ${edge.blockedFor.map(escapeName).join(", ")}` : ""}`));
    group.appendChild(svg("path", { d, class: "gs-edge-line", "marker-end": "url(#gs-arrow)" }));
    // A wide invisible stroke over the line: a click anywhere along the edge selects it.
    group.appendChild(svg("path", { d, class: "gs-edge-hit" }));
    const show = (): void => {
      for (const other of this.edgeElements.values()) other.removeAttribute("data-selected");
      group.setAttribute("data-selected", "true");
      replaceChildren(this.details, blocked ? renderBlockedDetails(edge, this.graph.source) : renderEdgeDetails(edge));
    };
    group.addEventListener("click", show);
    if (!blocked) return group;
    const mid = points[Math.floor(points.length / 2)] ?? { x: 0, y: 0 };
    group.appendChild(svg("text", { x: mid.x, y: mid.y, class: "gs-edge-mark", "text-anchor": "middle", "dominant-baseline": "central" }, "⊘"));
    group.setAttribute("tabindex", "0");
    group.setAttribute("role", "button");
    group.setAttribute("aria-label", `blocked edge ${names}; show the blocking op`);
    group.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      event.preventDefault();
      show();
    });
    return group;
  }

  /** Marks the chosen loss's node and the scopes it updates; returns their ids. */
  private highlight(): Set<string> {
    const loss = this.lossSelect.value;
    const lit = new Set<string>();
    for (const [id, element] of this.nodeElements) {
      const kind = element.dataset["kind"];
      let state = "";
      if (loss !== "" && kind === "scope") state = this.stateOf(loss, id) ?? "";
      const on = loss !== "" && ((kind === "scope" && state === "updates") || id === `loss:${loss}`);
      if (on) lit.add(id);
      element.setAttribute("data-flow", state);
      element.setAttribute("data-highlight", String(on));
    }
    this.drawing.firstElementChild?.setAttribute("data-loss", loss);
    for (const edge of this.folded.edges) {
      const element = this.edgeElements.get(edge.id);
      const on = lit.has(edge.src) && lit.has(edge.dst) && !edge.blockedFor.includes(loss);
      element?.setAttribute("data-highlight", String(on));
    }
    return lit;
  }
}
