#!/usr/bin/python3
"""Writes OUT/clip.onnx (exported by PyTorch, opset 17), OUT/clip.in.npy and
OUT/clip.out.npy (PyTorch's output in float32).

The model: y = x @ w, then ReLU6, hardsigmoid, hardswish, clamp with
constant bounds, and maximum and minimum of two run-time tensors, summed.
"""
import os
import sys

import numpy as np
import torch


class Clips(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = torch.nn.Parameter(torch.randn(16, 16, generator=g) * 0.6)
        self.v = torch.nn.Parameter(torch.randn(16, 16, generator=g) * 0.6)

    def forward(self, x):
        y, z = x @ self.w, x @ self.v
        f = torch.nn.functional
        return (f.relu6(3 * y) + f.hardsigmoid(2 * y) + f.hardswish(3 * y) + torch.clamp(y, -0.5, 0.75)
                + torch.maximum(y, z) - torch.minimum(y, z))


def main(out):
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((8, 16)).astype(np.float16)).float()
    model = Clips().eval()
    torch.onnx.export(model, (x,), os.path.join(out, "clip.onnx"), input_names=["x"], output_names=["out"], opset_version=17)
    with torch.no_grad():
        want = model(x).numpy()
    np.save(os.path.join(out, "clip.in.npy"), x.numpy().astype(np.float16))
    np.save(os.path.join(out, "clip.out.npy"), want.astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1])
