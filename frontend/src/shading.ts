// How a gradient norm becomes the shade of an "updates" cell: a log scale
// between the smallest and largest norm among the matrix's updating cells.

import type { Matrix } from "./api";

export interface NormRange {
  low: number;
  high: number;
}

/** The smallest and largest positive finite ‖g‖ among cells that update. */
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
