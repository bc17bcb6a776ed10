// Violations and anomalies, one row per distinct event with the step it was
// first seen (and how often it was seen); a button jumps the step slider there.

import type { GradEvent } from "../api";
import { h } from "../dom";

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

export function renderEvents(events: GradEvent[], onJump: (step: number) => void): HTMLElement {
  const section = h("section", { className: "gs-events", attrs: { id: "gs-events", "aria-label": "events" } },
    h("h2", {}, "Violations and anomalies"));
  const groups = groupEvents(events);
  if (groups.length === 0) {
    section.append(h("p", { className: "gs-muted", attrs: { id: "gs-events-empty" } }, "No violation or anomaly recorded in this run."));
    return section;
  }
  const rows = groups.map(({ first, count }) => {
    const what = [first.loss && `loss ${first.loss}`, first.scope && `scope ${first.scope}`, first.pair && `pair ${first.pair}`]
      .filter(Boolean).join(", ");
    return h("tr", { data: { type: first.type, name: first.name, step: String(first.step) } },
      h("td", { className: "gs-num" },
        h("button", { attrs: { type: "button", title: `show step ${first.step}` }, on: { click: () => onJump(first.step) } }, String(first.step))),
      h("td", {}, first.type),
      h("td", {}, first.name),
      h("td", {}, what),
      h("td", {}, first.message),
      h("td", { className: "gs-num" }, String(count)));
  });
  section.append(h("table", { className: "gs-table" },
    h("thead", {}, h("tr", {}, ...["first seen at step", "type", "name", "concerns", "message", "times seen"].map((t) => h("th", { attrs: { scope: "col" } }, t)))),
    h("tbody", {}, ...rows)));
  return section;
}
