#!/usr/bin/env bash
# The full c600 mutation sweep (tests/unit/test_mutation.c, TESSEL_MUTATION_SWEEP=full)
# in shards that survive a stopped session: every (model, shard) not yet in
# LEDGER runs, at nice 19, JOBS at a time (default 2), each in a directory of its
# own under LEDGER.d (a try writes mutant.tpk in its working directory), and
# appends one line to LEDGER:
#   DONE <model> <k>/<n> | mutation sweep: ... corruptions (of N), ... caught ... | <UTC time>
#   FAIL <model> <k>/<n> rc=<status> | <the escaped corruption or the error> | <UTC time>
# Run it again to go on where it stopped; a FAIL line is not retried (delete it
# to). A shard stopped by a signal (hangup, interrupt, terminate, kill: the
# out-of-memory killer's too) is not recorded, and the next run retries it. To
# stop the sweep, signal its whole process group (xargs would start the next
# shard): start it with setsid and stop it with kill -- -PID.
# A c600 training step's try costs about 0.1 s of CPU (it simulates every
# tile), so the whole sweep is hours: alone on the host, not beside CI.
#   scripts/mutation_sweep.sh /work/mut/ledger.txt [JOBS]    (BUILD=build)
set -euo pipefail
ledger=${1:?usage: mutation_sweep.sh LEDGER [JOBS]}
jobs=${2:-2}
ledger=$(realpath -m "$ledger")
touch "$ledger"
mkdir -p "$ledger.d"
tm=$ledger.d/test_mutation # a copy: a rebuild while it runs changes nothing
cp "${BUILD:-build}/tests/test_mutation" "$tm"
# test_mutation.c's C600 models (a substring naming each) and shards of about
# 4,000 corruptions.
queue=(
  "tokens=37,width=96,hidden=200,precision=fp8 6"
  "tokens=29,width=80,hidden=144 4"
  "heads=3,queries=23,keys=31 2"
  "layers=2,width=64,heads=2,mlp=128 2"
  "layers=1,width=48,heads=3 2"
  "clip=global_norm 12"
  "optimizer=sgd 12"
  "adamw,steps=2 28"
)
work=()
for q in "${queue[@]}"; do
  only=${q% *}; n=${q##* }
  for ((k = 0; k < n; k++)) do
    grep -qF " $only $k/$n " "$ledger" || work+=("$only|$k/$n")
  done
done
echo "mutation_sweep: ${#work[@]} shards to run, $jobs at a time; ledger $ledger" >&2
run() {
  local only=${1%|*} shard=${1#*|} dir
  dir="$ledger.d/$(echo "$only $shard" | tr -c 'A-Za-z0-9\n' '_')"
  mkdir -p "$dir"
  local out rc=0
  out=$(cd "$dir" && TESSEL_MUTATION_ONLY="$only" TESSEL_MUTATION_SHARD="$shard" TESSEL_MUTATION_MACHINE=c600 \
        TESSEL_MUTATION_SWEEP=full nice -n 19 "$tm" 2>&1) || rc=$?
  if [ $rc -eq 0 ]; then
    echo "DONE $only $shard | $(echo "$out" | grep -m1 'corruptions (of') | $(date -u +%FT%TZ)" >> "$ledger"
  elif [ $rc -eq 129 ] || [ $rc -eq 130 ] || [ $rc -eq 137 ] || [ $rc -eq 143 ]; then
    echo "mutation_sweep: $only $shard stopped by a signal; not recorded, the next run retries it" >&2
  else
    echo "FAIL $only $shard rc=$rc | $(echo "$out" | grep -E -m3 'changes an output|error|FAIL' | tr '\n' ' ') | $(date -u +%FT%TZ)" >> "$ledger"
  fi
}
export -f run
# glibc would hand each try's large buffers back to the kernel and fault them in
# again on the next (a third of a try's time); keep them in the heap instead.
export GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295
export ledger tm
printf '%s\n' "${work[@]}" | xargs -r -P "$jobs" -I{} bash -c 'run "$@"' _ {}
echo "mutation_sweep: $(grep -c '^DONE' "$ledger") shards done, $(grep -c '^FAIL' "$ledger" || true) failed" >&2
