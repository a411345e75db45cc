#!/usr/bin/python3
"""Writes window ops tessel must refuse, as OUT/NAME.onnx (built with
onnx.helper: PyTorch would not export them):
  autopad_long   a MaxPool whose auto_pad is no value ONNX defines
  bn_negative    a BatchNormalization whose variance plus epsilon is negative
  huge_dilation  a MaxPool dilated by 2^62 (the window's width would overflow)
  bias_length    a Conv with 8 outputs and a bias of 7
and one it must take: one_window, a MaxPool of one window with a stride of
10^6 (the stride of a single window is no stride).
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, save


def write(path, nodes, inits, out_shape):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], initializer=inits)
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def const(name, values, shape=None):
    return helper.make_tensor(name, TensorProto.FLOAT, shape or [len(values)], values)


def main(out):
    write(os.path.join(out, "autopad_long.onnx"),
          [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], auto_pad="SAME_UPPER_AND_MORE")],
          [], [1, 4, 8, 8])
    write(os.path.join(out, "bn_negative.onnx"),
          [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=0.0)],
          [const("s", [1.0] * 4), const("b", [0.0] * 4), const("m", [0.0] * 4), const("v", [1.0, 1.0, -1.0, 1.0])],
          [1, 4, 8, 8])
    write(os.path.join(out, "huge_dilation.onnx"),
          [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[1 << 62, 1])], [], [1, 4, 1, 7])
    write(os.path.join(out, "bias_length.onnx"), [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
          [const("w", [0.1] * (8 * 4 * 9), [8, 4, 3, 3]), const("b", [0.0] * 7)], [1, 8, 8, 8])
    write(os.path.join(out, "one_window.onnx"),
          [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[8, 8], strides=[1000000, 1000000])], [], [1, 4, 1, 1])


if __name__ == "__main__":
    main(sys.argv[1])
