// How the tab names the framework that traced a run (FlowGraph `source`) and
// says, in that framework's words, why a blocked edge cuts the gradient.

/** FlowGraph `source` -> the name its users know. */
const NAMES: Record<string, string> = {
  tf2: "TensorFlow 2",
  tf1: "TensorFlow 1 graph",
  keras: "Keras",
  torch: "PyTorch",
};

/** The framework's name, or null when the FlowGraph does not say. */
export function frameworkName(source: string | undefined): string | null {
  if (!source) return null;
  return NAMES[source] ?? source;
}

const TF_CAUSES: Record<string, string> = {
  stop_gradient: "tf.stop_gradient (or PreventGradient) cuts the path",
  non_differentiable: "the op is registered as not differentiable",
  no_gradient: "the op has no gradient function",
  integer: "the path only crosses integer or bool tensors",
  custom_gradient_none: "a custom gradient returns None",
  unknown_gradient: "an op the analysis does not know",
};

const TORCH_CAUSES: Record<string, string> = {
  ...TF_CAUSES,
  stop_gradient: ".detach(), .data or a torch.no_grad() / inference_mode() region cuts the path",
  non_differentiable: "the function has no derivative (argmax, a comparison, an .item() value)",
  no_gradient: "the function has no backward",
  custom_gradient_none: "a custom autograd.Function's backward returns None",
};

/** Why a cause cuts the path, in the words of the framework that traced the run. */
export function causeText(cause: string, source: string | undefined): string {
  const causes = source === "torch" ? TORCH_CAUSES : TF_CAUSES;
  return causes[cause] ?? "see docs/FORMAT.md";
}
