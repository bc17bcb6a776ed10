// The Violations panel: what `tb-gradscope check` prints for the run, in its
// words: the violations the run recorded while training and those its recorded
// rules (tracks(...) among them) break when evaluated over its logs, each
// marked recorded or evaluated, one row per broken rule: when it broke (at
// trace, at N steps; a button jumps the step slider to the first), the message,
// the evidence in the read side's own phrases, and the rules it implies.
// Above them, what could not be checked and how to make it checkable.

import type { Violation, ViolationsAnswer } from "../api";
import { h } from "../dom";
import { escapeName, nameElement } from "../names";
import { violationRowId } from "./messageHome";

const COLUMNS: [string, string][] = [
  ["when", "gs-col-vstep"], ["source", "gs-col-source"], ["rule", "gs-col-name"],
  ["concerns", "gs-col-concerns"], ["message and evidence", "gs-col-message"], ["also breaks", "gs-col-seen"],
];

function concerns(violation: Violation): HTMLElement {
  const parts: [string, string][] = [["loss", violation.loss], ["scope", violation.scope], ["pair", violation.pair]];
  return h("div", { className: "gs-concerns" }, ...parts.filter(([, name]) => name).map(([what, name]) =>
    h("div", {}, `${what} `, nameElement(name))));
}

function row(violation: Violation, index: number, onJump: (step: number) => void): HTMLElement {
  const message = escapeName(violation.message);
  const evidence = violation.evidence_text.map(escapeName).join("; ");
  return h("tr", {
    attrs: { id: violationRowId(index) },
    data: {
      name: violation.name, step: String(violation.step), source: violation.source,
      loss: violation.loss, scope: violation.scope, pair: violation.pair,
    },
  },
  h("td", { className: "gs-vstep" },
    h("button", { attrs: { type: "button", title: `show step ${violation.step}` }, on: { click: () => onJump(violation.step) } }, violation.when)),
  h("td", {}, h("span", { className: "gs-source", data: { source: violation.source } }, violation.source)),
  h("td", {}, nameElement(violation.name)),
  h("td", {}, concerns(violation)),
  h("td", {},
    h("div", { className: "gs-message", attrs: { title: message } }, message),
    evidence !== "" && h("div", { className: "gs-evidence", attrs: { title: evidence } }, `[${evidence}]`)),
  h("td", { className: "gs-seen" }, violation.also_breaks.map(escapeName).join(", ")));
}

function rulesLine(answer: ViolationsAnswer): HTMLElement {
  if (answer.rules.length === 0) {
    return h("p", { className: "gs-muted", attrs: { id: "gs-violations-rules" } },
      "This run recorded no rules: pass rules=[...] to the Recorder, or run tb-gradscope check --rules FILE.");
  }
  return h("p", { className: "gs-muted", attrs: { id: "gs-violations-rules" } },
    `Rules checked (recorded with the run): `, ...answer.rules.flatMap((rule, i) => [i > 0 ? " · " : "", h("code", {}, escapeName(rule))]));
}

export function renderViolations(answer: ViolationsAnswer, onJump: (step: number) => void): HTMLElement {
  const section = h("section", { className: "gs-events gs-violations", attrs: { id: "gs-violations", "aria-label": "violations" }, data: { run: answer.run, count: String(answer.violations.length) } },
    h("h2", {}, "Violations ", h("span", { className: "gs-muted" }, "— what tb-gradscope check prints for this run")),
    ...answer.warnings.map((warning) => h("p", { className: "gs-note", attrs: { role: "note" }, data: { warning: "true" } }, escapeName(warning))),
    rulesLine(answer));
  if (answer.violations.length === 0) {
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-violations-empty" } }, "No violation: no rule broken, recorded or evaluated."));
    return section;
  }
  section.append(h("table", { className: "gs-table gs-events-table" },
    h("colgroup", {}, ...COLUMNS.map(([, className]) => h("col", { className }))),
    h("thead", {}, h("tr", {}, ...COLUMNS.map(([title]) => h("th", { attrs: { scope: "col" } }, title)))),
    h("tbody", {}, ...answer.violations.map((v, i) => row(v, i, onJump)))));
  return section;
}
