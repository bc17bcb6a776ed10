// Bundles src/index.ts into the plugin's static folder as one self-contained
// ES module. The output must be byte-identical across machines and runs (CI
// diffs it against the committed copy): no timestamps, hashes or source maps.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";

const outfile = fileURLToPath(
  new URL("../tb_gradscope/plugin/static/index.js", import.meta.url),
);

await build({
  entryPoints: [fileURLToPath(new URL("src/index.ts", import.meta.url))],
  outfile,
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2020",
  minify: true,
  sourcemap: false,
  charset: "utf8",
  legalComments: "eof",
  // Library stylesheets (uPlot's) become strings that style.ts injects.
  loader: { ".css": "text" },
  logLevel: "warning",
});
console.log(`built ${outfile}`);
