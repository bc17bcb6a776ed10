// Folds the FlowGraph's scope graph to a depth: every scope deeper than the
// depth collapses into its ancestor at that depth, and the edges between
// collapsed scopes merge (tensor counts add up, blocked losses unite). Input
// and loss nodes never fold. A 500-scope model stays readable this way.

import type { BlockedEdge, FlowGraph, GraphNodeKind } from "../api";

export interface FoldedNode {
  id: string;
  kind: GraphNodeKind;
  label: string;
  /** How many of the FlowGraph's nodes this one stands for. */
  members: number;
}

export interface FoldedEdge {
  id: string;
  src: string;
  dst: string;
  tensors: number;
  blockedFor: string[];
  /** The blocked edges (with op and source line) that this edge carries. */
  blocked: BlockedEdge[];
}

export interface FoldedGraph {
  depth: number;
  nodes: FoldedNode[];
  edges: FoldedEdge[];
}

/** The scope `id` stands for at `depth` (inputs and losses stay themselves). */
export function foldId(id: string, kind: GraphNodeKind | undefined, depth: number): string {
  if (kind !== "scope") return id;
  const parts = id.split("/");
  return parts.length <= depth ? id : parts.slice(0, depth).join("/");
}

/** The deepest scope in the graph (the depth at which nothing folds). */
export function maxScopeDepth(graph: FlowGraph): number {
  let depth = 1;
  for (const node of graph.nodes) {
    if (node.kind === "scope") depth = Math.max(depth, node.id.split("/").length);
  }
  return depth;
}

/** The deepest depth whose folded graph has at most `limit` scope nodes. */
export function readableDepth(graph: FlowGraph, limit: number): number {
  const deepest = maxScopeDepth(graph);
  for (let depth = deepest; depth > 1; depth--) {
    const ids = new Set(graph.nodes.filter((n) => n.kind === "scope").map((n) => foldId(n.id, "scope", depth)));
    if (ids.size <= limit) return depth;
  }
  return 1;
}

export function foldGraph(graph: FlowGraph, depth: number): FoldedGraph {
  const kindOf = new Map(graph.nodes.map((n) => [n.id, n.kind]));
  const nodes = new Map<string, FoldedNode>();
  for (const node of graph.nodes) {
    const id = foldId(node.id, node.kind, depth);
    const existing = nodes.get(id);
    if (existing !== undefined) {
      existing.members += 1;
      continue;
    }
    nodes.set(id, { id, kind: node.kind, label: id === node.id ? node.label : id, members: 1 });
  }
  const edges = new Map<string, FoldedEdge>();
  const fold = (id: string): string => foldId(id, kindOf.get(id) ?? (id.includes(":") ? undefined : "scope"), depth);
  for (const edge of graph.edges) {
    const src = fold(edge.src);
    const dst = fold(edge.dst);
    if (src === dst || !nodes.has(src) || !nodes.has(dst)) continue;
    const id = `${src}\u0000${dst}`;
    const merged = edges.get(id) ?? { id, src, dst, tensors: 0, blockedFor: [], blocked: [] };
    merged.tensors += edge.tensors;
    for (const loss of edge.blocked_for) if (!merged.blockedFor.includes(loss)) merged.blockedFor.push(loss);
    edges.set(id, merged);
  }
  for (const blocked of graph.blocked_edges) {
    const edge = edges.get(`${fold(blocked.producer_scope)}\u0000${fold(blocked.consumer_scope)}`);
    if (edge === undefined) continue;
    edge.blocked.push(blocked);
    if (!edge.blockedFor.includes(blocked.loss)) edge.blockedFor.push(blocked.loss);
  }
  return { depth, nodes: [...nodes.values()], edges: [...edges.values()] };
}
