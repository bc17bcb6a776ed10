// The one way this app builds DOM. Children given as strings become text
// nodes and attribute values are set with setAttribute, so text from the logs
// (run, loss and scope names) can never be parsed as HTML. Event handlers are
// attached with addEventListener only: "on*" attributes are refused.

export type Child = Node | string | null | undefined | false;

export interface Props {
  className?: string;
  attrs?: Record<string, string>;
  data?: Record<string, string>;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (event: HTMLElementEventMap[K]) => void }>;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (props.className) element.className = props.className;
  for (const [name, value] of Object.entries(props.attrs ?? {})) {
    if (name.toLowerCase().startsWith("on")) {
      throw new Error(`refusing event-handler attribute ${name}`);
    }
    element.setAttribute(name, value);
  }
  for (const [key, value] of Object.entries(props.data ?? {})) {
    element.dataset[key] = value;
  }
  for (const [type, handler] of Object.entries(props.on ?? {})) {
    element.addEventListener(type, handler as EventListener);
  }
  append(element, ...children);
  return element;
}

export function append(parent: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

/** Replaces all children of `parent`. */
export function replaceChildren(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, ...children);
}
