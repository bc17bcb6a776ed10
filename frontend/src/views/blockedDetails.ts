// What a click on a blocked edge shows: per blocking op, the loss it cuts, the
// op's type and name, why it cuts, both sides, the user's source line, and the
// line and fix `tb-gradscope report` prints for it (from the route). A click on
// any other edge shows what flows along it.

import type { BlockedEdge } from "../api";
import { h } from "../dom";
import { causeText } from "../framework";
import type { FoldedEdge } from "../graph/fold";
import { escapeName } from "../names";

export function sourceText(edge: BlockedEdge): string {
  if (edge.source === null) return "unknown";
  const where = `${edge.source.file}:${edge.source.line}`;
  return edge.source.function ? `${where} (${edge.source.function})` : where;
}

/** `source`: the FlowGraph's framework, whose words say why each cause cuts. */
export function renderBlockedDetails(edge: FoldedEdge, source?: string): HTMLElement {
  const panel = h("section", { className: "gs-details gs-blocked-details" },
    h("h3", {}, `Blocked: ${escapeName(edge.src)} → ${escapeName(edge.dst)}`));
  if (edge.blocked.length === 0) {
    panel.append(h("p", {}, `The gradient of ${edge.blockedFor.map(escapeName).join(", ")} is cut on this edge; the FlowGraph names no op for it.`));
    return panel;
  }
  for (const blocked of edge.blocked) {
    const rows: [string, string][] = [
      ["loss", blocked.loss],
      ["op type", blocked.op_type],
      ["op", blocked.op_name],
      ["cause", `${blocked.cause}: ${causeText(blocked.cause, source)}`],
      ["producer", `${blocked.producer} (${blocked.producer_scope})`],
      ["consumer", `${blocked.consumer} (${blocked.consumer_scope})`],
      ["source", sourceText(blocked)],
      ["report", blocked.line],
      ["fix", blocked.fix],
    ];
    const list = h("dl", { data: { op: blocked.op_name } });
    for (const [term, value] of rows) list.append(h("dt", {}, term), h("dd", { data: { field: term } }, escapeName(value)));
    panel.append(list);
  }
  return panel;
}

/** What a click on an edge that cuts no gradient shows: its ends and what flows along it. */
export function renderEdgeDetails(edge: FoldedEdge): HTMLElement {
  const list = h("dl", {},
    h("dt", {}, "from"), h("dd", { data: { field: "from" } }, escapeName(edge.src)),
    h("dt", {}, "to"), h("dd", { data: { field: "to" } }, escapeName(edge.dst)),
    h("dt", {}, "tensors"), h("dd", { data: { field: "tensors" } }, String(edge.tensors)),
    h("dt", {}, "blocked for"), h("dd", { data: { field: "blocked for" } }, "no loss: gradient may flow back along it"));
  return h("section", { className: "gs-details gs-blocked-details gs-edge-details" },
    h("h3", {}, `Edge: ${escapeName(edge.src)} → ${escapeName(edge.dst)}`), list);
}
