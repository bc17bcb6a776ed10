// Drift ‖θ_target − θ_online‖ / ‖θ_online‖ per target/online pair, one line
// per target scope, with the pair's anomalies (events of type "anomaly") marked
// at their step.

import type { DriftPair, GradEvent } from "../api";
import { h } from "../dom";
import { renderLineChart, type StepMarker } from "./lineChart";

/** `never_synced` -> "never synced". */
export function anomalyLabel(name: string): string {
  return name.replace(/_/g, " ");
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
      .map((e) => ({ step: e.step, label: anomalyLabel(e.name), title: e.message, name: e.name }));
    const drift = pair.values["drift"] ?? {};
    const scopes = pair.scopes.filter((s) => drift[s] !== undefined);
    const chart = renderLineChart({
      id: `gs-drift-${index}`,
      title: `${pair.name}: drift per target scope`,
      steps: pair.steps,
      series: scopes.map((scope) => ({ label: scope, values: drift[scope] ?? [] })),
      log: false,
      markers,
      yLabel: "drift",
    });
    chart.dataset["pair"] = pair.name;
    section.append(chart);
  });
  return section;
}
