// What the tab shows besides the matrix, fetched together once per run (and
// again on refresh): the FlowGraph, drift pairs, conflict pairs and events.

import {
  type ConflictPair,
  type DriftPair,
  type FlowGraph,
  type GradEvent,
  fetchConflict,
  fetchDrift,
  fetchEvents,
  fetchFlowGraph,
} from "./api";

export interface RunExtras {
  flowgraph: FlowGraph | null;
  /** The step the FlowGraph was written at: a new one means a new layout. */
  flowgraphStep: number | null;
  drift: DriftPair[];
  conflict: ConflictPair[];
  events: GradEvent[];
}

export async function fetchRunExtras(run: string): Promise<RunExtras> {
  const [flowgraph, drift, conflict, events] = await Promise.all([
    fetchFlowGraph(run),
    fetchDrift(run),
    fetchConflict(run),
    fetchEvents(run),
  ]);
  return { flowgraph: flowgraph.flowgraph, flowgraphStep: flowgraph.step, drift, conflict, events };
}
