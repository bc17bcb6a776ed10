// Drift ‖θ_target − θ_online‖ / ‖θ_online‖ per target/online pair, with the
// pair's anomalies (events of type "anomaly") marked at their step. A chart
// starts readable at any model size: the pair's root first (drawn thicker),
// the non-trainable state rows (BatchNorm moving statistics) folded into one
// line, and the scopes that drift most, MAX_SERIES lines in all; two switches
// unfold the rest.

import type { DriftPair, GradEvent, Violation } from "../api";
import { h, replaceChildren } from "../dom";
import { escapeName } from "../names";
import { formatFull } from "../numbers";
import { groupEvents } from "./eventsList";
import { type ChartSeries, destroyCharts, renderLineChart, type StepMarker } from "./lineChart";
import { anomalyRowId, eventKey, type MessageHome, pointer, violationHome } from "./messageHome";

/** The y axis of a drift chart: what the drift route's `drift` column is (short enough
 * to fit the plot's height; the chart's title says "relative drift"). */
export const DRIFT_AXIS = "‖θt − θo‖ / ‖θo‖";

/** Lines a drift chart draws until the user asks for all of them. */
export const MAX_SERIES = 12;

/** `never_synced` -> "never synced". */
export function anomalyLabel(name: string): string {
  return name.replace(/_/g, " ");
}

/** The pair's root: its declared target scope, else its shallowest scope. */
export function pairRoot(pair: DriftPair): string | null {
  const target = pair.attrs["target"];
  if (typeof target === "string" && pair.scopes.includes(target)) return target;
  return pair.scopes[0] ?? null;
}

/** The rows that are non-trainable state (e.g. BatchNorm moving statistics). */
export function stateScopes(pair: DriftPair): Set<string> {
  const declared = pair.attrs["state_scopes"];
  return new Set(Array.isArray(declared) ? declared.filter((s): s is string => typeof s === "string") : []);
}

function sameSeries(a: readonly (number | null)[], b: readonly (number | null)[]): boolean {
  return a.length === b.length && a.every((v, i) => {
    const w = b[i];
    if (v === null || w === null || w === undefined) return v === w;
    return v === w || Math.abs(v - w) <= 1e-9 * Math.max(Math.abs(v), Math.abs(w));
  });
}

/**
 * The scopes a pair's chart may draw, root first: the root and the scopes under
 * it (an ancestor's roll-up is not the pair's), leaving out a roll-up that
 * repeats its parent's line (a scope whose only content is one child scope).
 */
export function driftScopes(pair: DriftPair): string[] {
  const drift = pair.values["drift"] ?? {};
  const root = pairRoot(pair);
  if (root === null) return [];
  const shown: string[] = [];
  for (const scope of pair.scopes) {
    const values = drift[scope];
    if (values === undefined || (scope !== root && !scope.startsWith(`${root}/`))) continue;
    const parent = shown.filter((s) => scope.startsWith(`${s}/`)).pop();
    if (parent !== undefined && sameSeries(values, drift[parent] ?? [])) continue;
    shown.push(scope);
  }
  return shown;
}

/** The largest finite drift of a series (how much a scope drifts), -1 if none. */
function peak(values: readonly (number | null)[]): number {
  return values.reduce<number>((most, v) => (v !== null && Number.isFinite(v) && v > most ? v : most), -1);
}

/** Drift of several rows together, step by step: √Σdistance² / √Σonline_norm². */
export function combinedDrift(pair: DriftPair, scopes: readonly string[]): (number | null)[] {
  const distance = pair.values["distance"] ?? {};
  const norm = pair.values["online_norm"] ?? {};
  return pair.steps.map((_, i) => {
    let d2 = 0;
    let n2 = 0;
    let seen = false;
    for (const scope of scopes) {
      const d = distance[scope]?.[i];
      const n = norm[scope]?.[i];
      if (d === null || d === undefined || n === null || n === undefined || !Number.isFinite(d) || !Number.isFinite(n)) continue;
      d2 += d * d;
      n2 += n * n;
      seen = true;
    }
    return seen && n2 > 0 ? Math.sqrt(d2) / Math.sqrt(n2) : null;
  });
}

export interface DriftChoice {
  /** Every scope, not only the ones that drift most. */
  all: boolean;
  /** Each state row its own line instead of one folded line. */
  unfoldState: boolean;
}

export interface DriftLines {
  series: ChartSeries[];
  /** Scopes the chart could draw (state rows counted one by one). */
  total: number;
  state: number;
}

