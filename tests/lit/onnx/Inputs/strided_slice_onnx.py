#!/usr/bin/python3
"""Writes OUT/strided.onnx (PyTorch, opset 17), OUT/strided.in.npy and
OUT/strided.out.npy: slices with steps of x[1, 8, 8, 6] (swin_t's patch
merging x[:, 0::2, 0::2], x[:, 1::2, 0::2], ...; a step of 3 from 1 on 8
elements, which needs padding; a step past the axis), flattened and joined."""
import os
import sys

import numpy as np
import torch


class Strided(torch.nn.Module):
    def forward(self, x):
        parts = [x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :], x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :],
                 x[:, 1::3, :, 1:5:3], x[:, ::7, ::100, :]]
        return torch.cat([p.reshape(-1) for p in parts]) * 1.0


def main(out):
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((1, 8, 8, 6)).astype(np.float16)).float()
    m = Strided().eval()
    torch.onnx.export(m, (x,), os.path.join(out, "strided.onnx"), input_names=["x"], output_names=["y"], opset_version=17)
    np.save(os.path.join(out, "strided.in.npy"), x.numpy().astype(np.float16))
    np.save(os.path.join(out, "strided.out.npy"), m(x).numpy().astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1])
