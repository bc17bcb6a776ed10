// How a gradient norm becomes the shade of an "updates" cell: one fixed log
// scale for every run and step (NORM_SCALE), so the same shade means the same
// ‖g‖ in two runs; norms beyond it take its end shades.

import type { Matrix } from "./api";
import { logPosition } from "./numbers";

export interface NormRange {
  low: number;
  high: number;
}

/** The ‖g‖ the lightest and darkest shades stand for, in every run. */
export const NORM_SCALE: NormRange = { low: 1e-6, high: 1e2 };

/** The shade of an "updates" cell whose ‖g‖ is `l2` (null: the middle shade). */
export function updatesShade(l2: number | null): { background: string; color: string } {
  return updatesColour(l2 === null ? 0.5 : logPosition(l2, NORM_SCALE.low, NORM_SCALE.high));
}

/** The smallest and largest positive finite ‖g‖ among cells that update (the legend says where they fall). */
export function updateNormRange(matrix: Matrix): NormRange | null {
  let low = Infinity;
  let high = -Infinity;
  for (const row of Object.values(matrix.cells)) {
    for (const cell of Object.values(row)) {
      if (cell.state !== "updates" || cell.l2 === null || !(cell.l2 > 0) || !Number.isFinite(cell.l2)) continue;
      low = Math.min(low, cell.l2);
      high = Math.max(high, cell.l2);
    }
  }
  return Number.isFinite(low) ? { low, high } : null;
}

/** Background and text colour of an "updates" cell at log position t in [0, 1]. */
export function updatesColour(t: number): { background: string; color: string } {
  const lightness = 88 - 56 * t;
  return {
    background: `hsl(145 52% ${lightness.toFixed(1)}%)`,
    color: lightness > 58 ? "#1f2328" : "#ffffff",
  };
}
