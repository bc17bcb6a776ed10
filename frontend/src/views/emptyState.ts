// What the tab shows when the logdir holds no gradscope data: how to record
// some, and when a run recorded now will show (which depends on TensorBoard's
// --reload_interval, not on its "Reload data" setting).

import { h } from "../dom";
import { POLL_INTERVAL_MS } from "../live";

const SNIPPET = [
  "from tb_gradscope import Recorder",
  "",
  'rec = Recorder(logdir="logs/run1", models={"online": online, "target": target})',
  "",
  "# in the training step:",
  "with rec.tape() as tape:",
  "    td = ...  # your loss",
  'grads_and_vars = rec.gradients(tape, {"td": td}, online.trainable_variables)',
  "rec.apply(optimizer, grads_and_vars)",
].join("\n");

/** When a run written now appears, in TensorBoard's terms. */
export function whenNewRunsShow(reloadInterval: number | null): string {
  const poll = POLL_INTERVAL_MS / 1000;
  if (reloadInterval === 0) {
    return "TensorBoard was started with --reload_interval 0: it read the logdir once, at start, " +
      "so runs written since will not show until it is restarted without that flag.";
  }
  const reads = reloadInterval === null ? "whenever TensorBoard reads the logdir again" : `within about ${reloadInterval + poll + 1} s`;
  return `Point TensorBoard at the same logdir: this tab checks for new runs every ${poll} s while it is visible ` +
    `(whatever TensorBoard's "Reload data" setting), so a run shows ${reads}` +
    (reloadInterval === null ? "." : ` (TensorBoard reads the logdir every ${reloadInterval} s, --reload_interval).`);
}

export function renderEmptyState(reloadInterval: number | null): HTMLElement {
  return h(
    "section",
    { className: "gs-empty", attrs: { id: "gs-empty" } },
    h("h2", {}, "No gradscope data yet"),
    h("p", {}, "No run in this logdir was recorded with tb_gradscope. Record one with a Recorder:"),
    h("pre", {}, h("code", {}, SNIPPET)),
    h("p", { attrs: { id: "gs-empty-when" } }, whenNewRunsShow(reloadInterval)),
  );
}
