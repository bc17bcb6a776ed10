// The Gradscope tab's controller: holds what is selected (run, step, folded
// scopes, cell), fetches through api.ts and redraws the views. Views are
// separate modules that turn data into DOM; they never fetch.

import { fetchMatrix, fetchRunInfo, fetchRuns, type Matrix, type RunInfo, type RunSummary } from "./api";
import { fetchRunExtras, type RunExtras } from "./runExtras";
import { h, replaceChildren } from "./dom";
import { connectHost, type HostMode } from "./host";
import { ScopeTree } from "./scopeTree";
import { updateNormRange } from "./shading";
import { renderDetails } from "./views/details";
import { renderEmptyState } from "./views/emptyState";
import { renderLegend } from "./views/legend";
import { MatrixView, type Selection } from "./views/matrix";
import { ScopeGraphView, type StateOf } from "./views/scopeGraph";
import { Toolbar } from "./views/toolbar";

interface RunView {
  info: RunInfo;
  tree: ScopeTree;
  matrix: Matrix | null;
  /** The FlowGraph, drift, conflict and events: fetched after the matrix shows. */
  extras: RunExtras | null;
  graph: ScopeGraphView | null;
}

export class App {
  private readonly toolbar: Toolbar;
  private readonly messages = h("div", { attrs: { id: "gs-messages" } });
  private readonly body = h("main", { className: "gs-body", attrs: { id: "gs-body" } });
  private runs: RunSummary[] = [];
  private run: string | null = null;
  private view: RunView | null = null;
  /** The step the user chose; null follows the latest kept step. */
  private chosenStep: number | null = null;
  /** Per run, the scopes the user folded or unfolded away from the default. */
  private readonly toggled = new Map<string, Set<string>>();
  private selected: Selection | null = null;
  private error: string | null = null;
  private mode: HostMode | null = null;
  /** Counts requests so a slow, outdated response never overwrites a newer one. */
  private generation = 0;

  constructor(private readonly root: HTMLElement) {
    this.toolbar = new Toolbar({
      onRun: (run) => void this.selectRun(run),
      onStep: (step) => void this.selectStep(step),
      onRefresh: () => void this.refresh(),
    });
    replaceChildren(root, h("div", { className: "gs-app" }, this.toolbar.element, this.messages, this.body));
  }

  start(): void {
    connectHost({
      onReload: () => void this.refresh(),
      onRunsChanged: () => void this.refresh(),
      onMode: (mode) => {
        this.mode = mode;
        // Lets users (and tests) see whether TensorBoard's messages arrive.
        this.root.dataset["host"] = mode;
        this.drawStatus();
      },
    });
    void this.refresh();
  }

