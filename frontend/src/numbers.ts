// How numbers are shown: compact in cells, full precision in tooltips and the
// details panel. null means "no value" (e.g. no gradient reached the scope).

/** Significant digits a compact number keeps. */
export const COMPACT_DIGITS = 2;

/**
 * `value` rounded to COMPACT_DIGITS significant digits: plain notation between
 * 0.01 and 1000 ("40", "0.012", "1.5"), else an exponent ("1.2e+3", "4.0e-5").
 * The rounded number is printed as JavaScript prints any number, so its integer
 * zeros are never lost (30.16 shows "30", not "3").
 */
export function formatCompact(value: number | null): string {
  if (value === null) return "–";
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value === 0) return "0";
  const rounded = Number(value.toPrecision(COMPACT_DIGITS));
  const magnitude = Math.abs(rounded);
  if (magnitude >= 0.01 && magnitude < 1000) return String(rounded);
  return value.toExponential(COMPACT_DIGITS - 1);
}

export function formatFull(value: number | null): string {
  if (value === null) return "none";
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "+Infinity" : "-Infinity";
  if (Number.isInteger(value)) return String(value);
  return value.toPrecision(6);
}

/**
 * A statistic a run may leave out (max |g|, zero fraction: `Recorder(grad_columns=...)`),
 * in full. The route sends null when no gradient arrived and when the run did not record
 * it; in a cell that received a gradient, null can only mean the latter.
 */
export function formatOptional(value: number | null, received: boolean): string {
  return value === null && received ? "not recorded" : formatFull(value);
}

/**
 * ‖Δθ‖ or ‖Δθ‖/‖θ‖ of a scope, through `format`; the route marks an update that
 * was not measured (a TF1 step written before a train op writing the scope ran:
 * NaN on disk, docs/FORMAT.md) `measured: false`, shown in words, never as NaN.
 */
export function formatUpdate(
  value: number | null,
  measured: boolean | null | undefined,
  format: (value: number | null) => string,
): string {
  return measured === false ? "not measured" : format(value);
}

/** Position of `value` on a log scale between `low` and `high`, in [0, 1]. */
export function logPosition(value: number, low: number, high: number): number {
  if (!(value > 0) || !(low > 0) || !(high > low)) return 0.5;
  const t = (Math.log10(value) - Math.log10(low)) / (Math.log10(high) - Math.log10(low));
  return Math.min(1, Math.max(0, t));
}
