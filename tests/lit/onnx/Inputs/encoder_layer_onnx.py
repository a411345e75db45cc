#!/usr/bin/python3
"""Writes OUT/tel.onnx: PyTorch's nn.TransformerEncoderLayer (pre-LN, GeLU,
sequence first: x is [T, 1, E]), with OUT/tel.in.npy and OUT/tel.out.npy
(PyTorch's output); and OUT/flat.onnx: the same block, same weights, written
with batch-first matmuls on [T, E].

    encoder_layer_onnx.py OUT E HEADS T
"""
import os
import sys

import numpy as np
import torch


class BatchFirst(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.l = layer

    def forward(self, x):
        l, e = self.l, x.shape[-1]
        h = l.self_attn.num_heads
        a = l.norm1(x)
        q, k, v = (a @ l.self_attn.in_proj_weight.t() + l.self_attn.in_proj_bias).split(e, -1)
        q, k, v = (t.reshape(-1, h, e // h).transpose(0, 1) for t in (q, k, v))
        p = torch.softmax(q @ k.transpose(1, 2) / (e // h) ** 0.5, -1)
        x = x + ((p @ v).transpose(0, 1).reshape(-1, e) @ l.self_attn.out_proj.weight.t() + l.self_attn.out_proj.bias)
        return x + l.linear2(torch.nn.functional.gelu(l.linear1(l.norm2(x))))


def main(out, e, heads, t):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(e, heads, dim_feedforward=4 * e, dropout=0.0, activation="gelu",
                                             norm_first=True).eval()
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((t, 1, e)).astype(np.float16)).float()
    torch.onnx.export(layer, (x,), os.path.join(out, "tel.onnx"), input_names=["x"], output_names=["y"], opset_version=17)
    torch.onnx.export(BatchFirst(layer).eval(), (x[:, 0, :],), os.path.join(out, "flat.onnx"), input_names=["x"],
                      output_names=["y"], opset_version=17)
    with torch.no_grad():
        y = layer(x).numpy()
    np.save(os.path.join(out, "tel.in.npy"), x.numpy().astype(np.float16))
    np.save(os.path.join(out, "tel.out.npy"), y.astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:5]))
