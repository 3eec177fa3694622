#!/usr/bin/env bash
# Vendors the browser libraries (pinned) into frontend/static/vendor/ with their licenses, so
# the page works offline and needs no build step. Run it to upgrade; the result is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=frontend/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

packages=(
  "marked@18.2.1"                 # Markdown -> HTML
  "dompurify@3.5.0"               # sanitizes that HTML
  "@highlightjs/cdn-assets@11.12.0"  # code highlighting (prebuilt ES module + themes)
  "uplot@1.6.32"                  # operators' dashboard charts
  "katex@0.18.11"                 # math in replies (MathML output: no fonts, no inline styles)
  "marked-katex-extension@5.1.13" # $...$ and $$...$$ in Markdown, rendered by KaTeX
)
(cd "$work" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "${packages[@]}")
m="$work/node_modules"
rm -rf "$dest" && mkdir -p "$dest/licenses"
cp "$m/marked/lib/marked.esm.js" "$dest/marked.esm.js"
cp "$m/dompurify/dist/purify.es.mjs" "$dest/purify.es.mjs"
cp "$m/@highlightjs/cdn-assets/es/highlight.min.js" "$dest/highlight.min.js"
cp "$m/@highlightjs/cdn-assets/styles/github.min.css" "$dest/highlight-light.css"
cp "$m/@highlightjs/cdn-assets/styles/github-dark.min.css" "$dest/highlight-dark.css"
cp "$m/uplot/dist/uPlot.esm.js" "$dest/uPlot.esm.js"
cp "$m/uplot/dist/uPlot.min.css" "$dest/uPlot.min.css"
cp "$m/katex/dist/katex.mjs" "$dest/katex.mjs"
# The extension imports the bare name `katex`; the page has no bundler or import map (the CSP
# allows no inline script), so it is pointed at the vendored file.
sed "s#from 'katex'#from './katex.mjs'#" "$m/marked-katex-extension/lib/index.esm.js" > "$dest/marked-katex.esm.js"
cp "$m/marked/LICENSE" "$dest/licenses/marked.LICENSE"
cp "$m/katex/LICENSE" "$dest/licenses/katex.LICENSE"
cp "$m/marked-katex-extension/LICENSE" "$dest/licenses/marked-katex-extension.LICENSE"
cp "$m/dompurify/LICENSE" "$dest/licenses/dompurify.LICENSE"
cp "$m/@highlightjs/cdn-assets/LICENSE" "$dest/licenses/highlight.js.LICENSE"
cp "$m/uplot/LICENSE" "$dest/licenses/uplot.LICENSE"
{
  echo "Vendored by scripts/vendor-frontend.sh; do not edit by hand."
  printf '%s\n' "${packages[@]}"
} > "$dest/VERSIONS.txt"
echo "vendored into $dest:"; ls -la "$dest"
