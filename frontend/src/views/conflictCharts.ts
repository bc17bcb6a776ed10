// Gradient conflict: per pair of losses, the cosine of their gradients on each
// scope they share, over steps. Many runs have none (a single loss).

import type { ConflictPair } from "../api";
import { h } from "../dom";
import { escapeName } from "../names";
import { renderLineChart } from "./lineChart";

export function renderConflictCharts(pairs: ConflictPair[]): HTMLElement {
  const section = h("section", { className: "gs-conflict", attrs: { id: "gs-conflict", "aria-label": "gradient conflict" } },
    h("h2", {}, "Gradient conflict (cosine between losses)"));
  if (pairs.length === 0) {
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-conflict-empty" } },
      "No conflict records: no two losses of this run share a recorded scope."));
    return section;
  }
  pairs.forEach((pair, index) => {
    const scopes = pair.scopes.filter((s) => pair.cosine[s] !== undefined);
    const chart = renderLineChart({
      id: `gs-conflict-${index}`,
      title: `${pair.losses.map(escapeName).join(" vs ")}: cosine per shared scope`,
      steps: pair.steps,
      series: scopes.map((scope) => ({ label: scope, values: pair.cosine[scope] ?? [] })),
      log: false,
      yLabel: "cosine",
    });
    chart.dataset["pair"] = pair.name;
    section.append(chart);
  });
  return section;
}
