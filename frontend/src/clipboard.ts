// Copies text to the clipboard from inside TensorBoard's iframe. The async
// Clipboard API needs a secure context and the page's permission; where it is
// refused, a selected off-screen textarea and the "copy" command do the job.

import { h } from "./dom";

/** Copies `text`; resolves to whether the browser accepted it. */
export async function copyText(text: string): Promise<boolean> {
  try {
    if (navigator.clipboard !== undefined) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // Refused (no permission in this frame): fall back to the copy command.
  }
  const area = h("textarea", { attrs: { readonly: "", "aria-hidden": "true" } });
  area.value = text;
  area.style.position = "fixed";
  area.style.left = "-10000px";
  document.body.appendChild(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  return copied;
}
