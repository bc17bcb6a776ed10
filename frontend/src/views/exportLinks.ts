// Downloads of what the tab shows: each route's answer for the current run
// (and step) as CSV or JSON, as plain links to the documented routes.

import { exportUrl, type ExportFormat } from "../api";
import { h } from "../dom";

interface Export {
  route: string;
  label: string;
  params: Record<string, string>;
}

function fileName(route: string, run: string, step: number | null, format: ExportFormat): string {
  const safeRun = run.replace(/[^A-Za-z0-9._-]+/g, "_");
  return `gradscope-${route}-${safeRun}${step === null ? "" : `-step${step}`}.${format}`;
}

export function renderExport(run: string, step: number): HTMLElement {
  const exports: Export[] = [
    { route: "matrix", label: `matrix at step ${step}`, params: { run, step: String(step) } },
    { route: "run", label: "scope tree", params: { run } },
    { route: "flowgraph", label: "FlowGraph (static flow states, blocked edges)", params: { run } },
    { route: "drift", label: "drift", params: { run } },
    { route: "conflict", label: "gradient conflict", params: { run } },
    { route: "events", label: "violations and anomalies", params: { run } },
  ];
  const items = exports.map((e) => h("li", { data: { route: e.route } }, `${e.label}: `,
    ...(["csv", "json"] as const).map((format) => h("a", {
      attrs: {
        href: exportUrl(e.route, e.params, format),
        download: fileName(e.route, run, e.route === "matrix" ? step : null, format),
      },
      data: { format },
    }, format.toUpperCase())).flatMap((a, i) => (i === 0 ? [a] : [" · ", a]))));
  return h("section", { className: "gs-export", attrs: { id: "gs-export", "aria-label": "download" } },
    h("h2", {}, "Download what is shown"), h("ul", {}, ...items));
}
