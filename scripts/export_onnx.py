#!/usr/bin/python3
"""Small ViTs in PyTorch, exported to ONNX, with PyTorch's own inputs and outputs.

Run with Debian's interpreter (python3-torch, python3-torchvision):

    /usr/bin/python3 scripts/export_onnx.py [OUT_DIR]          # the committed test models
    /usr/bin/python3 scripts/export_onnx.py --vit W,H,M,L,IMG,P[,gelu,opset,kind,batch,seed] OUT_DIR
                                                               # one model of any shape
    /usr/bin/python3 scripts/export_onnx.py --so400m OUT_DIR [--external]
                                                               # SigLIP So400m/14 at 224 px (1.65 GB)
    /usr/bin/python3 scripts/export_onnx.py --bad [OUT_DIR]    # hand-built models (tests/onnx/built): refused ones, odd ones

Every model NAME gives NAME.onnx, NAME.in.npy (the input, named as the ONNX
input) and NAME.out.npy (PyTorch's output). Weights are seeded random
normals, so the files are reproducible on one torch version. tessel checks
against them:

    tessel check NAME.onnx --input image=NAME.in.npy --expect logits=NAME.out.npy
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, w = x.shape
        c = w // self.heads
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, c).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c)
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, w)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, width, heads, mlp, gelu):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, eps=1e-6)
        self.attn = Attention(width, heads)
        self.ln2 = nn.LayerNorm(width, eps=1e-6)
        self.fc1 = nn.Linear(width, mlp)
        self.act = nn.GELU(approximate=gelu)
        self.fc2 = nn.Linear(mlp, width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class HandViT(nn.Module):
    """A hand-written pre-LayerNorm encoder: Conv patches, optional class token and head."""

    def __init__(self, image, patch, width, heads, mlp, layers, gelu, cls_head):
        super().__init__()
        self.patch = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2 + (1 if cls_head else 0)
        self.cls_head = cls_head
        if cls_head:
            self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
            self.head = nn.Linear(width, 10)
        self.pos = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.blocks = nn.ModuleList([Block(width, heads, mlp, gelu) for _ in range(layers)])
        self.norm = nn.LayerNorm(width, eps=1e-6)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        if self.cls_head:
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos
        for b in self.blocks:
            x = b(x)
        x = self.norm(x)
        return self.head(x[:, 0]) if self.cls_head else x


def randomize(model, seed):
    """Seeded weights of a realistic spread: LayerNorm gains near 1, biases small."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln" in name):
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.05 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel() if p.dim() > 1 else p.numel()
                std = 0.02 if ("pos" in name or "cls" in name or "class_token" in name) else 1 / math.sqrt(fan_in)
                p.copy_(std * torch.randn(p.shape, generator=g))


def torchvision_vit(image, patch, width, heads, mlp, layers):
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=image, patch_size=patch, num_layers=layers, num_heads=heads,
                             hidden_dim=width, mlp_dim=mlp, num_classes=10)


def export(model, name, out_dir, image, batch, opset, seed, external=False):
    model.eval()
    randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    # The input is rounded to f16 and saved so: tessel's imported input is f16
    # (or f32, an exact widening), and PyTorch sees exactly what tessel sees.
    x = torch.randn(batch, 3, image, image, generator=g).half().float()
    with torch.no_grad():
        y = model(x)
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, (x,), path, input_names=["image"], output_names=["logits"], opset_version=opset,
                      do_constant_folding=True)
    if external:
        import onnx
        m = onnx.load(path)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=name + ".data", size_threshold=1024)
    np.save(os.path.join(out_dir, name + ".in.npy"), x.numpy().astype(np.float16))
    np.save(os.path.join(out_dir, name + ".out.npy"), y.numpy().astype(np.float32))
    print("wrote", path, tuple(y.shape), file=sys.stderr)


# The committed suite: small enough to keep in git (tens of KB each).
SUITE = [
    # name, kind, image, patch, width, heads, mlp, layers, gelu, opset, batch, external data
    ("hand_tanh_op13", "hand", 16, 4, 24, 2, 48, 3, "tanh", 13, 1, False),
    ("hand_erf_op17", "hand_cls", 16, 4, 16, 4, 40, 2, "none", 17, 2, True),
    ("tv_vit_op13", "torchvision", 16, 4, 24, 3, 48, 2, "none", 13, 1, False),
    ("tv_vit_op17", "torchvision", 16, 4, 24, 2, 32, 2, "none", 17, 1, False),
]


