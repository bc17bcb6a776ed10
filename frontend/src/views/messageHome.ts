// One place per message. A pair anomaly that also breaks a tracks rule carries
// the same message in the Violations panel, the drift chart's marker list and
// the Anomalies table: the Violations row shows it (as `check` prints it) and
// the other two point at that row; an anomaly no rule repeats is shown in the
// Anomalies table, and its drift marker points there.

import type { GradEvent, Violation } from "../api";
import { h } from "../dom";
import { escapeName } from "../names";

/** Where an anomaly's message is shown: the id of the row and what the row is. */
export interface MessageHome {
  id: string;
  /** "Violations" or "Anomalies": the panel holding the row. */
  panel: string;
  /** Words for the row: "the violation of tracks(...)" or "the anomaly row". */
  what: string;
}

/** The id of the Violations panel's row `index`. */
export function violationRowId(index: number): string {
  return `gs-violation-${index}`;
}

/** The id of the Anomalies table's row `index` (one row per group of repeats). */
export function anomalyRowId(index: number): string {
  return `gs-anomaly-${index}`;
}

/** The key that groups repeats of one event (type, name, loss, scope, pair). */
export function eventKey(event: GradEvent): string {
  return [event.type, event.name, event.loss, event.scope, event.pair].join("\u0000");
}

/** The Violations row that shows an event's message (same pair, same words), if any. */
export function violationHome(event: GradEvent, violations: readonly Violation[]): MessageHome | null {
  const index = violations.findIndex((v) => v.message === event.message && v.pair === event.pair);
  if (index < 0) return null;
  return { id: violationRowId(index), panel: "Violations", what: `the violation of ${escapeName(violations[index]!.name)}` };
}

/** A button that brings the row holding the message into view and focuses it. */
export function pointer(home: MessageHome): HTMLElement {
  return h("button", {
    className: "gs-pointer",
    attrs: { type: "button", title: `show the message in ${home.panel}` },
    data: { home: home.id },
    on: { click: () => showRow(home.id) },
  }, `message under ${home.panel}: ${home.what}`);
}

function showRow(id: string): void {
  const row = document.getElementById(id);
  if (row === null) return;
  row.scrollIntoView({ block: "center" });
  row.setAttribute("data-pointed", "true");
  window.setTimeout(() => row.removeAttribute("data-pointed"), 1500);
  row.querySelector<HTMLElement>("button")?.focus({ preventScroll: true });
}
