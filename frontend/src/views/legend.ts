// The legend: a sample cell and a sentence per flow state, and the log-scale
// ramp that maps gradient norm to the shade of cells that update.

import { h } from "../dom";
import { FLOW_STATES } from "../flowState";
import { formatCompact } from "../numbers";
import { NORM_SCALE, type NormRange, updatesColour } from "../shading";

/** The legend; `range` is the shown step's smallest and largest ‖g‖ of cells that update. */
export function renderLegend(range: NormRange | null): HTMLElement {
  const ramp = h("div", { className: "gs-ramp", attrs: { "aria-hidden": "true" } });
  const stops = [0, 0.25, 0.5, 0.75, 1].map((t) => `${updatesColour(t).background} ${t * 100}%`);
  ramp.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  const items = FLOW_STATES.map((info) => {
    const sample = h("span", { className: "gs-cell", data: { state: info.state }, attrs: { "aria-hidden": "true" } }, info.mark);
    if (info.state === "updates") sample.style.background = updatesColour(0.6).background;
    return h("li", {}, sample, h("span", {}, h("strong", {}, info.label), ` — ${info.meaning}`));
  });
  const violation = h("span", { className: "gs-cell", data: { state: "independent", violation: "true" }, attrs: { "aria-hidden": "true" } });
  items.push(h("li", {}, violation, h("span", {}, h("strong", {}, "outlined"), " — the cell breaks a flow rule")));
  return h(
    "section",
    { className: "gs-legend", attrs: { "aria-label": "legend" } },
    h("h2", {}, "Legend"),
    h("ul", {}, ...items),
    h(
      "div",
      { className: "gs-ramp-box" },
      "‖g‖ of cells that update (log scale, the same in every run):",
      ramp,
      h(
        "div",
        { className: "gs-ramp-labels" },
        h("span", { data: { value: String(NORM_SCALE.low) } }, `≤ ${formatCompact(NORM_SCALE.low)}`),
        h("span", { data: { value: String(NORM_SCALE.high) } }, `≥ ${formatCompact(NORM_SCALE.high)}`),
      ),
      h(
        "p",
        { className: "gs-ramp-span gs-muted", attrs: { id: "gs-ramp-span" } },
        "At this step: ",
        h("span", {}, range ? formatCompact(range.low) : "–"),
        " to ",
        h("span", {}, range ? formatCompact(range.high) : "–"),
      ),
    ),
  );
}
