// The Gradscope tab's controller: holds what is selected (run, compared run,
// step, folded scopes, cell, charted cells), fetches through api.ts and
// redraws the views. Views are separate modules that turn data into DOM; they
// never fetch.

import { type Finding, fetchMatrix, fetchRunInfo, fetchRuns, fetchSeries, type Matrix, type RunInfo, type RunSummary, type SeriesPoint } from "./api";
import { type Comparison, compareWith } from "./compare";
import { h, replaceChildren } from "./dom";
import { connectHost, type HostMode } from "./host";
import { LivePoller, POLL_INTERVAL_MS, type Status } from "./live";
import { escapeName } from "./names";
import { fetchRunExtras, type RunExtras } from "./runExtras";
import { ScopeTree } from "./scopeTree";
import { updateNormRange } from "./shading";
import { CellSeriesPanel, gradientNorms } from "./views/cellSeries";
import { renderConflictCharts } from "./views/conflictCharts";
import { renderDetails } from "./views/details";
import { renderDriftCharts } from "./views/driftCharts";
import { renderEmptyState } from "./views/emptyState";
import { renderEvents } from "./views/eventsList";
import { renderExport } from "./views/exportLinks";
import { renderFindings } from "./views/findingsPanel";
import { renderLegend } from "./views/legend";
import { destroyCharts } from "./views/lineChart";
import { type MatrixDiff, MatrixView, type Selection } from "./views/matrix";
import { ScopeGraphView, type StateOf } from "./views/scopeGraph";
import { Toolbar } from "./views/toolbar";
import { renderViolations } from "./views/violationsList";

/** What a run without a FlowGraph (an eager loop that never traced its step) lacks, and how to get it. */
export const NO_FLOWGRAPH =
  "no FlowGraph: the step was never traced, so blocked and independent cannot be told apart; " +
  "trace it once with rec.analyze(step_fn, *example_args) or run the step in tf.function";

/** At most this many cells are charted at once; picking another drops the oldest. */
const MAX_CHARTED = 6;

interface RunView {
  info: RunInfo;
  tree: ScopeTree;
  matrix: Matrix | null;
  /** The FlowGraph, drift, conflict and events: fetched after the matrix shows. */
  extras: RunExtras | null;
  graph: ScopeGraphView | null;
  /** Violations, drift, conflict and anomalies, built once per fetch of the extras. */
  panels: HTMLElement | null;
  /** The Findings panel, built once per fetch of the extras (it keeps its buttons' focus). */
  findings: HTMLElement | null;
  comparison: Comparison | null;
}

export class App {
  private readonly toolbar: Toolbar;
  private readonly messages = h("div", { attrs: { id: "gs-messages" } });
  /** Above the matrix: what doctor finds in the run. */
  private readonly findingsBox = h("div", { attrs: { id: "gs-findings-box" } });
  private readonly body = h("main", { className: "gs-body", attrs: { id: "gs-body" } });
  /** Below the matrix: graph, charts, events, downloads (redrawn on their own). */
  private readonly extrasBox = h("div", { className: "gs-wide" });
  private readonly seriesPanel: CellSeriesPanel;
  private runs: RunSummary[] = [];
  private run: string | null = null;
  private compareRun: string | null = null;
  private view: RunView | null = null;
  /** The step the user chose; null follows the latest kept step. */
  private chosenStep: number | null = null;
  /** Per run, the scopes the user folded or unfolded away from the default. */
  private readonly toggled = new Map<string, Set<string>>();
  /** The scope filter's text ("" shows the folded tree). */
  private filter = "";
  private selected: Selection | null = null;
  private charted: Selection[] = [];
  private readonly series = new Map<string, SeriesPoint[]>();
  private error: string | null = null;
  private readonly poller: LivePoller;
  /** Each run's data version in the last status answer; null before the first. */
  private versions: Map<string, string> | null = null;
  /** TensorBoard's --reload_interval as the status route tells it. */
  private reloadInterval: number | null = null;
  /** TensorBoard's DataReloaded messages heard (0 with its "Reload data" off). */
  private hostReloads = 0;
  /** Counts requests so a slow, outdated response never overwrites a newer one. */
  private generation = 0;
  /**
   * A status answer said the shown (or compared) run changed and no load of it
   * has finished since: a newer request that supersedes that load must load it
   * again, since the next status answer will not say so twice.
   */
  private shownStale = false;
  private compareStale = false;

