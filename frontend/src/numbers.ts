// How numbers are shown: compact in cells, full precision in tooltips and the
// details panel. null means "no value" (e.g. no gradient reached the scope).

export function formatCompact(value: number | null): string {
  if (value === null) return "–";
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value === 0) return "0";
  const magnitude = Math.abs(value);
  if (magnitude >= 0.01 && magnitude < 1000) return value.toPrecision(2).replace(/\.?0+$/, "");
  return value.toExponential(1);
}

export function formatFull(value: number | null): string {
  if (value === null) return "none";
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "+Infinity" : "-Infinity";
  if (Number.isInteger(value)) return String(value);
  return value.toPrecision(6);
}

/** Position of `value` on a log scale between `low` and `high`, in [0, 1]. */
export function logPosition(value: number, low: number, high: number): number {
  if (!(value > 0) || !(low > 0) || !(high > low)) return 0.5;
  const t = (Math.log10(value) - Math.log10(low)) / (Math.log10(high) - Math.log10(low));
  return Math.min(1, Math.max(0, t));
}
