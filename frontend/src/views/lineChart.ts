// A line chart drawn by uPlot on a canvas, with a legend and step markers we
// build ourselves as text (uPlot's own legend is off). Labels handed to uPlot
// only reach its canvas, never the DOM as markup. Series labels are raw names
// (escaped here); the title and markers come already escaped.

import uPlot from "uplot";
import { h } from "../dom";
import { nameElement } from "../names";
import { formatCompact } from "../numbers";

export interface ChartSeries {
  label: string;
  values: (number | null)[];
  /** What the legend says when the series has no value at all (default "no value"). */
  empty?: string;
  /** Drawn thicker, first in the legend (e.g. a drift pair's root). */
  main?: boolean;
  /** The legend item's data-label (default: the label); "" for a line that is no one series. */
  key?: string;
}

/** A vertical line at a step, labelled (e.g. an anomaly). */
export interface StepMarker {
  step: number;
  label: string;
  title: string;
  name: string;
  /** What the marker list says after the label (default: the title), built anew at each draw. */
  detail?: () => HTMLElement;
}

export interface LineChartSpec {
  id: string;
  title: string;
  steps: number[];
  series: ChartSeries[];
  log: boolean;
  markers?: StepMarker[];
  yLabel: string;
}

/** The uPlot behind each chart figure, so a replaced chart can be destroyed. */
const PLOTS = new WeakMap<Element, uPlot>();

/** Frees the uPlot instances (and their window listeners) of charts under `root`. */
export function destroyCharts(root: Element): void {
  for (const figure of Array.from(root.querySelectorAll(".gs-chart"))) {
    PLOTS.get(figure)?.destroy();
    PLOTS.delete(figure);
  }
}

/** TensorBoard's default run colours (Settings > palette "Default"), light and dark: the scalars dashboard's. */
const PALETTE: [string, string][] = [
  ["#425066", "#8e98a3"], ["#12b5cb", "#12b5cb"], ["#e52592", "#e52592"], ["#f9ab00", "#f9ab00"],
  ["#9334e6", "#9334e6"], ["#7cb342", "#7cb342"], ["#e8710a", "#e8710a"],
];
const HEIGHT = 220;
/** Tick spacings for the step axis: whole steps only (1, 2, 5, 10, 20, 50, ...), never 0.5. */
const STEP_INCRS = Array.from({ length: 10 }, (_, e) => [1, 2, 5].map((m) => m * 10 ** e)).flat();

export function colourOf(index: number): string {
  const [light, dark] = PALETTE[index % PALETTE.length]!;
  return document.documentElement.dataset["theme"] === "dark" ? dark : light;
}

/** Keeps what a log scale can draw: positive finite values. */
function forLog(values: (number | null)[]): (number | null)[] {
  return values.map((v) => (v !== null && Number.isFinite(v) && v > 0 ? v : null));
}

function finite(values: (number | null)[]): (number | null)[] {
  return values.map((v) => (v !== null && Number.isFinite(v) ? v : null));
}

/** The width a chart starts at (the page's, less its padding); a ResizeObserver then fits it to its box. */
function chartWidth(): number {
  return Math.max(320, document.documentElement.clientWidth - 48);
}

/** Keeps a plot as wide as its box (the panel's full width, whatever the window does). */
function fitWidth(plot: uPlot, box: HTMLElement): void {
  new ResizeObserver(() => {
    const width = Math.floor(box.clientWidth);
    if (width > 0 && Math.abs(width - plot.width) > 1) plot.setSize({ width, height: HEIGHT });
  }).observe(box);
}

export function renderLineChart(spec: LineChartSpec): HTMLElement {
  const figure = h("figure", {
    className: "gs-chart",
    attrs: { id: spec.id, "aria-label": spec.title },
    data: { log: String(spec.log), points: String(spec.steps.length), series: String(spec.series.length), yLabel: spec.yLabel },
  });
  figure.append(h("figcaption", { attrs: { title: spec.title } }, spec.title));
  const plotBox = h("div", { className: "gs-plot" });
  figure.append(plotBox);
  const data: uPlot.AlignedData = [
    spec.steps,
    ...spec.series.map((s) => (spec.log ? forLog(s.values) : finite(s.values))),
  ];
  const markers = spec.markers ?? [];
  // Canvas strokes need a real colour: the page's text colour (light or dark theme).
  const ink = getComputedStyle(document.body).color || "#1f2328";
  const options: uPlot.Options = {
    width: chartWidth(),
    height: HEIGHT,
    legend: { show: false },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: false }, y: spec.log ? { distr: 3 } : { auto: true } },
    axes: [
      { label: "step", stroke: ink, grid: { stroke: "rgba(128,128,128,0.2)" }, incrs: STEP_INCRS },
      { label: spec.yLabel, stroke: ink, grid: { stroke: "rgba(128,128,128,0.2)" }, size: 60 },
    ],
    series: [
      {},
      ...spec.series.map((s, i) => ({ label: s.label, stroke: colourOf(i), width: s.main ? 3 : 1.6, spanGaps: true, points: { show: spec.steps.length < 40 } })),
    ],
    hooks: { draw: [(u: uPlot) => placeMarkers(u, markers)] },
  };
  const plot = new uPlot(options, data, plotBox);
  PLOTS.set(figure, plot);
  fitWidth(plot, plotBox);
  figure.append(renderLegend(spec.series));
  if (markers.length > 0) {
    figure.append(h("ul", { className: "gs-marker-list", attrs: { "aria-label": "marked steps" } },
      ...markers.map((m) => h("li", { data: { step: String(m.step), name: m.name } }, `step ${m.step}: ${m.label} — `, m.detail?.() ?? m.title))));
  }
  return figure;
}

function renderLegend(series: ChartSeries[]): HTMLElement {
  return h(
    "ul",
    { className: "gs-chart-legend" },
    ...series.map((s, i) => {
      const last = [...s.values].reverse().find((v) => v !== null) ?? null;
      const swatch = h("span", { className: "gs-swatch", attrs: { "aria-hidden": "true" } });
      swatch.style.background = colourOf(i);
      const value = last === null ? ` ${s.empty ?? "no value"}` : ` last ${formatCompact(last)}`;
      return h("li", { className: s.main ? "gs-main" : "", data: { label: s.key ?? s.label, last: last === null ? "" : String(last) } },
        swatch, nameElement(s.label), h("span", { className: "gs-muted" }, value));
    }),
  );
}

/** Positions one DOM marker per step over the plot (text, not canvas). */
function placeMarkers(u: uPlot, markers: StepMarker[]): void {
  for (const old of Array.from(u.over.querySelectorAll(".gs-marker"))) old.remove();
  for (const marker of markers) {
    const left = u.valToPos(marker.step, "x");
    if (!Number.isFinite(left)) continue;
    const element = h("div", { className: "gs-marker", attrs: { title: marker.title }, data: { step: String(marker.step), name: marker.name } },
      h("span", { className: "gs-marker-label" }, marker.label));
    element.style.left = `${left}px`;
    u.over.appendChild(element);
  }
}
