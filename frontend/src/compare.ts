// Two runs side by side: the cells of the shown matrix whose flow state
// differs from the compared run's at the same step. A cell the other run does
// not have at all counts as differing ("absent").

import { fetchMatrix, fetchRunInfo, type Matrix } from "./api";

export const ABSENT = "absent";

export function cellKey(loss: string, scope: string): string {
  return `${loss}\u0000${scope}`;
}

/** The shown state of (loss, scope): a missing cell shows as no_gradient. */
export function shownState(matrix: Matrix, loss: string, scope: string): string {
  return matrix.cells[loss]?.[scope]?.state ?? "no_gradient";
}

/** For each differing cell of `shown`, the compared run's state. */
export function diffMatrices(shown: Matrix, other: Matrix): Map<string, string> {
  const differ = new Map<string, string>();
  const otherScopes = new Set(other.scopes);
  for (const loss of shown.losses) {
    for (const scope of shown.scopes) {
      const theirs = other.losses.includes(loss) && otherScopes.has(scope) ? shownState(other, loss, scope) : ABSENT;
      if (theirs !== shownState(shown, loss, scope)) differ.set(cellKey(loss, scope), theirs);
    }
  }
  return differ;
}

export interface Comparison {
  run: string;
  /** The compared run's step: the shown step if it kept it, else its latest. */
  step: number;
  differ: Map<string, string>;
}

/** The compared run's matrix at the shown step (or its latest step), diffed with `shown`.
 * Asks for the compared run's kept steps first, so no request ends in a 404. */
export async function compareWith(shown: Matrix, run: string): Promise<Comparison> {
  const info = await fetchRunInfo(run);
  const step = info.steps.includes(shown.step) ? shown.step : null;
  const other = await fetchMatrix(run, step);
  return { run, step: other.step, differ: diffMatrices(shown, other) };
}
