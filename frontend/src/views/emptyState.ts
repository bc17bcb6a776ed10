// What the tab shows when the logdir holds no gradscope data: how to record some.

import { h } from "../dom";

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

export function renderEmptyState(): HTMLElement {
  return h(
    "section",
    { className: "gs-empty", attrs: { id: "gs-empty" } },
    h("h2", {}, "No gradscope data yet"),
    h("p", {}, "No run in this logdir was recorded with tb_gradscope. Record one with a Recorder:"),
    h("pre", {}, h("code", {}, SNIPPET)),
    h(
      "p",
      {},
      "and point TensorBoard at the same logdir. This tab refreshes when TensorBoard reloads its data; ",
      "the Refresh button asks now.",
    ),
  );
}
