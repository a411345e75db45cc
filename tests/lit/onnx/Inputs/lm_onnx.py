#!/usr/bin/python3
"""Writes OUT/KIND.onnx, a language model that starts from token ids
(int64, as PyTorch writes them), with OUT/KIND.ids.npy (int64 ids) and
OUT/KIND.out.npy (PyTorch's output for them):

  bert  BERT-shaped: token, position and token-type embeddings summed and
        layer-normed, then post-LN encoder layers; the last hidden state.
  gpt2  GPT-2-shaped: token and position embeddings, pre-LN decoder layers
        under a causal mask, a final layer norm and the LM head tied to the
        token embedding; the logits.
  bertmask  the BERT with a second int64 input, attention_mask (1 keep, 0
        pad; OUT/bertmask.mask.npy pads the last quarter), as Hugging Face
        writes it: (1 - mask) * -10000 added to every head's scores.
  cols  columns of a weight picked by the ids (a Gather along axis 1),
        which tessel refuses by name.

    lm_onnx.py OUT KIND VOCAB E HEADS LAYERS T
"""
import os
import sys

import numpy as np
import torch


def layers(e, heads, n, pre_ln):
    layer = torch.nn.TransformerEncoderLayer(e, heads, 4 * e, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=pre_ln)
    return torch.nn.TransformerEncoder(layer, n, enable_nested_tensor=False)


class Bert(torch.nn.Module):
    def __init__(self, vocab, e, heads, n, t):
        super().__init__()
        self.words = torch.nn.Embedding(vocab, e)
        self.positions = torch.nn.Embedding(max(t, 16), e)
        self.types = torch.nn.Embedding(2, e)
        self.norm = torch.nn.LayerNorm(e, eps=1e-12)
        self.encoder = layers(e, heads, n, False)
        self.register_buffer("position_ids", torch.arange(t)[None, :])
        self.register_buffer("type_ids", torch.zeros(1, t, dtype=torch.long))

    def forward(self, ids):
        h = self.words(ids) + self.positions(self.position_ids) + self.types(self.type_ids)
        return self.encoder(self.norm(h))


class BertMask(Bert):
    def __init__(self, vocab, e, heads, n, t):
        super().__init__(vocab, e, heads, n, t)
        self.heads = heads

    def forward(self, ids, mask):
        h = self.words(ids) + self.positions(self.position_ids) + self.types(self.type_ids)
        b, t = mask.shape
        add = ((1.0 - mask.float()) * -10000.0)[:, None, None, :].expand(b, self.heads, t, t).reshape(b * self.heads, t, t)
        return self.encoder(self.norm(h), mask=add)


class Gpt2(torch.nn.Module):
    def __init__(self, vocab, e, heads, n, t):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, e)
        self.wpe = torch.nn.Embedding(max(t, 16), e)
        self.blocks = layers(e, heads, n, True)
        self.norm = torch.nn.LayerNorm(e)
        self.register_buffer("position_ids", torch.arange(t)[None, :])
        self.register_buffer("mask", torch.triu(torch.full((t, t), float("-inf")), 1))

    def forward(self, ids):
        h = self.wte(ids) + self.wpe(self.position_ids)
        h = self.norm(self.blocks(h, mask=self.mask))
        return h @ self.wte.weight.t()


class Cols(torch.nn.Module):
    def __init__(self, vocab, e, heads, n, t):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(e, vocab))

    def forward(self, ids):
        return self.w[:, ids]


def main(out, kind, vocab, e, heads, n, t):
    torch.manual_seed(0)
    model = {"bert": Bert, "bertmask": BertMask, "gpt2": Gpt2, "cols": Cols}[kind](vocab, e, heads, n, t).eval()
    with torch.no_grad():  # embeddings of unit scale, as trained ones are about
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding):
                m.weight.normal_(0.0, 0.5)
    ids = torch.from_numpy(np.random.default_rng(3).integers(0, vocab, (1, t)))
    args, names = (ids,), ["ids"]
    if kind == "bertmask":
        mask = torch.ones(1, t, dtype=torch.long)
        mask[:, t - t // 4:] = 0
        args, names = (ids, mask), ["ids", "mask"]
        np.save(os.path.join(out, kind + ".mask.npy"), mask.numpy())
    torch.onnx.export(model, args, os.path.join(out, kind + ".onnx"), input_names=names, output_names=["y"],
                      opset_version=17)
    with torch.no_grad():
        y = model(*args).numpy()
    np.save(os.path.join(out, kind + ".ids.npy"), ids.numpy())
    np.save(os.path.join(out, kind + ".out.npy"), y.astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:8]))
