// Entry point. TensorBoard's plugin_entry.html imports this module and calls
// render() inside the tab's iframe.

import { App } from "./app";
import { installStyle } from "./style";

export function render(): void {
  installStyle(document);
  const root = document.createElement("div");
  root.id = "gradscope";
  document.body.appendChild(root);
  new App(root).start();
}