  /** Refetches the runs, then the current run at the chosen (or latest) step. */
  async refresh(): Promise<void> {
    const generation = ++this.generation;
    try {
      const runs = await fetchRuns();
      if (generation !== this.generation) return;
      this.runs = runs;
      const names = runs.map((r) => r.run);
      if (this.run === null || !names.includes(this.run)) {
        this.run = names[0] ?? null;
        this.chosenStep = null;
        this.selected = null;
      }
      await this.loadRun(generation);
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  private async selectRun(run: string): Promise<void> {
    this.run = run;
    this.chosenStep = null;
    this.selected = null;
    this.view = null;
    const generation = ++this.generation;
    try {
      await this.loadRun(generation);
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  private async selectStep(step: number): Promise<void> {
    if (this.view === null || this.run === null) return;
    const steps = this.view.info.steps;
    this.chosenStep = step === steps[steps.length - 1] ? null : step;
    const generation = ++this.generation;
    try {
      const matrix = await fetchMatrix(this.run, step);
      if (generation !== this.generation || this.view === null) return;
      this.view.matrix = matrix;
      this.error = null;
      this.draw();
      this.view.graph?.setStates(this.stateOf());
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  private async loadRun(generation: number): Promise<void> {
    const run = this.run;
    if (run === null) {
      this.view = null;
      this.error = null;
      this.draw();
      return;
    }
    const info = await fetchRunInfo(run);
    if (generation !== this.generation) return;
    let step: number | null = null;
    if (info.steps.length > 0) {
      const chosen = this.chosenStep;
      step = chosen !== null && info.steps.includes(chosen) ? chosen : info.steps[info.steps.length - 1]!;
    }
    const matrix = step === null ? null : await fetchMatrix(run, step);
    if (generation !== this.generation) return;
    const previous = this.view !== null && this.view.info.run === run ? this.view : null;
    this.view = { info, tree: new ScopeTree(info.scopes), matrix, extras: previous?.extras ?? null, graph: previous?.graph ?? null };
    this.error = null;
    this.draw();
    const extras = await fetchRunExtras(run);
    if (generation !== this.generation || this.view === null || this.view.info.run !== run) return;
    const sameGraph = this.view.graph !== null && this.view.extras?.flowgraphStep === extras.flowgraphStep;
    this.view.extras = extras;
    if (sameGraph) this.view.graph?.setStates(this.stateOf());
    else this.view.graph = extras.flowgraph === null || extras.flowgraph.nodes.length === 0
      ? null
      : new ScopeGraphView(extras.flowgraph, this.stateOf());
    this.draw();
  }

  /** Flow states at the shown step from the matrix, else the FlowGraph's static ones. */
  private stateOf(): StateOf {
    const matrix = this.view?.matrix ?? null;
    const graph = this.view?.extras?.flowgraph ?? null;
    return (loss, scope) => matrix?.cells[loss]?.[scope]?.state ?? graph?.cells[loss]?.[scope] ?? null;
  }

  private toggle(scope: string): void {
    if (this.run === null) return;
    const toggled = this.toggled.get(this.run) ?? new Set<string>();
    if (toggled.has(scope)) toggled.delete(scope);
    else toggled.add(scope);
    this.toggled.set(this.run, toggled);
    this.draw()?.focusScope(scope);
  }

  private select(selection: Selection): void {
    this.selected = selection;
    this.draw()?.focusCell(selection);
  }

  private fail(error: unknown): void {
    this.error = error instanceof Error ? error.message : String(error);
    this.drawMessages();
  }

  /** Redraws everything below the toolbar; returns the matrix view, if any. */
  private draw(): MatrixView | null {
    this.toolbar.setRuns(this.runs, this.run);
    this.drawStatus();
    this.drawMessages();
    if (this.runs.length === 0) {
      this.toolbar.setSteps([], null);
      replaceChildren(this.body, renderEmptyState());
      return null;
    }
    const view = this.view;
    if (view === null || view.matrix === null) {
      this.toolbar.setSteps(view?.info.steps ?? [], null);
      replaceChildren(this.body, h("p", {}, view === null ? "Loading…" : "This run has no kept steps yet."));
      return null;
    }
    const matrix = view.matrix;
    this.toolbar.setSteps(view.info.steps, matrix.step);
    const toggled = this.toggled.get(matrix.run) ?? new Set<string>();
    const matrixView = new MatrixView(matrix, view.info.losses, view.tree, toggled, this.selected, {
      onToggle: (scope) => this.toggle(scope),
      onSelect: (selection) => this.select(selection),
    });
    replaceChildren(
      this.body,
      matrixView.element,
      h("div", { className: "gs-side" }, renderDetails(matrix, this.selected)),
      renderLegend(updateNormRange(matrix)),
      this.drawExtras(view),
    );
    return matrixView;
  }

  /** The scope graph, charts and events, or a note while they load. */
  private drawExtras(view: RunView): HTMLElement {
    const extras = view.extras;
    if (extras === null) return h("p", { className: "gs-muted gs-wide" }, "Loading the scope graph, drift and events…");
    return h(
      "div",
      { className: "gs-wide" },
      view.graph?.element ?? h("p", { className: "gs-muted", attrs: { id: "gs-graph-none" } }, extras.flowgraph === null
        ? "This run has no FlowGraph, so there is no scope graph."
        : "This run's FlowGraph has no scope graph (no nodes)."),
    );
  }

  private drawStatus(): void {
    const parts: string[] = [];
    const view = this.view;
    if (view !== null) {
      parts.push(`${view.info.scopes.length} scopes · ${view.info.losses.length} losses · ${view.info.steps.length} kept steps`);
    }
    if (this.mode === "polling") parts.push("refreshing every 30 s");
    this.toolbar.setStatus(parts.join(" · "));
  }

  private drawMessages(): void {
    const warnings = [
      ...(this.runs.find((r) => r.run === this.run)?.warnings ?? []),
      ...(this.view?.info.warnings ?? []),
    ];
    const unique = Array.from(new Set(warnings));
    replaceChildren(
      this.messages,
      this.error !== null && h("div", { className: "gs-error", attrs: { role: "alert" } }, this.error),
      unique.length > 0 && h("ul", { className: "gs-warnings", attrs: { "aria-label": "warnings" } }, ...unique.map((w) => h("li", {}, w))),
    );
  }
}
