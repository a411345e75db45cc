#!/usr/bin/env bash
# Runs every benchmark under bench/ (pass --smoke for the short CI versions).
set -euo pipefail
build=${1:-build}; shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
for b in "$root"/bench/sim "$root"/bench/calibrate "$root"/bench/compile "$root"/bench/throughput "$root"/bench/epilogue; do
  echo "== $(basename "$b")"
  "$b" "$@" "$build"
done
