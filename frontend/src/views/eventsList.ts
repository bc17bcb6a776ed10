// Anomalies (and steps skipped or lost), one row per distinct event with the
// step it was first seen (and how often it was seen); a button jumps the step
// slider there. Violations have their own panel (violationsList.ts: what
// `check` prints). Names and messages are escaped and ellipsised (full text on
// hover): the table keeps the page's width whatever the logs say.

import type { GradEvent, Violation } from "../api";
import { h } from "../dom";
import { escapeName, nameElement } from "../names";
import { anomalyRowId, eventKey, pointer, violationHome } from "./messageHome";

export interface EventGroup {
  first: GradEvent;
  count: number;
}

/** Groups repeats of the same event (type, name, loss, scope, pair), first step first. */
export function groupEvents(events: GradEvent[]): EventGroup[] {
  const groups = new Map<string, EventGroup>();
  for (const event of [...events].sort((a, b) => a.step - b.step)) {
    const key = eventKey(event);
    const group = groups.get(key);
    if (group === undefined) groups.set(key, { first: event, count: 1 });
    else group.count += 1;
  }
  return [...groups.values()];
}

/** "loss L", "scope S", "pair P", one a line, each name ellipsised. */
function concerns(event: GradEvent): HTMLElement {
  const parts: [string, string][] = [["loss", event.loss], ["scope", event.scope], ["pair", event.pair]];
  return h("div", { className: "gs-concerns" }, ...parts.filter(([, name]) => name).map(([what, name]) =>
    h("div", {}, `${what} `, nameElement(name))));
}

const COLUMNS: [string, string][] = [
  ["first seen at step", "gs-col-step"], ["type", "gs-col-type"], ["name", "gs-col-name"],
  ["concerns", "gs-col-concerns"], ["message", "gs-col-message"], ["times seen", "gs-col-count"],
];

/** The events that are not violations (those are the Violations panel's); an
 * anomaly whose message a Violations row shows points at that row instead. */
export function renderEvents(events: GradEvent[], onJump: (step: number) => void, violations: readonly Violation[] = []): HTMLElement {
  const section = h("section", { className: "gs-events", attrs: { id: "gs-events", "aria-label": "anomalies" } },
    h("h2", {}, "Anomalies ", h("span", { className: "gs-muted" }, "— target/online pairs, skipped and lost steps")));
  const groups = groupEvents(events.filter((e) => e.type !== "violation"));
  if (groups.length === 0) {
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-events-empty" } }, "No anomaly recorded or derived in this run."));
    return section;
  }
  const rows = groups.map(({ first, count }, index) => {
    const message = escapeName(first.message);
    const home = violationHome(first, violations);
    return h("tr", { attrs: { id: anomalyRowId(index) }, data: { type: first.type, name: first.name, step: String(first.step), key: eventKey(first) } },
      h("td", { className: "gs-num" },
        h("button", { attrs: { type: "button", title: `show step ${first.step}` }, on: { click: () => onJump(first.step) } }, String(first.step))),
      h("td", {}, nameElement(first.type)),
      h("td", {}, nameElement(first.name)),
      h("td", {}, concerns(first)),
      h("td", {}, home === null ? h("div", { className: "gs-message", attrs: { title: message } }, message) : pointer(home)),
      h("td", { className: "gs-num" }, String(count)));
  });
  section.append(h("table", { className: "gs-table gs-events-table" },
    h("colgroup", {}, ...COLUMNS.map(([, className]) => h("col", { className }))),
    h("thead", {}, h("tr", {}, ...COLUMNS.map(([title]) => h("th", { attrs: { scope: "col" } }, title)))),
    h("tbody", {}, ...rows)));
  return section;
}
