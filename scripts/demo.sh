#!/usr/bin/env bash
# make demo: the main job on built-in models, with a short human summary.
set -euo pipefail
tessel=${1:-build/tessel}
vit="zoo:vit:layers=2,width=192,heads=3,mlp=768,image=64,patch=8"
echo "== $vit: a 2-layer SigLIP-style encoder (one repeat), FP32 reference"
"$tessel" ref "$vit" --quiet
echo
echo "== the same encoder with FP8 (f143) GEMM operands, against the pure FP32 model"
"$tessel" ref "$vit,precision=fp8" --quiet --against-fp32
echo
echo "== the c600 machine it will be compiled for"
"$tessel" machine c600 | tail -n 6
