"""ONNX protobuf bytes written by hand (varints and length-delimited fields,
onnx.proto's field numbers), for the tests' small models: no onnx package
needed."""


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


def node(op, inputs, outputs, name, domain=None):  # NodeProto: input 1, output 2, name 3, op_type 4, domain 7
    return (b"".join(field(1, i) for i in inputs) + b"".join(field(2, o) for o in outputs) + field(3, name) + field(4, op)
            + (field(7, domain) if domain else b""))


def model(graph, opset=13):  # ModelProto: ir_version 1, opset_import 8 (domain 1, version 2), graph 7
    return field(1, 7) + field(8, field(1, "") + field(2, opset)) + field(7, graph)
