// The toolbar: run picker, step slider over the kept steps, refresh button and
// a status line. Built once and updated in place so a control keeps focus
// while the user drags the slider or moves through runs with the keyboard.

import type { RunSummary } from "../api";
import { h, replaceChildren } from "../dom";
import { escapeName, shortName } from "../names";

export interface ToolbarHandlers {
  onRun: (run: string) => void;
  /** The run to compare with, or null for none. */
  onCompare: (run: string | null) => void;
  onStep: (step: number) => void;
  onRefresh: () => void;
  /** The text of the scope filter ("" for none). */
  onFilter: (query: string) => void;
}

/** How long the filter waits for the next keystroke. */
const FILTER_DELAY_MS = 200;

export class Toolbar {
  readonly element: HTMLElement;
  private readonly runSelect: HTMLSelectElement;
  private readonly compareSelect: HTMLSelectElement;
  private readonly slider: HTMLInputElement;
  private readonly stepLabel: HTMLOutputElement;
  private readonly status: HTMLElement;
  private readonly filterInput: HTMLInputElement;
  private readonly filterCount = h("span", { className: "gs-muted", attrs: { id: "gs-filter-count", "aria-live": "polite" } });
  private steps: number[] = [];
  private filterTimer: number | undefined;

  constructor(handlers: ToolbarHandlers) {
    this.runSelect = h("select", {
      attrs: { id: "gs-run", name: "run" },
      on: { change: () => handlers.onRun(this.runSelect.value) },
    });
    this.compareSelect = h("select", {
      attrs: { id: "gs-compare", name: "compare" },
      on: { change: () => handlers.onCompare(this.compareSelect.value === "" ? null : this.compareSelect.value) },
    });
    this.slider = h("input", {
      attrs: { id: "gs-step", type: "range", min: "0", max: "0", step: "1", value: "0" },
      on: {
        input: () => {
          const step = this.steps[Number(this.slider.value)];
          if (step === undefined) return;
          this.showStep(step);
          handlers.onStep(step);
        },
      },
    });
    this.stepLabel = h("output", { className: "gs-step-label", attrs: { for: "gs-step", "aria-live": "polite" } });
    this.status = h("span", { className: "gs-status", attrs: { role: "status" } });
    this.filterInput = h("input", {
      attrs: { id: "gs-filter", type: "search", placeholder: "text in a name", autocomplete: "off" },
      on: { input: () => this.filterSoon(handlers, this.filterInput.value) },
    });
    this.element = h(
      "header",
      { className: "gs-toolbar" },
      h("h1", {}, "Gradscope"),
      h("label", {}, "Run", this.runSelect),
      h("label", {}, "Compare with", this.compareSelect),
      h("label", {}, "Step", this.slider, this.stepLabel),
      h("button", { attrs: { type: "button", id: "gs-refresh" }, on: { click: handlers.onRefresh } }, "Refresh"),
      h("label", {}, "Filter scopes", this.filterInput, this.filterCount),
      this.status,
    );
  }

  setRuns(runs: readonly RunSummary[], selected: string | null): void {
    const names = runs.map((r) => r.run);
    const current = Array.from(this.runSelect.options, (o) => o.value);
    if (names.join("\u0000") !== current.join("\u0000")) {
      replaceChildren(this.runSelect, ...names.map(runOption));
    }
    if (selected !== null) this.runSelect.value = selected;
    this.runSelect.title = selected === null ? "" : escapeName(selected);
    this.runSelect.disabled = runs.length === 0;
  }

  setCompare(runs: readonly RunSummary[], shown: string | null, selected: string | null): void {
    const names = ["", ...runs.map((r) => r.run).filter((name) => name !== shown)];
    const current = Array.from(this.compareSelect.options, (o) => o.value);
    if (names.join("\u0000") !== current.join("\u0000")) {
      replaceChildren(this.compareSelect, ...names.map((name) => (name === "" ? h("option", { attrs: { value: "" } }, "none") : runOption(name))));
    }
    this.compareSelect.value = selected !== null && names.includes(selected) ? selected : "";
    this.compareSelect.title = this.compareSelect.value === "" ? "" : escapeName(this.compareSelect.value);
    this.compareSelect.disabled = names.length <= 1;
  }

  setSteps(steps: readonly number[], current: number | null): void {
    this.steps = [...steps];
    this.slider.max = String(Math.max(0, steps.length - 1));
    this.slider.disabled = steps.length <= 1;
    const index = current === null ? -1 : steps.indexOf(current);
    this.slider.value = String(index >= 0 ? index : Math.max(0, steps.length - 1));
    this.slider.setAttribute("aria-valuetext", current === null ? "no steps" : `step ${current}`);
    this.showStep(current);
  }

  /** Filters once typing pauses: each keystroke would redraw the matrix (10,000 rows for "b"). */
  private filterSoon(handlers: ToolbarHandlers, query: string): void {
    window.clearTimeout(this.filterTimer);
    this.filterTimer = window.setTimeout(() => handlers.onFilter(query), FILTER_DELAY_MS);
  }

  /** Empties the scope filter (a finding must show a scope the filter hides). */
  clearFilter(): void {
    window.clearTimeout(this.filterTimer);
    this.filterInput.value = "";
  }

  /** How many scopes the filter matches, or nothing when there is no filter. */
  setFilterCount(text: string): void {
    this.filterCount.textContent = text;
  }

  setStatus(text: string): void {
    this.status.textContent = text;
  }

  private showStep(step: number | null): void {
    const last = this.steps[this.steps.length - 1];
    this.stepLabel.textContent = step === null ? "–" : `${step}${step === last ? " (latest)" : ""}`;
    if (step !== null) this.slider.setAttribute("aria-valuetext", `step ${step}`);
  }
}

/** A run's option: its escaped name, cut short so the list stays narrow; the full name on hover. */
function runOption(name: string): HTMLOptionElement {
  return h("option", { attrs: { value: name, title: escapeName(name) } }, shortName(name, 64));
}
