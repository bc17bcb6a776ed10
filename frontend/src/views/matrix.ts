// The loss × scope matrix: one row per visible scope of the folding tree, one
// column per loss, then the scope's applied update ‖Δθ‖ and ‖Δθ‖/‖θ‖. Cells are
// buttons (keyboard-reachable), coloured by flow state; cells that update are
// shaded by gradient norm on a log scale shared by the whole matrix.

import type { CellStats, LossEntry, Matrix, ScopeEntry, UpdateStats } from "../api";
import { h } from "../dom";
import { stateInfo } from "../flowState";
import { escapeName, nameElement } from "../names";
import { formatCompact, formatFull, formatOptional, formatUpdate } from "../numbers";
import { updatesShade } from "../shading";
import type { Folding, ScopeTree } from "../scopeTree";
import { cellKey as compareKey } from "../compare";
import { type GridRow, RovingGrid } from "./rovingGrid";

const INDENT_PX = 14;

export interface Selection {
  loss: string;
  scope: string;
}

/** The compared run and, per differing cell (compare.cellKey), its state there. */
export interface MatrixDiff {
  run: string;
  differ: ReadonlyMap<string, string>;
}

export interface MatrixHandlers {
  onToggle: (scope: string) => void;
  onSelect: (selection: Selection) => void;
}

export class MatrixView {
  readonly element: HTMLElement;
  private readonly scopeButtons = new Map<string, HTMLButtonElement>();
  private readonly cellButtons = new Map<string, HTMLButtonElement>();
  private readonly grid: RovingGrid;

  constructor(
    matrix: Matrix,
    lossKinds: readonly LossEntry[],
    tree: ScopeTree,
    folding: Folding,
    selected: Selection | null,
    private readonly handlers: MatrixHandlers,
    private readonly diff: MatrixDiff | null = null,
  ) {
    const startPoints = new Set(lossKinds.filter((l) => l.kind === "start_point").map((l) => l.name));
    const header = h(
      "tr",
      {},
      h("th", { attrs: { scope: "col" } }, "Scope"),
      ...matrix.losses.map((loss) => lossHeader(loss, startPoints.has(loss))),
      h("th", { className: "gs-num", attrs: { scope: "col", title: "applied update norm ‖θ_after − θ_before‖" } }, "‖Δθ‖"),
      h("th", { className: "gs-num", attrs: { scope: "col", title: "update / weight ratio ‖Δθ‖ / ‖θ‖" } }, "‖Δθ‖/‖θ‖"),
    );
    const gridRows: GridRow[] = [];
    // A scope the losses recorded nothing for at this step has no row here.
    const present = new Set(matrix.scopes);
    const visible = tree.visible(folding).filter((scope) => present.has(scope.name));
    const rows = visible.map((scope) => {
      const [row, controls] = this.row(matrix, scope, tree, folding, selected);
      gridRows.push(controls);
      return row;
    });
    this.grid = new RovingGrid(gridRows);
    if (selected !== null) this.grid.setCurrent(this.cellButtons.get(cellKey(selected)));
    this.element = h(
      "div",
      { className: "gs-matrix-wrap" },
      h(
        "table",
        {
          className: "gs-matrix",
          attrs: { id: "gs-matrix", "aria-label": `flow matrix at step ${matrix.step}` },
          data: { run: matrix.run, step: String(matrix.step) },
        },
        h("thead", {}, header),
        h("tbody", {}, ...rows),
      ),
    );
    this.grid.attach(this.element);
  }

  focusScope(scope: string): void {
    this.grid.setCurrent(this.scopeButtons.get(scope), true);
  }

  focusCell(selection: Selection): void {
    this.grid.setCurrent(this.cellButtons.get(cellKey(selection)), true);
  }

