// Entry point. TensorBoard's plugin_entry.html imports this module and calls
// render() inside the tab's iframe.

import { App } from "./app";
import { installStyle } from "./style";
import { followTheme } from "./theme";

export function render(): void {
  installStyle(document);
  const root = document.createElement("div");
  root.id = "gradscope";
  document.body.appendChild(root);
  const app = new App(root);
  // Canvas charts take their colours when drawn: a theme change redraws them.
  let started = false;
  followTheme(() => {
    if (started) app.restyle();
  });
  started = true;
  app.start();
}
