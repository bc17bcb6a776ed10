// The flow states of a (loss, scope) cell, in the words of DESIGN.md, with the
// short mark shown in a cell (so states never rely on colour alone) and the
// sentence shown in the legend.

export interface FlowStateInfo {
  state: string;
  label: string;
  mark: string;
  meaning: string;
}

export const FLOW_STATES: readonly FlowStateInfo[] = [
  { state: "updates", label: "updates", mark: "", meaning: "gradient reaches the scope and the optimizer applies it (shade: gradient norm, log scale)" },
  { state: "ignored", label: "ignored", mark: "ign", meaning: "gradient reaches the scope but the optimizer does not apply it" },
  { state: "blocked", label: "blocked", mark: "⊘", meaning: "the loss depends on the scope but every gradient path is cut" },
  { state: "independent", label: "independent", mark: "·", meaning: "the loss does not depend on the scope at all" },
  { state: "vanishing", label: "vanishing", mark: "≈0", meaning: "gradient is numerically zero at this step" },
  { state: "nonfinite", label: "nonfinite", mark: "NaN", meaning: "gradient holds NaN or Inf at this step" },
  { state: "no_gradient", label: "no gradient", mark: "–", meaning: "no gradient was recorded for the scope" },
];

const BY_STATE = new Map(FLOW_STATES.map((info) => [info.state, info]));

/** Known states keep their name; anything else from the wire becomes "unknown". */
export function stateInfo(state: string): FlowStateInfo {
  return BY_STATE.get(state) ?? { state: "unknown", label: state, mark: "?", meaning: "a state this version does not know" };
}
