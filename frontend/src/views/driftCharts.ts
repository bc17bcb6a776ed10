// Drift ‖θ_target − θ_online‖ / ‖θ_online‖ per target/online pair: the pair's
// root first (drawn thicker), then its target scopes, with the pair's anomalies
// (events of type "anomaly") marked at their step.

import type { DriftPair, GradEvent } from "../api";
import { h } from "../dom";
import { escapeName } from "../names";
import { type ChartSeries, renderLineChart, type StepMarker } from "./lineChart";

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

function sameSeries(a: readonly (number | null)[], b: readonly (number | null)[]): boolean {
  return a.length === b.length && a.every((v, i) => {
    const w = b[i];
    if (v === null || w === null || w === undefined) return v === w;
    return v === w || Math.abs(v - w) <= 1e-9 * Math.max(Math.abs(v), Math.abs(w));
  });
}

/**
 * The scopes a pair's chart draws, root first: the root and the scopes under
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

export function renderDriftCharts(pairs: DriftPair[], events: GradEvent[]): HTMLElement {
  const section = h("section", { className: "gs-drift", attrs: { id: "gs-drift", "aria-label": "drift" } }, h("h2", {}, "Drift of target/online pairs"));
  if (pairs.length === 0) {
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-drift-empty" } }, "This run records no target/online pair."));
    return section;
  }
  pairs.forEach((pair, index) => {
    const markers: StepMarker[] = events
      .filter((e) => e.type === "anomaly" && e.pair === pair.name)
      .map((e) => ({ step: e.step, label: anomalyLabel(escapeName(e.name)), title: escapeName(e.message), name: e.name }));
    const drift = pair.values["drift"] ?? {};
    const root = pairRoot(pair);
    const series: ChartSeries[] = driftScopes(pair).map((scope) => ({ label: scope, values: drift[scope] ?? [], main: scope === root }));
    const chart = renderLineChart({
      id: `gs-drift-${index}`,
      title: `${escapeName(pair.name)}: drift of the pair's root and its target scopes`,
      steps: pair.steps,
      series,
      log: false,
      markers,
      yLabel: "drift",
    });
    chart.dataset["pair"] = pair.name;
    section.append(chart);
  });
  return section;
}
