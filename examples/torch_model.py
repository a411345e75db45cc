#!/usr/bin/env python3
"""A torchvision model from module to simulated cycles, in a few lines:
compile it for the C600 in FP8, run it on tessel's simulator, compare with
PyTorch, and check it bit for bit against the plan-exact reference.

    PYTHONPATH=python TESSEL_LIBRARY=build/libtessel.so /usr/bin/python3 examples/torch_model.py
(or, after `cmake --install`, with the installed module on the path)."""
import numpy as np
import torch
import torchvision

import tessel

torch.manual_seed(0)
# A small vision transformer: torchvision's ViT at ViT-Tiny width (192, 3 heads), 64x64 pixels, four layers.
model = torchvision.models.VisionTransformer(image_size=64, patch_size=8, num_layers=4, num_heads=3, hidden_dim=192,
                                             mlp_dim=768, num_classes=10).eval()
torch.nn.init.normal_(model.heads.head.weight, std=0.02)  # torchvision starts the head at zero
x = torch.randn(1, 3, 64, 64)
with torch.no_grad():
    want = model(x).numpy()

pkg = tessel.compile(model, example_inputs=(x,), machine="c600", precision="fp8")
out = pkg.run({pkg.input_names[0]: x})
got = out[pkg.output_names[0]]
cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
print(f"{out.cycles:,} cycles on {pkg.machine} ({', '.join(f'{k} {v:,}' for k, v in sorted(out.by_kind.items()))})")
print(f"cosine with PyTorch: {cos:.5f}")
result = tessel.check(model, example_inputs=(x,), expect=want, precision="fp8", package=pkg)
print(result)
pkg.report_html("torch_model.html")
print("the HTML report: torch_model.html")
raise SystemExit(0 if result.passed else 1)
