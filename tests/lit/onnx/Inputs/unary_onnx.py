#!/usr/bin/python3
"""Writes OUT/unary.onnx (opset 13), OUT/unary.in.npy and OUT/unary.out.npy.

The model is x[4, 8] @ w[8, 8] = y, then every plain unary op on run-time data,
summed: relu(y) + sigmoid(y) + log(exp(tanh(y))) + neg(abs(y)) + sqrt(abs(y))
+ reciprocal(exp(tanh(y))) + erf(y) + softplus(y). The expected output is NumPy's, in
float64. The protobuf is encoded here by hand (varints and length-delimited
fields, onnx.proto's field numbers) so the test needs no onnx package.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_bytes import field, model, node, tensor, value_info  # noqa: E402


def main(out):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8)).astype(np.float16)
    w = (0.4 * rng.standard_normal((8, 8))).astype(np.float32)
    nodes = [("MatMul", ["x", "w"], "y"), ("Relu", ["y"], "r"), ("Sigmoid", ["y"], "s"), ("Tanh", ["y"], "t"),
             ("Exp", ["t"], "e"), ("Log", ["e"], "l"), ("Abs", ["y"], "a"), ("Neg", ["a"], "n"), ("Sqrt", ["a"], "q"),
             ("Reciprocal", ["e"], "c"), ("Erf", ["y"], "f"), ("Add", ["r", "s"], "s1"), ("Add", ["s1", "l"], "s2"),
             ("Add", ["s2", "n"], "s3"), ("Add", ["s3", "q"], "s4"), ("Add", ["s4", "c"], "s5"), ("Add", ["s5", "f"], "s6"),
             ("Softplus", ["y"], "p"), ("Add", ["s6", "p"], "out")]
    graph = b"".join(field(1, node(op, ins, [o], "/" + o + "/" + op)) for op, ins, o in nodes)
    graph += field(2, "unary") + field(5, tensor("w", w))
    graph += field(11, value_info("x", x.shape)) + field(12, value_info("out", (4, 8)))
    with open(os.path.join(out, "unary.onnx"), "wb") as f:
        f.write(model(graph, 13))
    y = x.astype(np.float64) @ w.astype(np.float64)
    t = np.tanh(y)
    erf = np.vectorize(math.erf)
    want = (np.maximum(y, 0) + 1 / (1 + np.exp(-y)) + np.log(np.exp(t)) - np.abs(y) + np.sqrt(np.abs(y)) + 1 / np.exp(t)
            + erf(y) + np.log1p(np.exp(y)))
    np.save(os.path.join(out, "unary.in.npy"), x)
    np.save(os.path.join(out, "unary.out.npy"), want.astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1])
