// Evidence (the figures and places that prove a violation or a finding) worded
// exactly as `tb-gradscope check` and `doctor` print it
// (tb_gradscope/commands/text.py, `evidence` and `number`): keys sorted, `at`
// left out, paths joined with " -> ", numbers in 4 significant digits as
// Python's "%.4g" writes them, names escaped as the CLI escapes them. The tab
// and the command line then say the same thing in the same words.

import { escapeName } from "./names";

const PATH_KEYS = new Set(["path", "missing_cut"]);

/** `value` as Python's `f"{value:.4g}"` writes a float ("3.244", "0.0001", "1.235e+04", "nan"). */
export function formatG4(value: number): string {
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  if (value === 0) return Object.is(value, -0) ? "-0" : "0";
  const [mantissa = "", exponentText = "0"] = value.toExponential(3).split("e");
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 4) {
    const sign = exponent < 0 ? "-" : "+";
    return `${trimZeros(mantissa)}e${sign}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  return trimZeros(value.toFixed(3 - exponent));
}

function trimZeros(text: string): string {
  return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
}

/**
 * One value as the CLI's `number()` prints it: null as "-", booleans as
 * Python spells them, whole numbers as integers (JSON keeps no int/float
 * distinction; the recorder's counts are ints), other numbers in "%.4g".
 */
export function formatValue(value: unknown): string {
  if (value === null || value === undefined) return "-";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : formatG4(value);
  return escapeName(String(value));
}

/** A list item as Python's `str()` shows it. */
function itemText(value: unknown): string {
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  return escapeName(String(value));
}

/** `cause=missing_stop_gradient l2=3.244 path=target/q -> loss:td` from an evidence object. */
export function formatEvidence(doc: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const key of Object.keys(doc).sort()) {
    if (key === "at" || (key === "path" && JSON.stringify(doc["path"]) === JSON.stringify(doc["missing_cut"]))) continue;
    const value = doc[key];
    let shown: string;
    if (Array.isArray(value)) {
      shown = value.map(itemText).join(PATH_KEYS.has(key) ? " -> " : ", ");
    } else if (value !== null && typeof value === "object") {
      shown = `{${Object.entries(value).map(([k, v]) => `${escapeName(k)}: ${formatValue(v)}`).join(", ")}}`;
    } else {
      shown = formatValue(value);
    }
    parts.push(`${escapeName(key)}=${shown}`);
  }
  return parts.join(" ");
}
