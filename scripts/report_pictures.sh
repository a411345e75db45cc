#!/usr/bin/env bash
# Takes docs/report.md's pictures of an HTML report (default: SigLIP's):
#   scripts/report_pictures.sh [REPORT.html]
# Without an argument it compiles zoo:vit:precision=fp8 for c600 and writes
# its report first (about 1 min). Each picture is one section alone, in the
# state the page's #only=...&... address asks for (src/report/html/report.js).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$here/build/tessel}
page=${1:-}
if [ -z "$page" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$tessel" compile zoo:vit:precision=fp8 -o "$work/siglip.tpk" --report "$work/plan.json" --quiet > /dev/null
  "$tessel" report "$work/siglip.tpk" -o "$work/siglip.html" --compile-report "$work/plan.json" --quiet > /dev/null
  page=$work/siglip.html
fi
page=$(cd "$(dirname "$page")" && pwd)/$(basename "$page")
shot() { # NAME HEIGHT HASH
  local profile
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" --window-size=1300,"$2" \
    --virtual-time-budget=3000 --screenshot="$here/docs/report/$1.png" "file://$page#$3" 2> /dev/null
  rm -rf "$profile"
}
mkdir -p "$here/docs/report"
shot summary 150 ""
shot timeline 330 only=timeline
shot timeline-layer 330 "only=timeline&iteration=3"
shot cycles 1000 only=cycles
shot tiles 900 only=tiles
shot tiles-longest 560 "only=tiles&metric=5"
shot plan 1300 only=plan
shot estimate 1000 only=estimate
# The check's picture needs a page from check --html: scripts/report_pictures.sh CHECKED.html takes them all from it.
grep -q '"check":{' "$page" && shot check 330 only=check
ls -la "$here/docs/report"
