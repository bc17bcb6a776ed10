// Time series of the cells the user picked in the matrix: ‖g‖ per step, one
// line per (loss, scope), with a log-scale switch and a smoothing slider.
// Built once per run and updated in place so the controls keep focus.

import type { SeriesPoint } from "../api";
import { h, replaceChildren } from "../dom";
import { escapeName, nameElement } from "../names";
import { smooth } from "../smoothing";
import type { Selection } from "./matrix";
import { type ChartSeries, destroyCharts, renderLineChart } from "./lineChart";

export interface CellSeries {
  cell: Selection;
  points: SeriesPoint[];
}

/** ‖g‖ per step, with no value at the steps where no variable received a
 * gradient (the table stores 0 there: a blocked cell is not a zero gradient). */
export function gradientNorms(l2: SeriesPoint[], gradVars: SeriesPoint[]): SeriesPoint[] {
  const counts = new Map(gradVars.map((p) => [p[0], p[2]]));
  return l2.map(([step, wall, value]): SeriesPoint => [step, wall, counts.get(step) === 0 ? null : value]);
}

export interface CellSeriesHandlers {
  onRemove: (cell: Selection) => void;
}

export class CellSeriesPanel {
  readonly element: HTMLElement;
  private readonly logBox: HTMLInputElement;
  private readonly smoothing: HTMLInputElement;
  private readonly smoothingLabel = h("output", { attrs: { for: "gs-smoothing" } });
  private readonly chips = h("ul", { className: "gs-chips", attrs: { "aria-label": "charted cells" } });
  private readonly plot = h("div", {});
  private series: CellSeries[] = [];

  constructor(private readonly handlers: CellSeriesHandlers) {
    this.logBox = h("input", { attrs: { id: "gs-log", type: "checkbox", checked: "" }, on: { change: () => this.redraw() } });
    this.smoothing = h("input", {
      attrs: { id: "gs-smoothing", type: "range", min: "0", max: "0.99", step: "0.01", value: "0" },
      on: { input: () => this.redraw() },
    });
    this.element = h(
      "section",
      { className: "gs-series", attrs: { id: "gs-series", "aria-label": "time series of chosen cells" } },
      h("h2", {}, "Gradient norm over steps"),
      h("div", { className: "gs-controls" },
        h("label", {}, this.logBox, "log scale"),
        h("label", {}, "Smoothing", this.smoothing, this.smoothingLabel)),
      this.chips,
      this.plot,
    );
    this.redraw();
  }

  setSeries(series: CellSeries[]): void {
    this.series = series;
    this.redraw();
  }

  private redraw(): void {
    const weight = Number(this.smoothing.value);
    this.smoothingLabel.textContent = weight.toFixed(2);
    replaceChildren(this.chips, ...this.series.map(({ cell }) => h("li", {},
      nameElement(cellLabel(cell)),
      h("button", {
        attrs: { type: "button", "aria-label": `stop charting ${escapeName(cellLabel(cell))}`, title: "remove" },
        on: { click: () => this.handlers.onRemove(cell) },
      }, "×"))));
    destroyCharts(this.plot);
    if (this.series.length === 0) {
      replaceChildren(this.plot, h("p", { className: "gs-muted", attrs: { id: "gs-series-empty" } },
        "Click cells of the matrix to chart their gradient norm over the kept steps."));
      return;
    }
    const steps = Array.from(new Set(this.series.flatMap((s) => s.points.map((p) => p[0])))).sort((a, b) => a - b);
    const lines: ChartSeries[] = this.series.map(({ cell, points }) => {
      const byStep = new Map(points.map((p) => [p[0], p[2]]));
      return { label: cellLabel(cell), values: smooth(steps.map((s) => byStep.get(s) ?? null), weight), empty: "no gradient" };
    });
    replaceChildren(this.plot, renderLineChart({
      id: "gs-series-chart", title: `‖g‖ per step${weight > 0 ? `, smoothed ${weight.toFixed(2)}` : ""}`,
      steps, series: lines, log: this.logBox.checked, yLabel: "‖g‖",
    }));
  }
}

/** "loss × scope", the raw names (escaped where shown). */
function cellLabel(cell: Selection): string {
  return `${cell.loss} × ${cell.scope}`;
}