/** The lines of a pair's chart for `choice`: root, folded state, then the scopes that drift most. */
export function driftLines(pair: DriftPair, choice: DriftChoice): DriftLines {
  const drift = pair.values["drift"] ?? {};
  const root = pairRoot(pair);
  const state = stateScopes(pair);
  const scopes = driftScopes(pair);
  const stateRows = scopes.filter((s) => state.has(s) && s !== root);
  const others = scopes.filter((s) => s !== root && !state.has(s));
  const series: ChartSeries[] = [];
  if (root !== null && drift[root] !== undefined) series.push({ label: root, values: drift[root]!, main: true });
  if (stateRows.length > 0 && !choice.unfoldState) {
    series.push({ label: `${stateRows.length} moving statistics, folded`, values: combinedDrift(pair, stateRows), key: "" });
  }
  const candidates = [...others, ...(choice.unfoldState ? stateRows : [])];
  const room = choice.all ? candidates.length : Math.max(0, MAX_SERIES - series.length);
  const chosen = new Set([...candidates].sort((a, b) => peak(drift[b]!) - peak(drift[a]!)).slice(0, room));
  for (const scope of candidates) if (chosen.has(scope)) series.push({ label: scope, values: drift[scope]! });
  return { series, total: scopes.length, state: stateRows.length };
}

function renderPair(pair: DriftPair, index: number, markers: StepMarker[]): HTMLElement {
  const choice: DriftChoice = { all: false, unfoldState: false };
  const slot = h("div", {});
  const note = h("span", { className: "gs-muted" });
  const box = (label: string, key: keyof DriftChoice): HTMLLabelElement => {
    const input = h("input", { attrs: { type: "checkbox" }, data: { choice: key } });
    input.addEventListener("change", () => {
      choice[key] = input.checked;
      draw();
    });
    return h("label", {}, input, label);
  };
  const first = driftLines(pair, choice);
  const controls = h("div", { className: "gs-controls" },
    note,
    first.total > first.series.length && box(`all ${first.total} scopes`, "all"),
    first.state > 0 && box(`each moving statistic (${first.state})`, "unfoldState"));
  const draw = (): void => {
    const lines = driftLines(pair, choice);
    note.textContent = `${lines.series.length} lines for ${lines.total} target scopes`;
    destroyCharts(slot);
    const chart = renderLineChart({
      id: `gs-drift-${index}`,
      title: `${escapeName(pair.name)}: relative drift of the pair's root and the target scopes that drift most`,
      steps: pair.steps,
      series: lines.series,
      log: false,
      markers,
      yLabel: DRIFT_AXIS,
    });
    chart.dataset["pair"] = pair.name;
    replaceChildren(slot, chart);
  };
  draw();
  return h("div", { className: "gs-drift-pair", data: { pair: pair.name } }, slot, tauNote(pair), controls);
}

/** The last recorded step at which `values` holds a finite number, and the number. */
export function lastFinite(steps: readonly number[], values: readonly (number | null)[]): [number, number] | null {
  for (let i = Math.min(steps.length, values.length) - 1; i >= 0; i--) {
    const v = values[i];
    if (v !== null && v !== undefined && Number.isFinite(v)) return [steps[i]!, v];
  }
  return null;
}

/** The effective τ of the pair's root (the drift route's `tau`) at its last step with one, beside the declared τ or copy period. */
function tauNote(pair: DriftPair): HTMLElement {
  const root = pairRoot(pair);
  const last = root === null ? null : lastFinite(pair.steps, pair.values["tau"]?.[root] ?? []);
  const declared: string[] = [];
  if (typeof pair.attrs["tau"] === "number") declared.push(`declared τ ${String(pair.attrs["tau"])}`);
  if (typeof pair.attrs["every"] === "number") declared.push(`declared copy every ${String(pair.attrs["every"])} steps`);
  const text = last === null
    ? `effective τ of ${escapeName(root ?? pair.name)}: not defined at any recorded step`
    : `effective τ of ${escapeName(root!)} at step ${last[0]}: ${formatFull(last[1])}`;
  return h("p", { className: "gs-tau", data: { step: last === null ? "" : String(last[0]), tau: last === null ? "" : String(last[1]) } },
    declared.length > 0 ? `${text} (${declared.join(", ")})` : text);
}

/** Per pair, its charts; each anomaly marker says where its message is shown (Violations, else Anomalies). */
export function renderDriftCharts(pairs: DriftPair[], events: GradEvent[], violations: readonly Violation[] = []): HTMLElement {
  const section = h("section", { className: "gs-drift", attrs: { id: "gs-drift", "aria-label": "drift" } }, h("h2", {}, "Drift of target/online pairs"));
  if (pairs.length === 0) {
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-drift-empty" } }, "This run records no target/online pair."));
    return section;
  }
  const rowOf = new Map(groupEvents(events.filter((e) => e.type !== "violation")).map((g, i) => [eventKey(g.first), i]));
  const homeOf = (e: GradEvent): MessageHome => violationHome(e, violations)
    ?? { id: anomalyRowId(rowOf.get(eventKey(e)) ?? 0), panel: "Anomalies", what: `${anomalyLabel(escapeName(e.name))} at step ${e.step}` };
  pairs.forEach((pair, index) => {
    const markers: StepMarker[] = events
      .filter((e) => e.type === "anomaly" && e.pair === pair.name)
      .map((e) => {
        const home = homeOf(e);
        return {
          step: e.step, label: anomalyLabel(escapeName(e.name)), name: e.name,
          title: `${anomalyLabel(escapeName(e.name))}: its message is under ${home.panel}`,
          detail: () => pointer(home),
        };
      });
    section.append(renderPair(pair, index, markers));
  });
  return section;
}
