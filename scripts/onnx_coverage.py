#!/usr/bin/python3
"""The models users bring, tried as a user would: each exported by
torch.onnx.export from Debian's PyTorch (random weights, fixed shapes,
batch 1), then imported, compiled for c600, and checked against PyTorch's
own output with `tessel check`. Prints one Markdown table row per model
(docs/onnx.md keeps the table).

    scripts/onnx_coverage.py TESSEL [--only NAME,...] [--extra] [--precision f16|fp8] [--keep DIR] [--import-only]

--import-only stops after the import (`tessel graph`), which is what
tests/lit/onnx/torchvision_import.test runs over every model here.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision


class CausalBlock(torch.nn.Module):
    """A GPT-style pre-LN decoder block, batch first, with its causal mask."""

    def __init__(self, e=256, heads=4, t=64):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(e, heads, 4 * e, dropout=0.0, activation="gelu", batch_first=True,
                                                      norm_first=True)
        self.register_buffer("mask", torch.triu(torch.full((t, t), float("-inf")), 1))

    def forward(self, x):
        return self.layer(x, src_mask=self.mask)


def calibrated(m, size):
    """Random weights, with every batch norm's statistics measured on random
    images (as training would have left them): without that, a randomly
    initialised mobilenet's activations shrink layer by layer to 1e-9,
    below what f16 holds, and no f16 result can match."""
    norms = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return m
    for b in norms:
        b.momentum = None  # the running statistics become the plain average
        b.reset_running_stats()
    m.train()
    with torch.no_grad():
        for _ in range(4):
            m(torch.randn(8, 3, size, size))
    return m


def vision(ctor, size=224):
    def make():
        torch.manual_seed(0)
        m = calibrated(ctor(), size)
        return m, torch.randn(1, 3, size, size)
    return make


def seq(ctor, shape):
    def make():
        torch.manual_seed(0)
        return ctor(), torch.randn(*shape)
    return make


MODELS = {
    "vit_b_16": vision(torchvision.models.vit_b_16),
    "resnet18": vision(torchvision.models.resnet18),
    "mobilenet_v3_small": vision(torchvision.models.mobilenet_v3_small),
    "efficientnet_b0": vision(torchvision.models.efficientnet_b0),
    "convnext_tiny": vision(torchvision.models.convnext_tiny),
    "swin_t": vision(torchvision.models.swin_t),
    "squeezenet1_1": vision(torchvision.models.squeezenet1_1),
    "shufflenet_v2_x0_5": vision(torchvision.models.shufflenet_v2_x0_5),
    "mnasnet0_5": vision(torchvision.models.mnasnet0_5),
    "regnet_y_400mf": vision(torchvision.models.regnet_y_400mf),
    "googlenet": vision(lambda: torchvision.models.googlenet(aux_logits=False, init_weights=True)),
    "TransformerEncoderLayer (seq first, E=384, T=197)":
        seq(lambda: torch.nn.TransformerEncoderLayer(384, 6, 1536, dropout=0.0, activation="gelu", norm_first=True),
            (197, 1, 384)),
    "TransformerEncoder, 2 layers (batch first, E=256, T=128)":
        seq(lambda: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True),
                                                2), (1, 128, 256)),
    "causal decoder block (E=256, T=64)": seq(CausalBlock, (1, 64, 256)),
}

# More of torchvision, run only with --extra or named in --only (not in the
# import test: they repeat what the models above cover).
EXTRA = {n: vision(getattr(torchvision.models, n)) for n in (
    "resnet50", "resnext50_32x4d", "mobilenet_v2", "mnasnet1_0", "regnet_x_400mf", "shufflenet_v2_x1_0",
    "densenet121", "efficientnet_b1")}


def first_line(text):
    for line in text.splitlines():
        if "error:" in line:
            return line.split("error:", 1)[1].strip()
    return text.strip().splitlines()[-1] if text.strip() else ""


def run(argv, timeout=900):
    """The command's result and seconds; past the timeout, a failed result that says so."""
    t0 = time.time()
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        r = subprocess.CompletedProcess(argv, 124, "", "error: timed out after %d s" % timeout)
    return r, time.time() - t0


def one(tessel, name, make, precision, work, import_only=False):
    model, x = make()
    model.eval()
    x = x.half().float()  # what the f16 input file holds, so PyTorch sees the same values
    base = os.path.join(work, "".join(c if c.isalnum() else "_" for c in name)[:40])
    onnx = base + ".onnx"
    with torch.no_grad():
        y = model(x)
    try:
        torch.onnx.export(model, (x,), onnx, input_names=["x"], output_names=["y"], opset_version=17)
    except Exception as e:  # the export itself can fail
        return [name, "export fails: " + str(e).splitlines()[0][:120], "", "", "", ""]
    np.save(base + ".in.npy", x.numpy().astype(np.float16))
    np.save(base + ".out.npy", y.numpy().astype(np.float32))
    r, _ = run([tessel, "graph", onnx, "--precision", precision])
    if r.returncode != 0:
        return [name, "no: " + first_line(r.stderr), "", "", "", ""]
    if import_only:
        ops = re.search(r"(\d+) graph ops", r.stderr)
        return [name, "yes (%s graph ops)" % (ops.group(1) if ops else "?"), "", "", "", ""]
    r, secs = run([tessel, "check", onnx, "--precision", precision, "--json", "--input", "x=" + base + ".in.npy",
                   "--expect", "y=" + base + ".out.npy"])
    try:
        j = json.loads(r.stdout)
    except ValueError:
        return [name, "yes", "no: " + first_line(r.stderr), "", "", ""]
    if j.get("does_not_fit"):
        return [name, "yes", "yes", "no: " + j["reason"].split("error:", 1)[-1].strip()[:160], "", ""]
    verdict = ("exact, cosine %.4f against PyTorch" % j["expect_cosine"]) if j["pass"] else \
        ("FAIL: exact %s, cosine %.4f against PyTorch" % (j["exact"], j.get("expect_cosine", float("nan"))))
    return [name, "yes", "yes (%.0f s with the check)" % secs, "yes", verdict, "{:,}".format(j["cycles"])]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tessel")
    ap.add_argument("--only", default="")
    ap.add_argument("--precision", default="f16")
    ap.add_argument("--keep")
    ap.add_argument("--import-only", action="store_true")
    ap.add_argument("--extra", action="store_true", help="also the models of EXTRA")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="tessel-coverage-")
    os.makedirs(work, exist_ok=True)
    exe = os.path.abspath(a.tessel) if os.sep in a.tessel else shutil.which(a.tessel)  # a path, or a name on PATH
    models = dict(MODELS, **EXTRA)
    names = [n for n in models if (n in MODELS or a.extra or a.only) and (not a.only or any(o in n for o in a.only.split(",")))]
    print("| model (%s, batch 1) | imports | compiles | fits c600 | check | cycles |" % a.precision)
    print("| --- | --- | --- | --- | --- | ---: |")
    for name in names:
        row = one(exe, name, models[name], a.precision, work, a.import_only)
        print("| " + " | ".join(row) + " |", flush=True)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
