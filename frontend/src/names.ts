// Names from the logs (runs, losses, scopes, pairs, ops, files, messages) as
// the tab shows them. Every C0/C1 control character, DEL and the bidirectional
// marks and overrides become `\xNN` / `\uNNNN`, exactly as the CLI prints them
// (tb_gradscope/commands/text.py, `safe`): a U+202E in a scope name must not
// reorder the text around it, and a newline must not split a label. Long names
// are cut short where text cannot wrap (graph nodes, option lists); the full
// escaped name stays available as the element's title.

import { h } from "./dom";

const BIDI = new Set([0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069]);

function hex(code: number, width: number): string {
  return code.toString(16).padStart(width, "0");
}

/** `text` with control characters and bidi marks escaped, as the CLI shows it. */
export function escapeName(text: string): string {
  let out = "";
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) out += `\\x${hex(code, 2)}`;
    else if (BIDI.has(code)) out += `\\u${hex(code, 4)}`;
    else out += ch;
  }
  return out;
}

/** Names longer than this are cut in the middle where they cannot be ellipsised by CSS. */
export const SHORT_NAME = 48;

/** The escaped name, cut in the middle to at most `max` characters ("head…tail"). */
export function shortName(text: string, max = SHORT_NAME): string {
  const escaped = escapeName(text);
  const chars = Array.from(escaped);
  if (chars.length <= max) return escaped;
  const tail = Math.floor((max - 1) / 3);
  return `${chars.slice(0, max - 1 - tail).join("")}…${chars.slice(chars.length - tail).join("")}`;
}

/** A name as an inline element, ellipsised by CSS when long, the full escaped name on hover. */
export function nameElement(text: string, className = "gs-name"): HTMLSpanElement {
  const escaped = escapeName(text);
  return h("span", { className, attrs: { title: escaped } }, escaped);
}