def build(kind, image, patch, width, heads, mlp, layers, gelu):
    if kind == "torchvision":
        return torchvision_vit(image, patch, width, heads, mlp, layers)
    return HandViT(image, patch, width, heads, mlp, layers, gelu, kind == "hand_cls")


def bad_models(out_dir):
    """Small hand-built models the importer must refuse with a clear message."""
    import onnx
    from onnx import TensorProto, helper
    os.makedirs(out_dir, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    g = helper.make_graph([helper.make_node("Sin", ["x"], ["y"], name="/block/Sin")], "unsupported", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), os.path.join(out_dir, "unsupported_op.onnx"))
    xd = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    yd = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="/Relu")], "dynamic", [xd], [yd])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out_dir, "dynamic_dim.onnx"))
    # A reshape whose target comes from run-time data: its shape does not infer.
    g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["s"], name="/Sum", keepdims=0),
                           helper.make_node("Reshape", ["x", "s"], ["y"], name="/Reshape")], "runtime_shape", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out_dir, "runtime_shape.onnx"))
    # Three residual blocks, the last of which subtracts: two fold, the report says why the third did not.
    import numpy as np
    from onnx import numpy_helper
    inits, nodes, h = [], [], "x"
    for i in range(3):
        inits.append(numpy_helper.from_array(np.full((4, 4), 0.1 * (i + 1), np.float32), "w%d" % i))
        nodes.append(helper.make_node("MatMul", [h, "w%d" % i], ["m%d" % i], name="/blocks.%d/MatMul" % i))
        nodes.append(helper.make_node("Sub" if i == 2 else "Add", [h, "m%d" % i], ["h%d" % i if i < 2 else "y"],
                                      name="/blocks.%d/Residual" % i))
        h = "h%d" % i
    g = helper.make_graph(nodes, "partial_fold", [x], [y], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out_dir, "partial_fold.onnx"))
    # Weights in the typed fields (float_data, int64_data) rather than raw_data, with numpy's answer.
    rng = np.random.default_rng(5)
    wv = rng.standard_normal((4, 6)).astype(np.float32)
    bv = rng.standard_normal(6).astype(np.float32)
    xv = rng.standard_normal((2, 4)).astype(np.float16).astype(np.float32)
    typed = [helper.make_tensor("w", TensorProto.FLOAT, [4, 6], wv.ravel().tolist(), raw=False),
             helper.make_tensor("b", TensorProto.FLOAT, [6], bv.ravel().tolist(), raw=False),
             helper.make_tensor("shape", TensorProto.INT64, [3], [2, 3, 2], raw=False)]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="/fc/MatMul"),
             helper.make_node("Add", ["m", "b"], ["a"], name="/fc/Add"),
             helper.make_node("Reshape", ["a", "shape"], ["y"], name="/Reshape")]
    yt = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 2])
    g = helper.make_graph(nodes, "typed_fields", [x], [yt], typed)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out_dir, "typed_fields.onnx"))
    np.save(os.path.join(out_dir, "typed_fields.in.npy"), xv.astype(np.float16))
    np.save(os.path.join(out_dir, "typed_fields.out.npy"), (xv @ wv + bv).reshape(2, 3, 2))
    # Ops the ViT exports use rarely, on run-time data, with numpy's answer.
    xm = rng.standard_normal((2, 6, 4)).astype(np.float16).astype(np.float32)
    wm = (0.3 * rng.standard_normal((12, 5))).astype(np.float32)
    cm = rng.standard_normal(5).astype(np.float32)
    dm = (1.0 + rng.random(5)).astype(np.float32)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v), name)
    inits = [c("split", np.array([2, 4], np.int64)), c("w", wm), c("c", cm), c("den", dm),
             c("ax1", np.array([1], np.int64)), c("shape", np.array([2, 3, 5], np.int64)), c("two", np.float32(2)),
             c("idx", np.array([2, 0], np.int64)), c("one", np.float32(1)), c("s0", np.array([0], np.int64)),
             c("s1", np.array([1], np.int64))]
    nodes = [helper.make_node("Split", ["x", "split"], ["a0", "a1"], name="/Split", axis=1),
             helper.make_node("ReduceMean", ["a1"], ["b"], name="/ReduceMean", axes=[1], keepdims=1),
             helper.make_node("Concat", ["a0", "b"], ["cc"], name="/Concat", axis=1),
             helper.make_node("Flatten", ["cc"], ["d"], name="/Flatten", axis=1),
             helper.make_node("Gemm", ["d", "w", "c"], ["e"], name="/Gemm", alpha=0.5, beta=2.0),
             helper.make_node("Unsqueeze", ["e", "ax1"], ["f"], name="/Unsqueeze"),
             helper.make_node("Expand", ["f", "shape"], ["g"], name="/Expand"),
             helper.make_node("Pow", ["g", "two"], ["h"], name="/Pow"),
             helper.make_node("Div", ["h", "den"], ["i"], name="/Div"),
             helper.make_node("Gather", ["i", "idx"], ["j"], name="/Gather", axis=1),
             helper.make_node("Sub", ["j", "one"], ["k"], name="/Sub"),
             helper.make_node("Slice", ["k", "s0", "s1", "ax1"], ["sl"], name="/Slice"),
             helper.make_node("Squeeze", ["sl", "ax1"], ["l"], name="/Squeeze"),
             helper.make_node("Softmax", ["l"], ["y"], name="/Softmax", axis=1)]
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 4])
    yo = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    g = helper.make_graph(nodes, "more_ops", [xi], [yo], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out_dir, "more_ops.onnx"))
    a0, a1 = xm[:, :2], xm[:, 2:]
    d = np.concatenate([a0, a1.mean(axis=1, keepdims=True)], axis=1).reshape(2, 12)
    e = 0.5 * d @ wm + 2.0 * cm
    i = np.broadcast_to(e[:, None, :], (2, 3, 5)) ** 2 / dm
    l = i[:, [2, 0]][:, 0] - 1.0
    y = np.exp(l - l.max(axis=1, keepdims=True))
    np.save(os.path.join(out_dir, "more_ops.in.npy"), xm.astype(np.float16))
    np.save(os.path.join(out_dir, "more_ops.out.npy"), (y / y.sum(axis=1, keepdims=True)).astype(np.float32))
    print("wrote bad models in", out_dir, file=sys.stderr)


