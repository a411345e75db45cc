#!/usr/bin/python3
"""Writes OUT/deep.onnx: a linear E -> E, then DEPTH blocks x = W2 relu(W1 x)
on [T, E] (W1: E -> H, W2: H -> E, bias-free, normal weights of the
variance that keeps the signal's scale), then a last linear E -> E; with OUT/deep.in.npy and
OUT/deep.out.npy (PyTorch's output). Deep, plain and narrow: the FP8
rounding of every GEMM adds up, and nothing averages it away.

    deep_mlp_onnx.py OUT DEPTH T E H
"""
import os
import sys

import numpy as np
import torch


class Deep(torch.nn.Module):
    def __init__(self, depth, e, h):
        super().__init__()
        self.w1 = torch.nn.ModuleList(torch.nn.Linear(e, h, bias=False) for _ in range(depth))
        self.w2 = torch.nn.ModuleList(torch.nn.Linear(h, e, bias=False) for _ in range(depth))
        self.stem = torch.nn.Linear(e, e, bias=False)
        self.head = torch.nn.Linear(e, e, bias=False)
        with torch.no_grad():
            for l in self.w1:
                l.weight.normal_(0, (2 / e) ** 0.5)
            for l in self.w2:
                l.weight.normal_(0, (1 / h) ** 0.5)

    def forward(self, x):
        x = self.stem(x)
        for a, b in zip(self.w1, self.w2):
            x = b(torch.relu(a(x)))
        return self.head(x)


def main(out, depth, t, e, h):
    torch.manual_seed(0)
    m = Deep(depth, e, h).eval()
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((t, e)).astype(np.float16)).float()
    torch.onnx.export(m, (x,), os.path.join(out, "deep.onnx"), input_names=["x"], output_names=["y"], opset_version=17)
    with torch.no_grad():
        y = m(x)
    np.save(os.path.join(out, "deep.in.npy"), x.numpy().astype(np.float16))
    np.save(os.path.join(out, "deep.out.npy"), y.numpy().astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:6]))
