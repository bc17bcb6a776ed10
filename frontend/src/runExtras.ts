// What the tab shows besides the matrix, fetched together once per run (and
// again on refresh): the FlowGraph, drift pairs, conflict pairs, events, and
// the conclusions the command line draws from them (doctor's findings, check's
// violations).

import {
  type ConflictPair,
  type DriftPair,
  type Finding,
  type FlowGraph,
  type GradEvent,
  type ViolationsAnswer,
  fetchConflict,
  fetchDrift,
  fetchEvents,
  fetchFindings,
  fetchFlowGraph,
  fetchViolations,
} from "./api";

export interface RunExtras {
  flowgraph: FlowGraph | null;
  /** The step the FlowGraph was written at: a new one means a new layout. */
  flowgraphStep: number | null;
  drift: DriftPair[];
  conflict: ConflictPair[];
  events: GradEvent[];
  findings: Finding[];
  violations: ViolationsAnswer;
}

export async function fetchRunExtras(run: string): Promise<RunExtras> {
  const [flowgraph, drift, conflict, events, findings, violations] = await Promise.all([
    fetchFlowGraph(run),
    fetchDrift(run),
    fetchConflict(run),
    fetchEvents(run),
    fetchFindings(run),
    fetchViolations(run),
  ]);
  return { flowgraph: flowgraph.flowgraph, flowgraphStep: flowgraph.step, drift, conflict, events, findings, violations };
}
