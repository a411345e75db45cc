#!/usr/bin/python3
"""Writes OUT/pool.onnx (PyTorch, opset 17): x[1, 4, 6, 6] padded (constant
0.5 on the last two axes), ReLU, global average pooling, flattened, a Linear;
plus OUT/pool.in.npy and OUT/pool.out.npy (PyTorch's output). And
OUT/consts.onnx (onnx.helper): x[2] plus Cast(Mod([5, -7], [3, 3])) plus
Cast(Not([true, false])) plus ScatterND([0, 0], [[1]], [7]), every value but
x constant, with its expected output in OUT/consts.out.npy: [2+2+0+0,
2+2+1+7] for x = [2, 2] (Python's %: 5 % 3 = -7 % 3 = 2)."""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper


class PoolPad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = torch.relu(torch.nn.functional.pad(x, (1, 2, 0, 1), value=0.5))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def main(out):
    torch.manual_seed(1)
    m = PoolPad().eval()
    x = torch.from_numpy(np.random.default_rng(4).standard_normal((1, 4, 6, 6)).astype(np.float16)).float()
    torch.onnx.export(m, (x,), os.path.join(out, "pool.onnx"), input_names=["x"], output_names=["y"], opset_version=17)
    with torch.no_grad():
        np.save(os.path.join(out, "pool.out.npy"), m(x).numpy().astype(np.float32))
    np.save(os.path.join(out, "pool.in.npy"), x.numpy().astype(np.float16))
    i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)], v)
    nodes = [helper.make_node("Constant", [], ["a"], value=i64("a", [5, -7])),
             helper.make_node("Constant", [], ["b"], value=i64("b", [3, 3])),
             helper.make_node("Mod", ["a", "b"], ["m"]),
             helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Constant", [], ["t"], value=helper.make_tensor("t", TensorProto.BOOL, [2], [1, 0])),
             helper.make_node("Not", ["t"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Constant", [], ["z"], value=helper.make_tensor("z", TensorProto.FLOAT, [2], [0, 0])),
             helper.make_node("Constant", [], ["i"], value=helper.make_tensor("i", TensorProto.INT64, [1, 1], [1])),
             helper.make_node("Constant", [], ["u"], value=helper.make_tensor("u", TensorProto.FLOAT, [1], [7])),
             helper.make_node("ScatterND", ["z", "i", "u"], ["sc"]),
             helper.make_node("Add", ["x", "mf"], ["s"]), helper.make_node("Add", ["s", "nf"], ["s2"]),
             helper.make_node("Add", ["s2", "sc"], ["y"])]
    g = helper.make_graph(nodes, "consts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "consts.onnx"))
    np.save(os.path.join(out, "consts.in.npy"), np.array([2, 2], np.float16))
    np.save(os.path.join(out, "consts.out.npy"), np.array([4, 12], np.float32))


if __name__ == "__main__":
    main(sys.argv[1])
