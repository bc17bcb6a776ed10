// The details panel: every number of the selected (loss, scope) cell and the
// scope's applied update at the shown step.

import type { CellStats, Matrix } from "../api";
import { h } from "../dom";
import { stateInfo } from "../flowState";
import { escapeName } from "../names";
import { formatFull, formatOptional, formatUpdate } from "../numbers";
import { cellKey } from "../compare";
import type { MatrixDiff, Selection } from "./matrix";

export function renderDetails(matrix: Matrix, selection: Selection | null, diff: MatrixDiff | null = null): HTMLElement {
  const panel = h("section", { className: "gs-details", attrs: { id: "gs-details", "aria-live": "polite" } });
  if (selection === null) {
    panel.append(h("h2", {}, "Details"), h("p", {}, "Select a cell to see all its numbers."));
    return panel;
  }
  const stats = matrix.cells[selection.loss]?.[selection.scope];
  const update = matrix.updates[selection.scope];
  const rows: [string, string][] = [
    ["loss", escapeName(selection.loss)],
    ["scope", escapeName(selection.scope)],
    ["step", String(matrix.step)],
  ];
  if (stats === undefined) {
    rows.push(["state", "no data at this step"]);
  } else {
    rows.push(
      ["state", stateInfo(stats.state).label],
      ["static state", stats.static_state ?? "unknown"],
      ["variables with gradient", formatFull(stats.grad_vars)],
      ["‖g‖ (L2)", formatFull(stats.l2)],
      ["max |g|", formatOptional(stats.max_abs, stats.grad_vars > 0)],
      ["non-finite elements", formatFull(stats.nonfinite)],
      ["zero fraction", formatOptional(stats.zero_frac, stats.grad_vars > 0)],
      ["violation", stats.violation ? "yes" : "no"],
    );
  }
  if (diff !== null) {
    const theirs = diff.differ.get(cellKey(selection.loss, selection.scope));
    rows.push([`state in ${escapeName(diff.run)}`, theirs === undefined ? "the same" : stateInfo(theirs).label]);
  }
  rows.push(
    ["‖Δθ‖ applied", formatUpdate(update?.update_norm ?? null, update?.measured, formatFull)],
    ["‖θ‖", formatFull(update?.weight_norm ?? null)],
    ["‖Δθ‖/‖θ‖", formatUpdate(update?.ratio ?? null, update?.measured, formatFull)],
  );
  const list = h("dl", {});
  for (const [term, value] of rows) {
    list.append(h("dt", {}, term), h("dd", { data: { field: term } }, value));
  }
  const heading = `${escapeName(selection.loss)} × ${escapeName(selection.scope)}`;
  panel.append(h("h2", { attrs: { title: heading } }, heading), list);
  if (stats?.state === "blocked") panel.append(whyBlocked(stats));
  return panel;
}

/** Why a blocked cell is blocked: each cut as `tb-gradscope report` prints it (the route's words). */
function whyBlocked(stats: CellStats): HTMLElement {
  const cuts = stats.blocked_by ?? [];
  const section = h("div", { className: "gs-why-blocked", attrs: { id: "gs-why-blocked" } }, h("h3", {}, "Why it is blocked"));
  if (cuts.length === 0) {
    section.append(h("p", { className: "gs-muted" }, stats.static_state === "blocked"
      ? "The FlowGraph names no cut for this cell."
      : `No gradient arrived at this step, though the FlowGraph's static state is ${stats.static_state ?? "unknown"}.`));
    return section;
  }
  for (const cut of cuts) {
    section.append(h("dl", {},
      h("dt", {}, "cut"), h("dd", { data: { field: "cut" } }, escapeName(cut.line)),
      h("dt", {}, "fix"), h("dd", { data: { field: "fix" } }, escapeName(cut.fix))));
  }
  return section;
}
