#!/usr/bin/env bash
# Regenerate the README's pictures under docs/images/ with the commands they illustrate,
# on the 3-node example (examples/web.yaml). Needs Graphviz's dot; the report's
# screenshot needs Chromium (skipped with a note when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/images
mkdir -p "$out"
svclab=(svclab)
command -v svclab >/dev/null || svclab=(python3 -m app.cli.main)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
s=("${svclab[@]}" --state "$tmp/state")

"${s[@]}" apply -f examples/web.yaml >/dev/null
pod=$("${s[@]}" get pods -o name | sort | head -1 | cut -d/ -f2)

"${s[@]}" events --diagram "$out/timeline.svg" --for deploy/web
"${s[@]}" events --diagram "$out/timeline.mmd" --for deploy/web
"${s[@]}" topology "$out/topology.svg"
"${s[@]}" trace --from "pod/default/$pod" --to svc/default/web:80 --diagram "$out/trace.svg" >/dev/null
echo "$out/trace.svg"
"${s[@]}" connect "pod/default/$pod" svc/default/web:80 -n 1000 --plot "$out/shares.png" >/dev/null
echo "$out/shares.png"
"${s[@]}" report -o "$tmp/report.html"

chromium=$(command -v chromium || true)
if [ -n "$chromium" ]; then
  fragment="src=pod%2Fdefault%2F$pod&dst=svc%2Fdefault%2Fweb%3A80"
  "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$tmp/chromium" --window-size=1200,900 \
    --screenshot="$out/report.png" "file://$tmp/report.html#$fragment" 2>/dev/null
  echo "$out/report.png"
else
  echo "chromium not found: $out/report.png left as it is" >&2
fi
