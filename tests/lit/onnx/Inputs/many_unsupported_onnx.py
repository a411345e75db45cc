#!/usr/bin/python3
"""Writes OUT.onnx: x[2, 3] through Floor, Sin, Floor and a node of a foreign
domain (com.example Magic), then Relu: four nodes tessel does not import.
Encoded by hand (onnx.proto's field numbers), so it needs no onnx package."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_bytes import field, model, node, value_info  # noqa: E402

nodes = [node("Floor", ["x"], ["a"], "f1"), node("Sin", ["a"], ["b"], "s1"), node("Floor", ["b"], ["c"], "f2"),
         node("Magic", ["c"], ["d"], "m1", "com.example"), node("Relu", ["d"], ["y"], "r1")]
graph = b"".join(field(1, n) for n in nodes) + field(2, "many")
graph += field(11, value_info("x", (2, 3))) + field(12, value_info("y", (2, 3)))
with open(sys.argv[1], "wb") as f:
    f.write(model(graph, 13))
