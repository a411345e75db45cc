#!/usr/bin/python3
"""Writes OUT.onnx: x[2, 3] through Floor, Sin, Floor and a node of a foreign
domain (com.example Magic), then Relu: four nodes tessel does not import.
Encoded by hand (onnx.proto's field numbers), so it needs no onnx package."""
import sys


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def value_info(name, shape):
    dims = b"".join(field(1, field(1, d)) for d in shape)
    return field(1, name) + field(2, field(1, field(1, 1) + field(2, dims)))


def node(op, i, o, name, domain=None):  # NodeProto: input 1, output 2, name 3, op_type 4, domain 7
    return field(1, i) + field(2, o) + field(3, name) + field(4, op) + (field(7, domain) if domain else b"")


nodes = [node("Floor", "x", "a", "f1"), node("Sin", "a", "b", "s1"), node("Floor", "b", "c", "f2"),
         node("Magic", "c", "d", "m1", "com.example"), node("Relu", "d", "y", "r1")]
graph = b"".join(field(1, n) for n in nodes) + field(2, "many")
graph += field(11, value_info("x", (2, 3))) + field(12, value_info("y", (2, 3)))
model = field(1, 7) + field(8, field(1, "") + field(2, 13)) + field(7, graph)
with open(sys.argv[1], "wb") as f:
    f.write(model)
