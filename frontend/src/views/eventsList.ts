// Anomalies (and steps skipped or lost), one row per distinct event with the
// step it was first seen (and how often it was seen); a button jumps the step
// slider there. Violations have their own panel (violationsList.ts: what
// `check` prints). Names and messages are escaped and ellipsised (full text on
// hover): the table keeps the page's width whatever the logs say.

import type { GradEvent } from "../api";
import { h } from "../dom";
import { escapeName, nameElement } from "../names";

export interface EventGroup {
  first: GradEvent;
  count: number;
}

/** Groups repeats of the same event (type, name, loss, scope, pair), first step first. */
export function groupEvents(events: GradEvent[]): EventGroup[] {
  const groups = new Map<string, EventGroup>();
  for (const event of [...events].sort((a, b) => a.step - b.step)) {
    const key = [event.type, event.name, event.loss, event.scope, event.pair].join("\u0000");
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

/** The events that are not violations (those are the Violations panel's). */
export function renderEvents(events: GradEvent[], onJump: (step: number) => void): HTMLElement {
  const section = h("section", { className: "gs-events", attrs: { id: "gs-events", "aria-label": "anomalies" } },
    h("h2", {}, "Anomalies ", h("span", { className: "gs-muted" }, "— target/online pairs, skipped and lost steps")));
  const groups = groupEvents(events.filter((e) => e.type !== "violation"));
  if (groups.length === 0) {
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-events-empty" } }, "No anomaly recorded or derived in this run."));
    return section;
  }
  const rows = groups.map(({ first, count }) => {
    const message = escapeName(first.message);
    return h("tr", { data: { type: first.type, name: first.name, step: String(first.step) } },
      h("td", { className: "gs-num" },
        h("button", { attrs: { type: "button", title: `show step ${first.step}` }, on: { click: () => onJump(first.step) } }, String(first.step))),
      h("td", {}, nameElement(first.type)),
      h("td", {}, nameElement(first.name)),
      h("td", {}, concerns(first)),
      h("td", {}, h("div", { className: "gs-message", attrs: { title: message } }, message)),
      h("td", { className: "gs-num" }, String(count)));
  });
  section.append(h("table", { className: "gs-table gs-events-table" },
    h("colgroup", {}, ...COLUMNS.map(([, className]) => h("col", { className }))),
    h("thead", {}, h("tr", {}, ...COLUMNS.map(([title]) => h("th", { attrs: { scope: "col" } }, title)))),
    h("tbody", {}, ...rows)));
  return section;
}
