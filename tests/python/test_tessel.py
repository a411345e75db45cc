"""The Python module over libtessel: a PyTorch module from tessel.compile to
outputs that match PyTorch's, zoo models, saved packages, the reports, and
errors that name the wrong input, shape or dtype. Run by CTest (`python`)
with TESSEL_LIBRARY and PYTHONPATH pointing into the build and the tree."""
import json
import os

import numpy as np
import pytest
import torch

import tessel

ZOO = "zoo:mlp:tokens=24,width=64,hidden=96"


class Block(torch.nn.Module):
    """A pre-LN MLP block with a residual: not a zoo model."""

    def __init__(self, width=64, hidden=256):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Encoder(torch.nn.Module):
    """Blocks in sequence; in FP8 the import gives their GEMMs f143 weights."""

    def __init__(self, depth=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(depth))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def zoo_pkg():
    return tessel.compile(ZOO, search_steps=8)


@pytest.fixture(scope="module")
def torch_case():
    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(32, 64)
    with torch.no_grad():
        y = model(x).numpy()
    return model, x, y


def test_version():
    assert tessel.version() == "0.1"


def test_torch_module_in_fp8_matches_pytorch(torch_case):
    model, x, y = torch_case
    pkg = tessel.compile(model, example_inputs=(x,), machine="c600", precision="fp8")
    assert pkg.input_names == ["x"]
    assert pkg.inputs[0].declared == "f32" and pkg.inputs[0].shape == (32, 64)
    out = pkg.run({"x": x})
    assert list(out) == pkg.output_names
    got = out[pkg.output_names[0]]
    assert got.shape == y.shape and got.dtype == np.float32
    assert cosine(got, y) >= 0.99
    assert out.cycles > 0 and sum(out.by_kind.values()) == out.cycles
    # The same through tessel.check: bit for bit against the plan-exact
    # reference, and by cosine against PyTorch's output.
    res = tessel.check(model, example_inputs=(x,), expect=y, precision="fp8")
    assert res.details["fp8"]  # the program computes with 8-bit values
    assert res.passed and res.exact
    assert res.expect_cosine >= 0.99
    assert abs(res.expect_cosine - cosine(got, y)) < 1e-4
    assert res.cycles == out.cycles


class Embed(torch.nn.Module):
    """Token ids (int64) to a block: an embedding lookup on the device."""

    def __init__(self, vocab=500, width=64):
        super().__init__()
        self.words = torch.nn.Embedding(vocab, width)
        self.block = Block(width)

    def forward(self, ids):
        return self.block(self.words(ids))


def test_token_ids_from_pytorch():
    torch.manual_seed(0)
    model = Embed().eval()
    ids = torch.randint(0, 500, (2, 16))
    with torch.no_grad():
        y = model(ids).numpy()
    pkg = tessel.compile(model, example_inputs=(ids,), machine="c600")
    assert pkg.inputs[0].dtype == "i32" and pkg.inputs[0].shape == (2, 16)
    got = pkg.run({"ids": ids})[pkg.output_names[0]]
    assert cosine(got, y) >= 0.999
    res = pkg.check(inputs={"ids": ids.numpy()}, expect=y)
    assert res.passed and res.exact
    with pytest.raises(tessel.Error, match="int64 values that do not fit 32 bits"):
        pkg.run({"ids": np.full((2, 16), 2**40, np.int64)})


def test_check_fails_against_wrong_values(zoo_pkg):
    y = np.ones(zoo_pkg.outputs[0].shape, np.float32)
    res = zoo_pkg.check(expect=y)
    assert not res.passed and res.exact  # the package is right; the expected values are not
    assert res.expect_cosine < 0.9


def test_zoo_run_is_deterministic_and_inputs_count(zoo_pkg):
    x = np.random.default_rng(1).standard_normal((24, 64)).astype(np.float16)
    y = zoo_pkg.output_names[0]
    a, b = zoo_pkg.run({"x": x}), zoo_pkg.run({"x": x})
    assert np.array_equal(a[y], b[y]) and a.cycles == b.cycles
    seeded = zoo_pkg.run()
    assert not np.array_equal(seeded[y], a[y])
    # f32 data for an f16 input is a possible loss: asked for, it rounds.
    c = zoo_pkg.run({"x": x.astype(np.float32)}, convert=True)
    assert np.array_equal(c[y], a[y])


def test_wrong_inputs_raise_errors_naming_them(zoo_pkg):
    x = np.zeros((24, 64), np.float16)
    with pytest.raises(tessel.Error, match=r"no input 'image' \(inputs: x\)"):
        zoo_pkg.run({"image": x})
    with pytest.raises(tessel.Error, match=r"'x' is given with shape \[24, 63\] but is f16\[24, 64\]"):
        zoo_pkg.run({"x": np.zeros((24, 63), np.float16)})
    with pytest.raises(tessel.Error, match=r"'x' has dtype int64"):
        zoo_pkg.run({"x": np.zeros((24, 64), np.int64)})
    with pytest.raises(tessel.Error, match=r"'x' is given as f32 but is f16.*convert"):
        zoo_pkg.run({"x": np.zeros((24, 64), np.float32)})
    with pytest.raises(tessel.Error, match=r"unknown machine 'c700'"):
        tessel.compile(ZOO, machine="c700")
    with pytest.raises(tessel.Error, match=r"precision must be"):
        tessel.compile(ZOO, precision="fp4")


def test_no_fit():
    with pytest.raises(tessel.NoFit, match="does not fit"):
        tessel.compile("zoo:vit:layers=1", machine="tiny", search_steps=4)


def test_save_load_and_reports(zoo_pkg, tmp_path):
    path = tmp_path / "mlp.tpk"
    zoo_pkg.save(path)
    loaded = tessel.load(path, model=ZOO)
    assert loaded.machine == "c600" and loaded.input_names == zoo_pkg.input_names
    y = zoo_pkg.output_names[0]
    assert np.array_equal(loaded.run()[y], zoo_pkg.run()[y])
    assert loaded.check().passed
    assert "grid" in json.dumps(zoo_pkg.recipe)
    assert zoo_pkg.report is None
    reported = tessel.compile(ZOO, search_steps=8, report=True)
    assert reported.report["format"] == "tessel-compile-report"
    page = tmp_path / "r.html"
    reported.report_html(page)
    assert page.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(tessel.Error, match="nonexistent"):
        reported.report_html(tmp_path / "nonexistent" / "r.html")
    assert not os.path.exists(tmp_path / "nonexistent")


def test_scalar_values(tmp_path):
    """A rank-0 value (the model's; a package binding holds it as one
    element) is taken as a rank-0 array, not reshaped on the way in."""
    src = tmp_path / "sum.tsl"
    src.write_text("graph sum\ninput %x : f16[4, 8]\n%s = reduce_sum(%x) {axes = [0, 1]} : f16[]\noutput %s\n")
    model = tessel.load_model(str(src))
    assert model.outputs[0].shape == ()
    pkg = tessel.compile(model, search_steps=0)
    x = np.arange(32, dtype=np.float16).reshape(4, 8) / 8
    out = pkg.run({"x": x})
    assert out["s"].size == 1 and float(out["s"].reshape(())) == float(x.astype(np.float64).sum())
    assert tessel.check(str(src), example_inputs=(x,), expect=np.float32(x.astype(np.float64).sum()), search_steps=0).passed
