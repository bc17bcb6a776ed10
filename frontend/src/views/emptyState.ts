// What the tab shows when the logdir holds no gradscope data: how to record some.

import { h } from "../dom";

const SNIPPET = [
  "from tb_gradscope import Recorder",
  "",
  'rec = Recorder(logdir="logs/run1", every_n_steps=10, models={"online": model})',
  "# in the training step:",
  "grads = rec.gradients(tape, {\"td\": loss}, model.trainable_variables)",
  "rec.apply(optimizer, zip(grads, model.trainable_variables))",
].join("\n");

export function renderEmptyState(): HTMLElement {
  return h(
    "section",
    { className: "gs-empty", attrs: { id: "gs-empty" } },
    h("h2", {}, "No gradscope data yet"),
    h("p", {}, "None of the runs in this logdir were recorded with tb_gradscope. Record a run with:"),
    h("pre", {}, h("code", {}, SNIPPET)),
    h("p", {}, "then point TensorBoard at the same logdir. This tab refreshes when TensorBoard reloads its data."),
  );
}
