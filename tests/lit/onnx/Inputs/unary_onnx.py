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


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, value):
    """One field: an int is a varint, bytes or str length-delimited."""
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def tensor(name, a):  # TensorProto: dims 1, data_type 2 (FLOAT = 1), name 8, raw_data 9
    return b"".join(field(1, d) for d in a.shape) + field(2, 1) + field(8, name) + field(9, a.astype("<f4").tobytes())


def value_info(name, shape):  # ValueInfoProto: name 1, type 2 -> tensor_type 1 -> elem_type 1, shape 2 -> dim 1 -> dim_value 1
    dims = b"".join(field(1, field(1, d)) for d in shape)
    return field(1, name) + field(2, field(1, field(1, 1) + field(2, dims)))


def node(op, inputs, outputs, name):  # NodeProto: input 1, output 2, name 3, op_type 4
    return b"".join(field(1, i) for i in inputs) + b"".join(field(2, o) for o in outputs) + field(3, name) + field(4, op)


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
    model = field(1, 7) + field(8, field(1, "") + field(2, 13)) + field(7, graph)  # ir_version 7, opset 13
    with open(os.path.join(out, "unary.onnx"), "wb") as f:
        f.write(model)
    y = x.astype(np.float64) @ w.astype(np.float64)
    t = np.tanh(y)
    erf = np.vectorize(math.erf)
    want = (np.maximum(y, 0) + 1 / (1 + np.exp(-y)) + np.log(np.exp(t)) - np.abs(y) + np.sqrt(np.abs(y)) + 1 / np.exp(t)
            + erf(y) + np.log1p(np.exp(y)))
    np.save(os.path.join(out, "unary.in.npy"), x)
    np.save(os.path.join(out, "unary.out.npy"), want.astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1])
