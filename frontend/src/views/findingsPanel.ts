// The Findings panel, at the top of the tab: what `tb-gradscope doctor` finds
// in the run without any rule (a loss training a target network, an actor
// training its critic, losses fighting over a head, pairs that do not follow,
// gradients that vanish), each with where, the evidence, why it is probably a
// bug, the fix, and the rule that pins the fix in CI with a button copying it.
// Clicking a finding shows its cell in the matrix and its edge in the graph.

import type { Finding } from "../api";
import { copyText } from "../clipboard";
import { h } from "../dom";
import { escapeName, nameElement } from "../names";

export interface FindingHandlers {
  onShow: (finding: Finding) => void;
}

function where(finding: Finding): HTMLElement {
  const parts: [string, string][] = [["loss", finding.loss], ["scope", finding.scope], ["pair", finding.pair], ["edge", finding.edge]];
  return h("dd", { className: "gs-concerns", data: { field: "where" } },
    ...parts.filter(([, name]) => name !== "").map(([what, name]) => h("div", {}, `${what} `, nameElement(name))));
}

function ruleLine(finding: Finding): HTMLElement {
  if (finding.rule === "") return h("dd", { data: { field: "rule" } }, h("span", { className: "gs-muted" }, "(no rule kind expresses it)"));
  const status = h("span", { className: "gs-muted gs-copy-status", attrs: { "aria-live": "polite" } });
  const copy = async (): Promise<void> => {
    status.textContent = (await copyText(finding.rule)) ? "copied" : "select the rule and copy it";
  };
  return h("dd", { data: { field: "rule" } },
    h("code", { className: "gs-rule" }, escapeName(finding.rule)), " ",
    h("button", {
      className: "gs-copy",
      attrs: { type: "button", title: "copy the rule, to paste into a rules file (docs/RULES.md)" },
      on: { click: () => void copy() },
    }, "Copy rule"),
    " ", status);
}

function renderFinding(finding: Finding, handlers: FindingHandlers): HTMLElement {
  const what = escapeName(finding.what);
  const prefix = finding.severity === "hazard" ? "note: hazard, " : finding.severity === "question" ? "question: " : "";
  const label = `${prefix}${what}${finding.partial ? " (partial: no FlowGraph)" : ""}`;
  const shows = [finding.loss !== "" && finding.scope !== "" ? "its cell" : "", finding.edge !== "" ? "its edge" : ""].filter(Boolean).join(" and ");
  return h("li", {
    className: "gs-finding",
    data: { kind: finding.kind, loss: finding.loss, scope: finding.scope, pair: finding.pair, edge: finding.edge, rule: finding.rule },
  },
  h("div", { className: "gs-finding-head" },
    h("span", { className: "gs-kind" }, finding.kind),
    h("button", {
      className: "gs-finding-what",
      attrs: { type: "button", title: shows === "" ? what : `${what}\n(show ${shows})` },
      on: { click: () => handlers.onShow(finding) },
    }, label)),
  h("dl", {},
    h("dt", {}, "where"), where(finding),
    h("dt", {}, "evidence"), h("dd", { data: { field: "evidence" } }, escapeName(finding.evidence_text)),
    h("dt", {}, "why"), h("dd", { data: { field: "why" } }, escapeName(finding.why)),
    h("dt", {}, "fix"), h("dd", { data: { field: "fix" } }, escapeName(finding.fix)),
    h("dt", {}, "rule"), ruleLine(finding)));
}

/** The panel for the findings of `run` (null while they load). */
export function renderFindings(run: string | null, findings: Finding[] | null, handlers: FindingHandlers): HTMLElement {
  const section = h("section", { className: "gs-findings", attrs: { id: "gs-findings", "aria-label": "findings" } },
    h("h2", {}, "Findings ", h("span", { className: "gs-muted" }, "— what tb-gradscope doctor finds, no rules needed")));
  if (run !== null) section.dataset["run"] = run;
  if (findings === null) {
    section.append(h("p", { className: "gs-muted" }, "Looking for findings…"));
  } else if (findings.length === 0) {
    section.dataset["count"] = "0";
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-findings-empty" } },
      "No finding: no leak into a target or between losses, no fighting losses, no pair anomaly, no vanishing or non-finite gradient."));
  } else {
    section.dataset["count"] = String(findings.length);
    section.append(h("ol", { className: "gs-finding-list" }, ...findings.map((f) => renderFinding(f, handlers))));
  }
  return section;
}
