// Bundles the viewer's browser side into dist/: app.js (our code + asciinema-player), app.css,
// index.html. Run by scripts/setup.sh (`npm ci && npm run build`); the Rust crate embeds dist/.
import { build } from "esbuild";
import { mkdirSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
rmSync("dist", { recursive: true, force: true });
mkdirSync("dist", { recursive: true });

await build({
  entryPoints: ["src/main.js"],
  bundle: true,
  format: "esm",
  minify: true,
  sourcemap: false,
  target: ["chrome110", "firefox110", "safari16"],
  outfile: "dist/app.js",
  logLevel: "warning",
});

const playerCss = readFileSync(require.resolve("asciinema-player/dist/bundle/asciinema-player.css"), "utf8");
writeFileSync("dist/app.css", playerCss + "\n" + readFileSync("src/style.css", "utf8"));

writeFileSync(
  "dist/index.html",
  `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>terminus view</title>
<link rel="stylesheet" href="/assets/app.css">
<script type="module" src="/assets/app.js"></script>
</head>
<body>
<header class="top"><a href="/" class="brand">terminus view</a><nav><a href="/">Jobs</a><a href="/compare">Compare</a></nav><span id="live-dot" hidden title="live">● live</span></header>
<main id="app"><p class="muted">Loading…</p></main>
</body>
</html>
`,
);
console.log("built dist/: app.js, app.css, index.html");