  constructor(private readonly root: HTMLElement) {
    this.toolbar = new Toolbar({
      onRun: (run) => void this.selectRun(run),
      onCompare: (run) => void this.selectCompare(run),
      onStep: (step) => void this.selectStep(step),
      onRefresh: () => {
        this.poller.reset();
        void this.refresh();
      },
      onFilter: (query) => {
        this.filter = query;
        this.draw();
      },
    });
    this.seriesPanel = new CellSeriesPanel({ onRemove: (cell) => this.uncharted(cell) });
    this.poller = new LivePoller((status) => this.onStatus(status), (e) => this.fail(e));
    replaceChildren(root, h("div", { className: "gs-app" }, this.toolbar.element, this.messages, this.findingsBox, this.body));
  }

  start(): void {
    const heard = (): void => {
      this.hostReloads += 1;
      this.root.dataset["hostReloads"] = String(this.hostReloads);
      this.poller.pollNow();
    };
    this.root.dataset["hostReloads"] = "0";
    connectHost({
      onReload: heard,
      onRunsChanged: heard,
      // Lets users (and tests) see whether TensorBoard's messages arrive.
      onMode: (mode: HostMode) => {
        this.root.dataset["host"] = mode;
      },
    });
    this.poller.start();
  }

  /**
   * A changed status answer: the first one loads the tab; later ones refetch
   * the run list when a run came, went or changed, the shown run only when its
   * data changed, and the comparison only when the compared run's did.
   */
  private onStatus(status: Status): void {
    const before = this.versions;
    this.versions = new Map(status.runs.map((r) => [r.run, r.version]));
    const intervalChanged = this.reloadInterval !== status.reload_interval;
    this.reloadInterval = status.reload_interval;
    if (before === null) {
      void this.refresh();
      return;
    }
    const changed = (run: string | null): boolean => run !== null && before.get(run) !== this.versions?.get(run);
    const anyChanged = status.runs.length !== before.size || status.runs.some((r) => changed(r.run));
    this.shownStale ||= changed(this.run);
    this.compareStale ||= changed(this.compareRun);
    if (anyChanged) void this.update();
    else if (intervalChanged) this.draw();
  }

