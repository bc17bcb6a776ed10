// Follows TensorBoard's own light/dark setting, not the operating system's.
//
// TensorBoard 2.21 sends its plugin iframes no theme message (its plugin API
// has GetRuns, GetURLPluginData, RunsChanged and DataReloaded only); it marks
// its own page with `body.dark-mode` (the `dark-mode-supporter` component,
// from its theme menu: browser default, light or dark). The tab's iframe is
// served by the same TensorBoard, so it is same-origin with the page: it reads
// that class and watches it. Opened on its own (no TensorBoard around it), the
// tab follows prefers-color-scheme. It also borrows the page's Roboto
// @font-face rules, so it is set in TensorBoard's font.

export type Theme = "light" | "dark";

/** TensorBoard's page around this iframe, when there is one we may read. */
function hostDocument(): Document | null {
  if (window.parent === window) return null;
  try {
    const doc = window.parent.document;
    return doc.body === null ? null : doc;
  } catch {
    return null; // another origin: not TensorBoard's own page
  }
}

function applyTheme(theme: Theme, onChange: (theme: Theme) => void): void {
  const root = document.documentElement;
  if (root.dataset["theme"] === theme) return;
  root.dataset["theme"] = theme;
  onChange(theme);
}

/** Sets `<html data-theme>` now and whenever TensorBoard's (or else the system's) theme changes. */
export function followTheme(onChange: (theme: Theme) => void): void {
  const host = hostDocument();
  if (host !== null) {
    const read = (): void => applyTheme(host.body.classList.contains("dark-mode") ? "dark" : "light", onChange);
    new MutationObserver(read).observe(host.body, { attributes: true, attributeFilter: ["class"] });
    read();
    borrowFonts(host);
    return;
  }
  const query = window.matchMedia("(prefers-color-scheme: dark)");
  const read = (): void => applyTheme(query.matches ? "dark" : "light", onChange);
  query.addEventListener("change", read);
  read();
}

/** Copies TensorBoard's @font-face rules (Roboto, served by TensorBoard itself) into this document. */
function borrowFonts(host: Document): void {
  const rules: string[] = [];
  for (const sheet of Array.from(host.styleSheets)) {
    let list: CSSRuleList;
    try {
      list = sheet.cssRules;
    } catch {
      continue;
    }
    for (const rule of Array.from(list)) {
      // The rules belong to the parent's realm, so no instanceof: their text says what they are.
      if (rule.cssText.startsWith("@font-face")) rules.push(rule.cssText);
    }
  }
  if (rules.length === 0) return;
  const style = document.createElement("style");
  style.dataset["borrowed"] = "fonts";
  style.textContent = rules.join("\n");
  document.head.appendChild(style);
}
