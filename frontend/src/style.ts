// The tab's stylesheet, injected as a <style> element's textContent (the page's
// CSP allows inline styles but no external hosts). Colours are CSS variables,
// TensorBoard's own greys and orange accent; `<html data-theme=dark>` (set by
// theme.ts from TensorBoard's theme setting) switches them to its dark ones.

import UPLOT_CSS from "uplot/dist/uPlot.min.css";

const CSS = `
:root {
  color-scheme: light;
  /* TensorBoard's light theme: white page, #f5f5f5 panels, #ebebeb rules, orange accent. */
  --bg: #ffffff; --fg: #212121; --muted: #616161; --border: #e0e0e0;
  --panel: #f5f5f5; --accent: #f57c00; --focus: #f57c00; --link: #1976d2; --error-bg: #fdecea; --error-fg: #b71c1c;
  --ignored: #f2c94c; --blocked: #5b6b86; --independent: #eeeeee; --vanishing: #c8b6e2;
  --nonfinite: #8b1a5c; --no-gradient: #d6d6d6; --violation: #d32f2f; --unknown: #ffffff; --differs: #1976d2;
  --updates-hue: 145;
}
:root[data-theme=dark] {
  color-scheme: dark;
  /* TensorBoard's dark theme: #303030 page, #424242 cards, #555 rules, #ef6c00 accent. */
  --bg: #303030; --fg: #ffffff; --muted: #bdbdbd; --border: #555555;
  --panel: #424242; --accent: #ef6c00; --focus: #ffa726; --link: #42a5f5; --error-bg: #5d2a2a; --error-fg: #ffcdd2;
  --ignored: #b28704; --blocked: #8e98a3; --independent: #3a3a3a; --vanishing: #7e57c2;
  --nonfinite: #e91e63; --no-gradient: #4a4a4a; --violation: #ff5252; --unknown: #303030; --differs: #42a5f5;
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 13px/1.4 Roboto, sans-serif; }
:focus-visible { outline: 2px solid var(--focus); outline-offset: 1px; }
.gs-app { display: flex; flex-direction: column; gap: 12px; padding: 12px 16px; }
.gs-toolbar { display: flex; flex-wrap: wrap; align-items: center; gap: 12px 20px; }
.gs-toolbar h1 { font-size: 16px; margin: 0; }
.gs-toolbar label { display: inline-flex; align-items: center; gap: 6px; }
.gs-toolbar select, .gs-toolbar button { font: inherit; color: var(--fg); background: var(--panel);
  border: 1px solid var(--border); border-radius: 4px; padding: 3px 8px; }
.gs-toolbar select, .gs-controls select { max-width: 36ch; text-overflow: ellipsis; }
.gs-toolbar input[type=search] { font: inherit; color: var(--fg); background: var(--bg);
  border: 1px solid var(--border); border-radius: 4px; padding: 2px 6px; width: 16ch; }
.gs-toolbar input[type=range] { width: 220px; accent-color: var(--accent); }
.gs-step-label { font-variant-numeric: tabular-nums; min-width: 7ch; }
.gs-status { color: var(--muted); }
.gs-error { background: var(--error-bg); color: var(--error-fg); padding: 6px 10px; border-radius: 4px; }
.gs-warnings { margin: 0; padding-left: 20px; color: var(--muted); }
.gs-error, .gs-warnings li, .gs-compare-note, .gs-note, .gs-marker-list li, .gs-blocked-details h3 { overflow-wrap: anywhere; }
/* A name from the logs: one line, ellipsised when long, the full name in its title. */
.gs-name { display: inline-block; max-width: 40ch; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
  vertical-align: bottom; }
.gs-loss-name { max-width: 20ch; }
.gs-note { margin: 0; padding: 6px 10px; border-left: 3px solid var(--ignored); background: var(--panel); }
.gs-body { display: flex; flex-wrap: wrap; align-items: flex-start; gap: 16px; }
/* The matrix scrolls inside its box so the loss headers and scope names stay in view. */
.gs-matrix-wrap { overflow: auto; max-width: 100%; max-height: calc(100vh - 90px);
  border: 1px solid var(--border); border-radius: 6px; }
table.gs-matrix { border-collapse: separate; border-spacing: 2px; font-variant-numeric: tabular-nums; }
.gs-matrix th { font-weight: 600; text-align: left; padding: 4px 8px; white-space: nowrap; background: var(--bg); }
.gs-matrix thead th { position: sticky; top: 0; z-index: 2; }
.gs-matrix thead th.gs-num { text-align: right; }
.gs-matrix tbody th { position: sticky; left: 0; z-index: 1; font-weight: 400; }
.gs-scope { display: inline-flex; align-items: center; gap: 4px; font: inherit; color: inherit;
  background: none; border: 0; padding: 2px 4px; cursor: pointer; text-align: left; }
.gs-scope.gs-leaf { cursor: default; }
.gs-twisty { display: inline-block; width: 1em; color: var(--muted); }
.gs-scope-name { max-width: 48ch; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.gs-rollup .gs-scope { font-weight: 600; }
.gs-start-point { color: var(--muted); font-weight: 400; font-size: 11px; }
.gs-cell { position: relative; display: block; width: 100%; min-width: 64px; height: 26px; font: inherit; font-size: 12px;
  border: 1px solid transparent; border-radius: 3px; padding: 0 6px; cursor: pointer;
  color: var(--fg); text-align: center; }
.gs-cell[data-state=ignored] { background: var(--ignored); color: #1f2328; }
.gs-cell[data-state=blocked] { background: repeating-linear-gradient(135deg, var(--blocked) 0 4px,
  color-mix(in srgb, var(--blocked) 70%, var(--bg)) 4px 8px); color: #ffffff; }
.gs-cell[data-state=independent] { background: var(--independent); color: var(--muted); }
.gs-cell[data-state=vanishing] { background: var(--vanishing); color: #1f2328; }
.gs-cell[data-state=nonfinite] { background: var(--nonfinite); color: #ffffff; font-weight: 700; }
.gs-cell[data-state=no_gradient] { background: var(--no-gradient); color: var(--muted); }
.gs-cell[data-state=unknown] { background: var(--unknown); border: 1px dashed var(--border); }
.gs-cell[data-violation=true] { outline: 3px solid var(--violation); outline-offset: -1px; }
/* Selected: an inner ring in the text colour and bold figures, unlike a violation's outer red outline. */
.gs-cell[aria-pressed=true] { box-shadow: inset 0 0 0 2px var(--bg), inset 0 0 0 4px var(--fg); font-weight: 700; }
.gs-num { text-align: right; padding: 0 8px; white-space: nowrap; color: var(--muted); }
.gs-side { display: flex; flex-direction: column; gap: 16px; min-width: 260px; max-width: 420px; }
.gs-legend, .gs-details { border: 1px solid var(--border); border-radius: 6px; padding: 8px 12px; background: var(--panel); }
.gs-legend h2, .gs-details h2 { font-size: 13px; margin: 0 0 6px; }
.gs-legend { flex: 1 1 100%; font-size: 12px; }
.gs-legend ul { list-style: none; margin: 0; padding: 0; display: grid; gap: 4px 16px;
  grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); }
.gs-legend .gs-ramp-box { max-width: 340px; margin-top: 8px; }
.gs-legend li { display: grid; grid-template-columns: 54px 1fr; gap: 8px; align-items: center; }
.gs-legend .gs-cell { min-width: 0; height: 20px; cursor: default; }
.gs-ramp { height: 10px; border-radius: 3px; margin: 6px 0 2px; }
.gs-ramp-span { margin: 2px 0 0; font-size: 11px; }
.gs-ramp-labels { display: flex; justify-content: space-between; color: var(--muted); font-size: 11px; }
.gs-details dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; }
.gs-details dt { color: var(--muted); }
.gs-details dd { margin: 0; font-variant-numeric: tabular-nums; overflow-wrap: anywhere; max-height: 7.5em; overflow-y: auto; }
.gs-details h2 { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.gs-muted { color: var(--muted); }
.gs-wide { flex: 1 1 100%; display: flex; flex-direction: column; gap: 16px; min-width: 0; }
.gs-wide h2 { font-size: 14px; margin: 0 0 6px; }
.gs-controls { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 16px; margin-bottom: 6px; }
.gs-controls label { display: inline-flex; align-items: center; gap: 6px; }
.gs-controls select, .gs-controls button, .gs-controls input { font: inherit; color: var(--fg); background: var(--panel);
  border: 1px solid var(--border); border-radius: 4px; padding: 2px 8px; }
.gs-controls input[type=number] { width: 5em; }
.gs-graph-svg { display: block; width: 100%; height: 440px; border: 1px solid var(--border); border-radius: 6px;
  background: var(--bg); cursor: grab; touch-action: none; user-select: none; }
.gs-node rect { fill: var(--panel); stroke: var(--border); stroke-width: 1.2; }
.gs-node text { fill: var(--fg); font-size: 12px; }
.gs-node[data-kind=input] rect { fill: var(--independent); stroke-dasharray: 3 2; }
.gs-node[data-kind=loss] rect { fill: var(--panel); stroke: var(--accent); stroke-width: 2; }
.gs-node[data-flow=ignored] rect { fill: var(--ignored); }
.gs-node[data-flow=blocked] rect { fill: var(--blocked); }
.gs-node[data-flow=blocked] text { fill: #ffffff; }
.gs-node[data-highlight=true] rect { fill: hsl(145 52% 45%); stroke: hsl(145 60% 25%); stroke-width: 2.5; }
.gs-node[data-highlight=true] text { fill: #ffffff; font-weight: 600; }
.gs-graph-svg[data-loss]:not([data-loss=""]) .gs-node[data-highlight=false][data-flow=independent] { opacity: 0.45; }
.gs-edge-line { fill: none; stroke: var(--muted); stroke-width: 1.3; }
.gs-arrow { fill: var(--muted); }
.gs-edge[data-highlight=true] .gs-edge-line { stroke: hsl(145 60% 35%); stroke-width: 3; }
.gs-edge-blocked .gs-edge-line { stroke: var(--violation); stroke-dasharray: 6 4; stroke-width: 2; }
.gs-edge-hit { fill: none; stroke: transparent; stroke-width: 14; cursor: pointer; pointer-events: stroke; }
.gs-edge[data-selected=true] .gs-edge-line { stroke-width: 4; }
.gs-edge-mark { fill: var(--violation); font-size: 18px; font-weight: 700; cursor: pointer;
  paint-order: stroke; stroke: var(--bg); stroke-width: 4px; }
.gs-edge-blocked:focus { outline: none; }
.gs-edge-blocked:focus-visible .gs-edge-line { stroke-width: 4; stroke: var(--focus); }
.gs-blocked-details h3 { font-size: 13px; margin: 0 0 6px; }
.gs-blocked-details dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 8px; }
.gs-blocked-details dt { color: var(--muted); }
.gs-blocked-details dd { margin: 0; overflow-wrap: anywhere; max-height: 7.5em; overflow-y: auto; }
/* "Differs" is drawn outside the cell, so a violation's red outline stays visible under Compare. */
.gs-cell[data-diff=true]::after { content: ""; position: absolute; inset: -5px; border: 2px dashed var(--differs);
  border-radius: 5px; pointer-events: none; }
.gs-compare-note { margin: 0; padding: 6px 10px; border-left: 3px dashed var(--differs); background: var(--panel); }
.gs-chart { margin: 0 0 12px; }
.gs-chart figcaption { font-weight: 600; margin-bottom: 4px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.gs-chart-legend li { min-width: 0; max-width: 100%; }
.gs-chart-legend li.gs-main { font-weight: 600; }
.gs-plot { color: var(--fg); }
.gs-chart-legend, .gs-chips, .gs-marker-list { list-style: none; margin: 4px 0; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; }
.gs-marker-list { flex-direction: column; color: var(--fg); }
.gs-swatch { display: inline-block; width: 14px; height: 3px; margin-right: 6px; vertical-align: middle; }
.gs-chips li { display: inline-flex; gap: 4px; align-items: center; background: var(--panel); border: 1px solid var(--border);
  border-radius: 12px; padding: 1px 4px 1px 10px; }
.gs-chips button { font: inherit; border: 0; background: none; color: var(--muted); cursor: pointer; }
.gs-marker { position: absolute; top: 0; bottom: 0; width: 0; border-left: 2px dashed var(--violation); pointer-events: auto; }
.gs-marker-label { position: absolute; top: 2px; left: 4px; white-space: nowrap; font-size: 11px; font-weight: 600;
  color: var(--violation); background: var(--bg); padding: 0 3px; border-radius: 3px; }
.gs-table { border-collapse: collapse; font-size: 12px; }
.gs-table th, .gs-table td { border-bottom: 1px solid var(--border); padding: 3px 8px; text-align: left; vertical-align: top; }
.gs-events-table { table-layout: fixed; width: 100%; }
.gs-events-table td { overflow: hidden; }
.gs-events-table .gs-name { max-width: 100%; }
.gs-col-step { width: 9ch; } .gs-col-type { width: 10ch; } .gs-col-name { width: 18%; }
.gs-col-concerns { width: 24%; } .gs-col-count { width: 7ch; }
.gs-why-blocked h3 { font-size: 13px; margin: 8px 0 4px; }
.gs-why-blocked dd, .gs-blocked-details dd[data-field=report], .gs-blocked-details dd[data-field=fix] { white-space: pre-wrap; }
.gs-pointer { text-align: left; overflow-wrap: anywhere; }
tr[data-pointed=true] { outline: 2px solid var(--focus); }
.gs-tau { margin: 4px 0; font-variant-numeric: tabular-nums; }
.gs-message { overflow-wrap: anywhere; display: -webkit-box; -webkit-line-clamp: 4; -webkit-box-orient: vertical; overflow: hidden; }
.gs-table td button { font: inherit; color: var(--link); background: none; border: 1px solid var(--border); border-radius: 4px; cursor: pointer; }
.gs-col-vstep { width: 13ch; } .gs-col-source { width: 10ch; } .gs-col-seen { width: 11ch; }
.gs-vstep, .gs-seen { color: var(--muted); font-variant-numeric: tabular-nums; }
.gs-evidence { color: var(--muted); overflow-wrap: anywhere; display: -webkit-box; -webkit-line-clamp: 3;
  -webkit-box-orient: vertical; overflow: hidden; margin-top: 2px; }
.gs-source[data-source=evaluated] { font-style: italic; }
.gs-violations .gs-note { margin-bottom: 6px; }
.gs-findings { border: 1px solid var(--border); border-radius: 6px; padding: 8px 12px; background: var(--panel); min-width: 0; }
.gs-findings h2 { font-size: 14px; margin: 0 0 6px; }
.gs-findings p { margin: 0; }
.gs-finding-list { margin: 0; padding-left: 24px; max-height: 45vh; overflow: auto; }
.gs-finding { padding: 6px 0; border-top: 1px solid var(--border); }
.gs-finding:first-child { border-top: 0; }
.gs-finding-head { display: flex; gap: 8px; align-items: baseline; min-width: 0; }
.gs-kind { flex: none; font-size: 11px; font-weight: 600; color: var(--error-fg); background: var(--error-bg);
  border-radius: 10px; padding: 0 8px; }
.gs-finding-what { font: inherit; font-weight: 600; color: var(--link); background: none; border: 0; padding: 0;
  cursor: pointer; text-align: left; overflow-wrap: anywhere; min-width: 0; }
.gs-finding dl { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 2px 12px; margin: 4px 0 0; }
.gs-finding dt { color: var(--muted); }
.gs-finding dd { margin: 0; overflow-wrap: anywhere; min-width: 0; }
.gs-finding .gs-concerns { display: flex; flex-wrap: wrap; gap: 0 14px; }
.gs-rule { background: var(--bg); border: 1px solid var(--border); border-radius: 4px; padding: 0 4px; overflow-wrap: anywhere; }
.gs-copy { font: inherit; color: var(--link); background: var(--bg); border: 1px solid var(--border); border-radius: 4px;
  padding: 0 6px; cursor: pointer; }
.gs-edge[data-finding=true] .gs-edge-line { stroke: var(--accent); stroke-width: 4; }
.gs-export ul { margin: 0; padding-left: 20px; }
.gs-export a { color: var(--link); }
.gs-empty { max-width: 680px; }
.gs-empty pre { background: var(--panel); border: 1px solid var(--border); border-radius: 6px; padding: 10px 12px; overflow: auto; }
`;

export function installStyle(doc: Document): void {
  const style = doc.createElement("style");
  style.textContent = UPLOT_CSS + CSS;
  doc.head.appendChild(style);
}
