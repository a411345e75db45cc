#!/usr/bin/python3
"""Writes OUT/NAME.onnx (exported by PyTorch, opset 17), OUT/NAME.in.npy
(f16, or f32 for an f32 case) and OUT/NAME.out.npy (PyTorch's float32
output on those values) for each window op case below, and OUT/cases.txt,
one "NAME MACHINE PRECISION" a line.

    conv_onnx.py OUT [NAME...]   (no NAME: every case but resnet18_64)
"""
import os
import sys

import numpy as np
import torch
import torchvision

nn = torch.nn


def batch_norm(c, g):
    b = nn.BatchNorm2d(c)
    b.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
    b.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)
    b.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
    b.bias.data.copy_(torch.rand(c, generator=g) * 0.4 - 0.2)
    return b


def resnet18():
    torch.manual_seed(0)
    return torchvision.models.resnet18()


# name: (module factory, input shape, machine[, precision, input offset])
CASES = {
    "conv3x3": (lambda g: nn.Conv2d(8, 16, 3, padding=1), (1, 8, 12, 12), "tiny"),
    "conv3x3_s2": (lambda g: nn.Conv2d(8, 16, 3, stride=2, padding=1), (1, 8, 13, 13), "c600"),
    "conv7_s2_p3": (lambda g: nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), (1, 3, 20, 20), "c600"),
    "conv1x1_s2": (lambda g: nn.Conv2d(8, 16, 1, stride=2, bias=False), (1, 8, 10, 10), "tiny"),
    "dilated": (lambda g: nn.Conv2d(8, 8, 3, padding=2, dilation=2), (1, 8, 11, 9), "tiny"),
    "groups2": (lambda g: nn.Conv2d(8, 12, 3, padding=1, groups=2), (1, 8, 9, 9), "tiny"),
    "depthwise5_s2": (lambda g: nn.Conv2d(16, 16, 5, stride=2, padding=2, groups=16), (1, 16, 15, 15), "c600"),
    "batch2_relu": (lambda g: nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU()), (2, 4, 8, 8), "tiny"),
    "conv1d_s2": (lambda g: nn.Conv1d(8, 16, 3, padding=1, stride=2), (1, 8, 17), "tiny"),
    "maxpool": (lambda g: nn.MaxPool2d(3, 2, 1), (1, 8, 15, 15), "tiny"),
    "maxpool_ceil": (lambda g: nn.MaxPool2d(3, 2, 0, ceil_mode=True), (1, 4, 10, 10), "tiny"),
    "avgpool": (lambda g: nn.AvgPool2d(3, 2, 1), (1, 8, 11, 11), "tiny"),
    "avgpool_exclude_pad_ceil": (lambda g: nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), (1, 4, 10, 10),
                                 "tiny"),
    "batchnorm": (lambda g: nn.Sequential(batch_norm(8, g), nn.ReLU()), (1, 8, 6, 6), "tiny"),
    "resnet18_64": (lambda g: resnet18(), (1, 3, 64, 64), "c600"),
    # In f32, values far below the lowest f16: the padding is below them all.
    "maxpool_f32_low": (lambda g: nn.MaxPool2d(3, 2, 1), (1, 2, 6, 6), "tiny", "f32", -1e5),
}


def main(out, names):
    lines = []
    for name in names or [n for n in CASES if n != "resnet18_64"]:
        make, shape, machine, precision, offset = (CASES[name] + ("f16", 0.0))[:5]
        g = torch.Generator().manual_seed(7)
        torch.manual_seed(1)
        model = make(g).eval()
        dt = np.float32 if precision == "f32" else np.float16
        x = torch.from_numpy((np.random.default_rng(5).standard_normal(shape) * (1 + abs(offset) / 100) + offset).astype(dt)).float()
        with torch.no_grad():
            want = model(x).numpy()
        torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), input_names=["x"], output_names=["y"],
                          opset_version=17)
        np.save(os.path.join(out, name + ".in.npy"), x.numpy().astype(dt))
        np.save(os.path.join(out, name + ".out.npy"), want.astype(np.float32))
        lines.append("%s %s %s\n" % (name, machine, precision))
    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