  private row(
    matrix: Matrix,
    scope: ScopeEntry,
    tree: ScopeTree,
    folding: Folding,
    selected: Selection | null,
  ): [HTMLTableRowElement, GridRow] {
    const parent = tree.hasChildren(scope.name);
    const expanded = parent && tree.isExpanded(scope.name, folding);
    const shortName = scope.parent !== null && scope.name.startsWith(`${scope.parent}/`)
      ? scope.name.slice(scope.parent.length + 1)
      : scope.name;
    const twisty = h("span", { className: "gs-twisty", attrs: { "aria-hidden": "true" } }, parent ? (expanded ? "▾" : "▸") : "");
    // Capped and ellipsised (the full name is the title): a very long name
    // would widen the sticky row header over the cells it labels.
    const nameText = h("span", { className: "gs-scope-name" }, escapeName(shortName));
    const label = parent
      ? h(
          "button",
          {
            className: "gs-scope",
            attrs: { type: "button", title: escapeName(scope.name), "aria-expanded": String(expanded) },
            data: { scope: scope.name },
            on: { click: () => this.handlers.onToggle(scope.name) },
          },
          twisty,
          nameText,
        )
      : h("span", { className: "gs-scope gs-leaf", attrs: { title: escapeName(scope.name) }, data: { scope: scope.name } }, twisty, nameText);
    if (label instanceof HTMLButtonElement) this.scopeButtons.set(scope.name, label);
    const rowHeader = h("th", { attrs: { scope: "row" } }, label);
    rowHeader.style.paddingLeft = `${(scope.depth - 1) * INDENT_PX + 4}px`;

    const buttons = matrix.losses.map((loss) => {
      const stats = matrix.cells[loss]?.[scope.name];
      const isSelected = selected !== null && selected.loss === loss && selected.scope === scope.name;
      return this.cell(loss, scope.name, stats, isSelected);
    });
    const cells = buttons.map((button) => h("td", {}, button));
    const controls: GridRow = [label instanceof HTMLButtonElement ? label : null, ...buttons];
    const update = matrix.updates[scope.name];
    const row = h(
      "tr",
      {
        className: parent && !expanded ? "gs-rollup" : "",
        data: { scope: scope.name, folded: String(parent && !expanded) },
      },
      rowHeader,
      ...cells,
      h("td", { className: "gs-num", data: { column: "update_norm" }, attrs: { title: updateTitle(scope.name, update) } },
        formatUpdate(update?.update_norm ?? null, update?.measured, formatCompact)),
      h("td", { className: "gs-num", data: { column: "ratio" }, attrs: { title: updateTitle(scope.name, update) } },
        formatUpdate(update?.ratio ?? null, update?.measured, formatCompact)),
    );
    return [row, controls];
  }

  private cell(
    loss: string,
    scope: string,
    stats: CellStats | undefined,
    isSelected: boolean,
  ): HTMLButtonElement {
    const info = stateInfo(stats?.state ?? "no_gradient");
    const label = info.state === "updates" ? formatCompact(stats?.l2 ?? null) : info.mark;
    const theirs = this.diff?.differ.get(cellKey({ loss, scope }));
    const compared = theirs === undefined || this.diff === null ? "" : `\nin run ${escapeName(this.diff.run)}: ${stateInfo(theirs).label}`;
    const button = h(
      "button",
      {
        className: "gs-cell",
        attrs: {
          type: "button",
          title: cellTitle(loss, scope, stats) + compared,
          "aria-pressed": String(isSelected),
          "aria-label": `${escapeName(loss)}, ${escapeName(scope)}: ${info.label}`,
        },
        data: { loss, scope, state: info.state, violation: String(stats?.violation === true), diff: String(theirs !== undefined) },
        on: { click: () => this.handlers.onSelect({ loss, scope }) },
      },
      label,
    );
    if (info.state === "updates") {
      const colours = updatesShade(stats?.l2 ?? null);
      button.style.background = colours.background;
      button.style.color = colours.color;
    }
    this.cellButtons.set(cellKey({ loss, scope }), button);
    return button;
  }
}

function lossHeader(loss: string, startPoint: boolean): HTMLTableCellElement {
  const name = nameElement(loss, "gs-name gs-loss-name");
  if (!startPoint) return h("th", { attrs: { scope: "col" }, data: { loss } }, name);
  name.title = `${escapeName(loss)}: a gradient start point (a tensor and its output gradients)`;
  return h("th", { attrs: { scope: "col", title: name.title }, data: { loss } }, name, h("span", { className: "gs-start-point" }, " (start)"));
}

function cellKey(selection: Selection): string {
  return compareKey(selection.loss, selection.scope);
}

/** The tooltip of a cell: every number, one per line. */
export function cellTitle(loss: string, scope: string, stats: CellStats | undefined): string {
  const names = `${escapeName(loss)} × ${escapeName(scope)}`;
  if (stats === undefined) return `${names}\nno data at this step`;
  const lines = [
    names,
    `state: ${stateInfo(stats.state).label}${stats.static_state ? ` (static: ${stats.static_state})` : ""}`,
    `variables with gradient: ${formatFull(stats.grad_vars)}`,
    `‖g‖: ${formatFull(stats.l2)}`,
    `max |g|: ${formatOptional(stats.max_abs, stats.grad_vars > 0)}`,
    `non-finite elements: ${formatFull(stats.nonfinite)}`,
    `zero fraction: ${formatOptional(stats.zero_frac, stats.grad_vars > 0)}`,
  ];
  if (stats.violation) lines.push("violates a flow rule");
  return lines.join("\n");
}

function updateTitle(scope: string, update: UpdateStats | undefined): string {
  if (update === undefined) return `${escapeName(scope)}\nno applied update recorded`;
  return [
    escapeName(scope),
    `‖Δθ‖: ${formatUpdate(update.update_norm, update.measured, formatFull)}`,
    `‖θ‖: ${formatFull(update.weight_norm)}`,
    `‖Δθ‖/‖θ‖: ${formatUpdate(update.ratio, update.measured, formatFull)}`,
  ].join("\n");
}
