// SVG elements built the way dom.ts builds HTML: attributes with setAttribute,
// text only through text nodes, so names from the logs are never markup.

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number> = {},
  ...children: (Node | string)[]
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name.toLowerCase().startsWith("on")) throw new Error(`refusing event-handler attribute ${name}`);
    element.setAttribute(name, String(value));
  }
  for (const child of children) element.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  return element;
}
