#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS from its seed corpus; any crash fails.
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET]
set -euo pipefail
build=${1:?build dir}; seconds=${2:-30}; only=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
declare -A seeds=(
  [fuzz_tsl]="$root/tests/tsl $root/tests/lit/errors"
  [fuzz_npy]="$root/fuzz/corpus/npy"
  [fuzz_pkg]="$root/fuzz/corpus/pkg"
  [fuzz_chips]="$root/fuzz/corpus/chips"
  [fuzz_onnx]="$root/fuzz/corpus/onnx"
  [fuzz_machine]="$root/fuzz/corpus/machine"
  [fuzz_recipe]="$root/fuzz/corpus/recipe"
  [fuzz_mid]="$root/fuzz/corpus/mid"
)
declare -A dicts=(
  [fuzz_pkg]="-dict=$root/fuzz/pkg.dict"
  [fuzz_recipe]="-dict=$root/fuzz/recipe.dict"
)
for t in fuzz_tsl fuzz_npy fuzz_pkg fuzz_chips fuzz_onnx fuzz_machine fuzz_recipe fuzz_mid; do
  [ -n "$only" ] && [ "$only" != "$t" ] && continue
  work="$build/corpus-$t"
  mkdir -p "$work"
  echo "fuzz: $t for ${seconds}s"
  log="$build/$t.log"
  rc=0
  # shellcheck disable=SC2086
  "$build/fuzz/$t" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$build/$t-" ${dicts[$t]:-} \
      "$work" ${seeds[$t]} >"$log" 2>&1 || rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)" "$log" || true
  if [ "$rc" -ne 0 ]; then tail -40 "$log"; echo "fuzz: $t failed (status $rc), log in $log"; exit 1; fi
done
