#!/usr/bin/env bash
# make demo: the main job on built-in models, with a short human summary:
# compile, simulate on the c600 machine, compare with the FP32 references.
set -euo pipefail
tessel=${1:-build/tessel}
vit="zoo:vit:layers=2,width=192,heads=3,mlp=768,image=64,patch=8,precision=fp8"
mlp="zoo:mlp:tokens=729,width=1152,hidden=4304,precision=fp8"
echo "== $vit"
echo "   a 2-layer SigLIP-style encoder (one repeat) with FP8 GEMM operands, on c600"
"$tessel" check "$vit"
echo
echo "== $mlp"
echo "   the FP8 MLP block of SigLIP So400m/14 at 384 px (729 tokens), on c600"
"$tessel" check "$mlp"