def main(argv):
    torch.manual_seed(0)
    if argv and argv[0] == "--bad":
        bad_models(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "onnx", "built"))
        return
    if len(argv) >= 2 and argv[0] == "--vit":
        f = argv[1].split(",")
        w, h, m, l, img, p = (int(v) for v in f[:6])
        gelu = f[6] if len(f) > 6 else "none"
        opset = int(f[7]) if len(f) > 7 else 17
        kind = f[8] if len(f) > 8 else "hand_cls"
        batch = int(f[9]) if len(f) > 9 else 1
        seed = int(f[10]) if len(f) > 10 else 7
        out = argv[2] if len(argv) > 2 else "."
        os.makedirs(out, exist_ok=True)
        name = "vit_%s_w%d_h%d_m%d_l%d_%s_op%d_b%d_s%d" % (kind, w, h, m, l, gelu, opset, batch, seed)
        export(build(kind, img, p, w, h, m, l, gelu), name, out, img, batch, opset, seed)
        return
    if argv and argv[0] == "--so400m":
        # One file, as torch.onnx.export writes models under 2 GB; --external
        # moves the weights into so400m.data beside it.
        out = argv[1] if len(argv) > 1 and argv[1] != "--external" else "."
        os.makedirs(out, exist_ok=True)
        model = HandViT(224, 14, 1152, 16, 4304, 27, "tanh", False)
        export(model, "so400m", out, 224, 1, 17, 11, external="--external" in argv)
        return
    out = argv[0] if argv else os.path.join(os.path.dirname(__file__), "..", "tests", "onnx")
    os.makedirs(out, exist_ok=True)
    for i, (name, kind, img, p, w, h, m, l, gelu, opset, batch, ext) in enumerate(SUITE):
        export(build(kind, img, p, w, h, m, l, gelu), name, out, img, batch, opset, 100 + i, external=ext)


if __name__ == "__main__":
    main(sys.argv[1:])