  /** Refetches the run list, then the shown run if its data changed (or it is gone), then the comparison. */
  private async update(): Promise<void> {
    const generation = ++this.generation;
    try {
      const runs = await fetchRuns();
      if (generation !== this.generation) return;
      this.runs = runs;
      const names = runs.map((r) => r.run);
      let reload = this.shownStale;
      if (this.run === null || !names.includes(this.run)) {
        this.run = names[0] ?? null;
        this.resetRunState();
        this.dropView();
        reload = true;
      }
      if (this.compareRun !== null && !names.includes(this.compareRun)) this.compareRun = null;
      if (reload) {
        this.series.clear();
        await this.loadRun(generation);
      } else {
        this.draw();
        if (this.compareStale) await this.loadComparison(generation);
      }
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  /** Redraws what takes its colours from the theme when drawn (the charts), after a theme change. */
  restyle(): void {
    const view = this.view;
    if (view?.extras != null) {
      this.useExtras(view, view.extras);
      if (view.matrix !== null) this.drawExtras(view, view.matrix);
    }
    this.showCharted();
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
        this.resetRunState();
      }
      if (this.compareRun !== null && !names.includes(this.compareRun)) this.compareRun = null;
      this.series.clear();
      await this.loadRun(generation);
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  private resetRunState(): void {
    this.chosenStep = null;
    this.selected = null;
    this.charted = [];
    this.series.clear();
    this.seriesPanel.setSeries([]);
  }

  private async selectRun(run: string): Promise<void> {
    // Choosing the run already shown (a script can) keeps what it shows.
    if (run === this.run && this.view !== null) return;
    this.run = run;
    if (this.compareRun === run) this.compareRun = null;
    this.resetRunState();
    this.dropView();
    const generation = ++this.generation;
    try {
      await this.loadRun(generation);
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  private async selectCompare(run: string | null): Promise<void> {
    this.compareRun = run;
    const generation = ++this.generation;
    try {
      await this.loadComparison(generation);
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
      await this.loadComparison(generation);
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  /** Shows the first kept step at or after `step` (an event's first step). */
  private jumpTo(step: number): void {
    const steps = this.view?.info.steps ?? [];
    const kept = steps.find((s) => s >= step) ?? steps[steps.length - 1];
    if (kept !== undefined) void this.selectStep(kept);
  }

  private async loadRun(generation: number): Promise<void> {
    const run = this.run;
    if (run === null) {
      this.dropView();
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
    this.shownStale = false;
    const previous = this.view !== null && this.view.info.run === run ? this.view : null;
    this.view = {
      info, tree: new ScopeTree(info.scopes), matrix,
      extras: previous?.extras ?? null, graph: previous?.graph ?? null,
      panels: previous?.panels ?? null, findings: previous?.findings ?? null, comparison: previous?.comparison ?? null,
    };
    this.error = null;
    this.draw();
    const extras = await fetchRunExtras(run);
    // Only the run matters here: moving the step slider meanwhile must not drop the extras.
    if (this.view === null || this.view.info.run !== run) return;
    this.useExtras(this.view, extras);
    // Only the part below the matrix changes: the matrix keeps its elements (and focus).
    if (this.view.matrix !== null) this.drawExtras(this.view, this.view.matrix);
    await this.loadComparison(generation);
    await this.loadCharted(generation);
  }

  private useExtras(view: RunView, extras: RunExtras): void {
    const sameGraph = view.graph !== null && view.extras?.flowgraphStep === extras.flowgraphStep;
    view.extras = extras;
    if (sameGraph) view.graph?.setStates(this.stateOf());
    else view.graph = extras.flowgraph === null || extras.flowgraph.nodes.length === 0
      ? null
      : new ScopeGraphView(extras.flowgraph, this.stateOf());
    if (view.panels !== null) destroyCharts(view.panels);
    view.panels = h(
      "div",
      { className: "gs-panels" },
      renderViolations(extras.violations, (step) => this.jumpTo(step)),
      renderDriftCharts(extras.drift, extras.events, extras.violations.violations),
      renderConflictCharts(extras.conflict),
      renderEvents(extras.events, (step) => this.jumpTo(step), extras.violations.violations),
    );
    view.findings = renderFindings(view.info.run, extras.findings, { onShow: (finding) => void this.showFinding(finding) });
    this.drawFindings();
  }

  /** The Findings panel of the shown run (a placeholder while it loads), unless already shown. */
  private drawFindings(): void {
    const view = this.view;
    const panel = this.runs.length === 0 ? null : view?.findings ?? renderFindings(null, null, { onShow: () => undefined });
    if (panel !== null && this.findingsBox.firstElementChild === panel) return;
    replaceChildren(this.findingsBox, panel);
  }

  /**
   * Shows what a finding names: its (loss, scope) cell selected in the matrix
   * (its folded ancestors opened, a filter hiding it cleared; at its last
   * recorded step when the loss has no column at the shown one) and its edge
   * in the scope graph.
   */
  private async showFinding(finding: Finding): Promise<void> {
    const view = this.view;
    if (view === null || view.matrix === null) return;
    const hasCell = (matrix: Matrix): boolean => matrix.cells[finding.loss]?.[finding.scope] !== undefined;
    if (finding.loss !== "" && finding.scope !== "") {
      if (!hasCell(view.matrix) && view.info.steps.includes(finding.last_step)) await this.selectStep(finding.last_step);
      if (this.view === view && view.matrix !== null && hasCell(view.matrix)) {
        this.reveal(finding.scope);
        this.select({ loss: finding.loss, scope: finding.scope });
      }
    }
    view.graph?.showFinding(finding.loss, finding.edge);
  }

  /** Unfolds the scope's ancestors and clears a filter that hides it. */
  private reveal(scope: string): void {
    const view = this.view;
    if (this.run === null || view === null) return;
    const filtered = view.tree.filter(this.filter);
    if (filtered !== null && !filtered.has(scope)) {
      this.filter = "";
      this.toolbar.clearFilter();
    }
    const toggled = this.toggled.get(this.run) ?? new Set<string>();
    for (const ancestor of view.tree.ancestors(scope)) {
      if (view.tree.isExpanded(ancestor, { toggled, filtered: null })) continue;
      if (toggled.has(ancestor)) toggled.delete(ancestor);
      else toggled.add(ancestor);
    }
    this.toggled.set(this.run, toggled);
  }

  private dropView(): void {
    if (this.view?.panels) destroyCharts(this.view.panels);
    this.view = null;
  }

  /** Diffs the shown matrix with the compared run's, or clears the comparison. */
  private async loadComparison(generation: number): Promise<void> {
    const view = this.view;
    if (view === null || view.matrix === null) return;
    if (this.compareRun === null && view.comparison === null) return;
    const comparison = this.compareRun === null ? null : await compareWith(view.matrix, this.compareRun);
    if (generation !== this.generation || this.view !== view) return;
    this.compareStale = false;
    view.comparison = comparison;
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
    const same = (c: Selection): boolean => c.loss === selection.loss && c.scope === selection.scope;
    if (!this.charted.some(same)) {
      this.charted = [...this.charted, selection].slice(-MAX_CHARTED);
      void this.loadCharted(this.generation);
    }
  }

  private uncharted(cell: Selection): void {
    this.charted = this.charted.filter((c) => c.loss !== cell.loss || c.scope !== cell.scope);
    this.showCharted();
  }

  /** Fetches the ‖g‖ series (and how many variables got a gradient) of charted
   * cells not fetched yet, then charts them all. */
  private async loadCharted(generation: number): Promise<void> {
    const run = this.run;
    if (run === null) return;
    try {
      const missing = this.charted.filter((c) => !this.series.has(seriesKey(run, c)));
      const answers = await Promise.all(missing.map((c) => Promise.all([
        fetchSeries(run, "grad_stats", c.loss, c.scope, "l2"),
        fetchSeries(run, "grad_stats", c.loss, c.scope, "grad_vars"),
      ])));
      if (this.run !== run) return;
      missing.forEach((c, i) => {
        const [l2, gradVars] = answers[i]!;
        this.series.set(seriesKey(run, c), gradientNorms(l2.points, gradVars.points));
      });
      this.showCharted();
    } catch (e) {
      if (generation === this.generation) this.fail(e);
    }
  }

  private showCharted(): void {
    const run = this.run;
    if (run === null) return;
    this.seriesPanel.setSeries(this.charted.flatMap((cell) => {
      const points = this.series.get(seriesKey(run, cell));
      return points === undefined ? [] : [{ cell, points }];
    }));
  }

  private fail(error: unknown): void {
    this.error = error instanceof Error ? error.message : String(error);
    this.drawMessages();
  }

  /** Redraws everything below the toolbar; returns the matrix view, if any. */
  private draw(): MatrixView | null {
    this.toolbar.setRuns(this.runs, this.run);
    this.toolbar.setCompare(this.runs, this.run, this.compareRun);
    this.drawStatus();
    this.drawMessages();
    this.drawFindings();
    if (this.runs.length === 0) {
      this.toolbar.setSteps([], null);
      replaceChildren(this.body, renderEmptyState(this.reloadInterval));
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
    const filtered = view.tree.filter(this.filter);
    this.toolbar.setFilterCount(filtered === null ? "" : `${filtered.size} of ${view.info.scopes.length} scopes shown`);
    // A cell the filter hides leaves the Details: they describe what is shown.
    if (filtered !== null && this.selected !== null && !filtered.has(this.selected.scope)) this.selected = null;
    const nothingMatches = filtered !== null && !matrix.scopes.some((scope) => filtered.has(scope));
    const diff: MatrixDiff | null = view.comparison === null ? null : { run: view.comparison.run, differ: view.comparison.differ };
    const focused = focusedIn(this.body);
    const matrixView = new MatrixView(matrix, view.info.losses, view.tree, { toggled, filtered }, this.selected, {
      onToggle: (scope) => this.toggle(scope),
      onSelect: (selection) => this.select(selection),
    }, diff);
    if (nothingMatches) matrixView.element.hidden = true;
    replaceChildren(
      this.body,
      nothingMatches && h("p", { className: "gs-note", attrs: { id: "gs-filter-none", role: "status" } },
        `no scope matches '${escapeName(this.filter.trim())}'`),
      matrixView.element,
      h("div", { className: "gs-side" },
        !view.info.has_flowgraph && h("p", { className: "gs-note", attrs: { id: "gs-no-flowgraph", role: "note" } }, NO_FLOWGRAPH),
        renderDetails(matrix, this.selected, diff),
        this.comparisonNote(view)),
      renderLegend(updateNormRange(matrix)),
      this.extrasBox,
    );
    this.drawExtras(view, matrix);
    refocus(focused, matrixView);
    return matrixView;
  }

  private comparisonNote(view: RunView): HTMLElement | null {
    const comparison = view.comparison;
    if (comparison === null) return null;
    const count = comparison.differ.size;
    return h(
      "p",
      { className: "gs-compare-note", attrs: { id: "gs-compare-note" }, data: { differ: String(count) } },
      `Compared with run ${escapeName(comparison.run)} at step ${comparison.step}: `,
      count === 0 ? "every cell has the same flow state." : `${count} cell${count === 1 ? "" : "s"} differ (outlined dashed; hover for both states).`,
    );
  }

  /** The scope graph, charts, events and downloads, or a note while they load. */
  private drawExtras(view: RunView, matrix: Matrix): void {
    const extras = view.extras;
    if (extras === null) {
      replaceChildren(this.extrasBox, h("p", { className: "gs-muted" }, "Loading the scope graph, drift and events…"));
      return;
    }
    const focused = focusedIn(this.extrasBox);
    replaceChildren(
      this.extrasBox,
      view.graph?.element ?? h("p", { className: "gs-muted", attrs: { id: "gs-graph-none" } }, extras.flowgraph === null
        ? "No scope graph: this run has no FlowGraph (see the note beside the matrix)."
        : "This run's FlowGraph has no scope graph (no nodes)."),
      this.seriesPanel.element,
      view.panels,
      renderExport(matrix.run, matrix.step),
    );
    refocus(focused, null);
  }

  private drawStatus(): void {
    const parts: string[] = [];
    const view = this.view;
    if (view !== null) {
      const { scopes, losses, steps } = view.info;
      parts.push(`${plural(scopes.length, "scope")} · ${plural(losses.length, "loss", "losses")} · ${plural(steps.length, "kept step")}`);
    }
    parts.push(liveText(this.reloadInterval));
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
      this.error !== null && h("div", { className: "gs-error", attrs: { role: "alert" } }, escapeName(this.error)),
      unique.length > 0 && h("ul", { className: "gs-warnings", attrs: { "aria-label": "warnings" } }, ...unique.map((w) => h("li", {}, escapeName(w)))),
    );
  }
}

/** "1 loss", "2 losses". */
export function plural(count: number, one: string, many = `${one}s`): string {
  return `${count} ${count === 1 ? one : many}`;
}

/** What the status line says about new data reaching the tab. */
export function liveText(reloadInterval: number | null): string {
  const poll = POLL_INTERVAL_MS / 1000;
  if (reloadInterval === 0) return "not live: TensorBoard read the logdir once (--reload_interval 0)";
  if (reloadInterval === null) return `live: checks every ${poll} s`;
  return `live: TensorBoard reads the logdir every ${reloadInterval} s, this tab checks every ${poll} s`;
}

function seriesKey(run: string, cell: Selection): string {
  return [run, cell.loss, cell.scope].join("\u0000");
}

// Redrawing replaces or re-inserts elements, which drops the keyboard focus
// they held: a data reload (TensorBoard's, or the 30 s poll) must not send a
// keyboard user back to the top of the page. The control is found again by
// its id, or in the matrix by the cell or scope it stands for.
function focusedIn(container: HTMLElement): HTMLElement | null {
  const active = document.activeElement;
  return active instanceof HTMLElement && container.contains(active) ? active : null;
}

function refocus(focused: HTMLElement | null, matrix: MatrixView | null): void {
  if (focused === null || document.activeElement === focused) return;
  if (focused.isConnected) {
    focused.focus({ preventScroll: true });
    return;
  }
  const { loss, scope } = focused.dataset;
  if (matrix !== null && scope !== undefined) {
    if (loss !== undefined) matrix.focusCell({ loss, scope });
    else matrix.focusScope(scope);
  } else if (focused.id !== "") {
    document.getElementById(focused.id)?.focus({ preventScroll: true });
  }
}
