#!/usr/bin/env bash
# A restructuring changes no output. `same_output.sh save DIR` compiles the
# reference models (SigLIP, the FP8 MLP, the mutation sweep's models) into
# DIR; `same_output.sh cmp DIR` compiles them again and cmp's every package,
# recipe and compile report (its wall-clock `seconds` left out) against DIR
# (a DIR saved before reports were kept compares packages and recipes). BUILD (default build) holds the tessel to run;
# QUICK=1 leaves SigLIP out (it takes about 40 s).
set -euo pipefail
mode=${1:?usage: same_output.sh save|cmp DIR}; dir=${2:?usage: same_output.sh save|cmp DIR}
tessel=${BUILD:-build}/tessel
models=(
  "c600 zoo:mlp:tokens=729,width=1152,hidden=4304,precision=fp8"
  "c600 zoo:mlp"
  "c600 zoo:qk"
  "c600 zoo:qk:heads=4,queries=17,keys=19,channels=72,qk=fp8,pv=f16"
  "tiny zoo:mlp:tokens=37,width=96,hidden=200,precision=fp8"
  "tiny zoo:mlp:tokens=37,width=96,hidden=200"
  "tiny zoo:mlp:tokens=19,width=40,hidden=56,precision=fp8,acc=f32"
  "tiny zoo:qk:heads=3,queries=23,keys=31,channels=40,qk=fp8"
  "tiny zoo:qk:heads=2,queries=9,keys=13,channels=24,pv=fp8"
  "tiny zoo:qk:heads=2,queries=9,keys=13,channels=24"
  "tiny zoo:vit:layers=2,width=64,heads=2,mlp=128,image=32,patch=8,precision=fp8"
  "tiny zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4"
  "tiny zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=adamw"
  "tiny zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=sgd"
  "tiny zoo:train-mlp:tokens=512,width=16,hidden=24,optimizer=adamw,state=bf16"
  "tiny zoo:train-mlp:tokens=12,width=24,hidden=40,optimizer=adamw,clip=global_norm"
  "c600 zoo:mlp:tokens=37,width=96,hidden=200,precision=fp8"
  "c600 zoo:mlp:tokens=29,width=80,hidden=144"
  "c600 zoo:qk:heads=3,queries=23,keys=31,channels=40,qk=fp8"
  "c600 zoo:vit:layers=2,width=64,heads=2,mlp=128,image=32,patch=8,precision=fp8"
  "c600 zoo:vit:layers=1,width=48,heads=3,mlp=96,image=24,patch=6"
  "c600 zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=adamw,clip=global_norm"
  "c600 zoo:train-mlp:tokens=16,width=48,hidden=64,optimizer=sgd"
  "c600 zoo:train-mlp:tokens=16,width=48,hidden=64,optimizer=adamw,steps=2"
  "c600 tests/onnx/tv_vit_op17.onnx"
)
[ "${QUICK:-0}" = 1 ] || models+=("c600 zoo:vit:precision=fp8")
mkdir -p "$dir"
out=$dir; [ "$mode" = cmp ] && out=$(mktemp -d)
fail=0
for entry in "${models[@]}"; do
  m=${entry%% *}; model=${entry#* }
  key=$(printf '%s_%s' "$m" "$model" | tr -c 'A-Za-z0-9_.=,-' '_')
  "$tessel" compile "$model" --machine "$m" -o "$out/$key.tpk" --save-recipe "$out/$key.json" --report "$out/$key.rep" \
    --quiet >/dev/null 2>"$out/$key.err" || { echo "FAIL compile $m $model: $(tail -1 "$out/$key.err")"; fail=1; continue; }
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); r.pop("seconds", None); json.dump(r, open(sys.argv[1], "w"), sort_keys=True)' \
    "$out/$key.rep"
  if [ "$mode" = cmp ]; then
    for f in tpk json rep; do
      [ "$f" = rep ] && [ ! -e "$dir/$key.rep" ] && continue
      cmp -s "$dir/$key.$f" "$out/$key.$f" || { echo "DIFFERS $f $m $model"; fail=1; }
    done
  fi
done
[ "$mode" = cmp ] && rm -rf "$out"
[ $fail = 0 ] && echo "same_output: ${#models[@]} models ${mode} ok"
exit $fail
