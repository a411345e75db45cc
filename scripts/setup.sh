#!/usr/bin/env bash
# Installs the Debian 12 packages tessel builds and tests with, if any is missing.
set -euo pipefail
pkgs=(cmake make gcc pkg-config
      libjansson-dev libcmocka-dev libopenblas-dev
      llvm-14-tools clang-14 libclang-rt-14-dev
      protobuf-c-compiler libprotobuf-c-dev libonnx-dev
      python3 python3-numpy
      python3-torch python3-torchvision python3-pytest python3-onnx  # the Python module's and ONNX tests
      openmpi-bin libopenmpi-dev  # tessel run under mpirun (docs/chips.md)
      chromium)  # opens the HTML report in tests (tests/lit/report)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 2; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
