// Lays a folded scope graph out with dagre (a layered, Sugiyama-style layout):
// data flows left to right, from inputs through scopes into losses.

import dagre from "@dagrejs/dagre";
import { shortName } from "../names";
import type { FoldedGraph, FoldedNode } from "./fold";

export interface Point {
  x: number;
  y: number;
}

export interface PlacedNode {
  node: FoldedNode;
  /** Centre of the node's box. */
  x: number;
  y: number;
  width: number;
  height: number;
}

export interface PlacedEdge {
  id: string;
  points: Point[];
}

export interface Layout {
  nodes: PlacedNode[];
  edges: Map<string, PlacedEdge>;
  width: number;
  height: number;
}

const CHAR_WIDTH = 7;
const NODE_HEIGHT = 28;
const PADDING = 20;

/** Characters a node's label keeps (cut in the middle): a 300-character name
 * would make its box, and the fitted graph, unreadably wide. */
export const NODE_LABEL = 40;

/** The text a node shows: its escaped label, cut short, with how many scopes a folded node holds. */
export function nodeText(node: FoldedNode): string {
  const label = shortName(node.label, NODE_LABEL);
  return node.members > 1 ? `${label} (${node.members})` : label;
}

export function layoutGraph(graph: FoldedGraph): Layout {
  const g = new dagre.graphlib.Graph<{ rankdir: string }, { width: number; height: number }, { edgeId: string }>({ multigraph: false });
  g.setGraph({ rankdir: "LR", nodesep: 14, ranksep: 48, marginx: PADDING, marginy: PADDING } as never);
  g.setDefaultEdgeLabel(() => ({ edgeId: "" }));
  for (const node of graph.nodes) {
    g.setNode(node.id, { width: Math.max(48, nodeText(node).length * CHAR_WIDTH + 20), height: NODE_HEIGHT });
  }
  for (const edge of graph.edges) g.setEdge(edge.src, edge.dst, { edgeId: edge.id });
  dagre.layout(g as never);
  const nodes = graph.nodes.map((node): PlacedNode => {
    const placed = g.node(node.id) as { x: number; y: number; width: number; height: number };
    return { node, x: placed.x, y: placed.y, width: placed.width, height: placed.height };
  });
  const edges = new Map<string, PlacedEdge>();
  for (const edge of graph.edges) {
    const placed = g.edge(edge.src, edge.dst) as { points?: Point[] } | undefined;
    edges.set(edge.id, { id: edge.id, points: placed?.points ?? [] });
  }
  const label = g.graph() as unknown as { width?: number; height?: number };
  return { nodes, edges, width: label.width ?? 0, height: label.height ?? 0 };
}
