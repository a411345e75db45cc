"""tessel: compile a model for a tile machine of the Graphcore IPU class, run
it on tessel's simulator, and check it, from Python with NumPy arrays.

    import tessel
    pkg = tessel.compile(model, example_inputs=(x,), machine="c600", precision="fp8")
    pkg.input_names                  # the package's inputs, in order
    out = pkg.run({"x": x})          # a dict of NumPy outputs, with out.cycles and out.by_kind
    res = tessel.check(model, example_inputs=(x,), expect=torch_output)
    pkg.report_html("report.html")

`model` is a torch.nn.Module (exported to ONNX in memory with its example
inputs), an .onnx or .tsl path, or a zoo spec ("zoo:vit:layers=2"). Every
failure raises tessel.Error carrying tessel's message; a model that does not
fit raises tessel.NoFit (an Error). The module calls libtessel through
ctypes (docs/api.md); it finds the library through $TESSEL_LIBRARY, where
`cmake --install` put it, or the system's library path.
"""
import ctypes
import ctypes.util
import io
import inspect
import json
import os

import numpy as np

__all__ = ["Error", "NoFit", "Model", "Package", "Outputs", "CheckResult", "TensorInfo", "load_model", "compile", "check",
           "load", "version"]

# ---- the library ------------------------------------------------------------

_MAX_RANK = 6
_OK, _CHECK_FAILED, _ERROR, _NO_FIT = 0, 1, 2, 3
_INPUT, _OUTPUT = 0, 1
_DTYPES = ["f32", "f16", "bf16", "f8e4m3", "f8e5m2", "f143", "i32", "f64"]
_F32, _F16, _I32, _F64 = 0, 1, 6, 7
_NUMPY = {np.dtype(np.float32): _F32, np.dtype(np.float16): _F16, np.dtype(np.float64): _F64, np.dtype(np.int32): _I32}
_PRECISIONS = {"f16": 0, "fp8": 1, "f32": 2, "fp8-all": 3}


class _Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * 4096)]


class _Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("declared", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * _MAX_RANK)]


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * _MAX_RANK), ("data", ctypes.c_void_p)]


class _ModelOptions(ctypes.Structure):
    _fields_ = [("precision", ctypes.c_int), ("no_reroll", ctypes.c_int), ("import_report", ctypes.c_int)]


class _CompileOptions(ctypes.Structure):
    _fields_ = [("recipe", ctypes.c_char_p), ("search_steps", ctypes.c_int64), ("beam", ctypes.c_int),
                ("no_fuse", ctypes.c_int), ("no_siblings", ctypes.c_int), ("report", ctypes.c_int),
                ("progress", ctypes.c_int)]


class _RunOptions(ctypes.Structure):
    _fields_ = [("convert", ctypes.c_int), ("progress", ctypes.c_int), ("max_host_bytes", ctypes.c_uint64)]


class _CheckOptions(ctypes.Structure):
    _fields_ = [("run", _RunOptions), ("expect", ctypes.POINTER(_Tensor)), ("nexpect", ctypes.c_int),
                ("locate", ctypes.c_int)]


def _library_path():
    given = os.environ.get("TESSEL_LIBRARY")
    if given:
        return given
    try:
        from . import _install  # written by cmake --install
        if os.path.exists(_install.LIBRARY):
            return _install.LIBRARY
    except ImportError:
        pass
    found = ctypes.util.find_library("tessel")
    if found:
        return found
    raise ImportError("tessel: libtessel.so was not found: set TESSEL_LIBRARY to its path, or install tessel "
                      "(cmake --install BUILD)")


_lib = ctypes.CDLL(_library_path())
_P = ctypes.c_void_p
_E = ctypes.POINTER(_Error)
for _name, _res, _args in [
    ("tessel_version", ctypes.c_char_p, []),
    ("tessel_free", None, [_P]),
    ("tessel_model_load", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_ModelOptions), ctypes.POINTER(_P), _E]),
    ("tessel_model_from_onnx", ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                               ctypes.POINTER(_ModelOptions), ctypes.POINTER(_P), _E]),
    ("tessel_model_free", None, [_P]),
    ("tessel_model_count", ctypes.c_int, [_P, ctypes.c_int]),
    ("tessel_model_tensor", ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Info), _E]),
    ("tessel_machine_load", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), _E]),
    ("tessel_machine_free", None, [_P]),
    ("tessel_machine_name", ctypes.c_char_p, [_P]),
    ("tessel_compile_options_init", None, [ctypes.POINTER(_CompileOptions)]),
    ("tessel_compile", ctypes.c_int, [_P, _P, ctypes.POINTER(_CompileOptions), ctypes.POINTER(_P), _E]),
    ("tessel_package_save", ctypes.c_int, [_P, ctypes.c_char_p, _E]),
    ("tessel_package_load", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), _E]),
    ("tessel_package_free", None, [_P]),
    ("tessel_package_count", ctypes.c_int, [_P, ctypes.c_int]),
    ("tessel_package_tensor", ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Info), _E]),
    ("tessel_package_recipe", ctypes.c_char_p, [_P]),
    ("tessel_package_report_json", ctypes.c_char_p, [_P]),
    ("tessel_package_machine", _P, [_P]),
    ("tessel_run", ctypes.c_int, [_P, ctypes.POINTER(_Tensor), ctypes.c_int, ctypes.POINTER(_Tensor), ctypes.c_int,
                                   ctypes.POINTER(_RunOptions), ctypes.POINTER(_P), _E]),
    ("tessel_result_free", None, [_P]),
    ("tessel_result_cycles", ctypes.c_uint64, [_P]),
    ("tessel_result_json", ctypes.c_char_p, [_P]),
    ("tessel_report_html", ctypes.c_int, [_P, ctypes.POINTER(_Tensor), ctypes.c_int, ctypes.POINTER(_RunOptions),
                                           ctypes.c_char_p, _E]),
    ("tessel_check", ctypes.c_int, [_P, _P, ctypes.POINTER(_Tensor), ctypes.c_int, ctypes.POINTER(_CheckOptions),
                                     ctypes.POINTER(_P), _E]),
]:
    _fn = getattr(_lib, _name)
    _fn.restype, _fn.argtypes = _res, _args


def version():
    """The library's version."""
    return _lib.tessel_version().decode()


class Error(Exception):
    """A tessel error: its message names the file, option, input, shape or dtype at fault."""

    def __init__(self, message, status=_ERROR):
        super().__init__(message.rstrip("\n"))
        self.status = status


class NoFit(Error):
    """The model does not fit the machine; the message says what would."""


def _raise(err):
    msg = err.message.decode(errors="replace")
    raise (NoFit if err.status == _NO_FIT else Error)(msg, err.status)


def _call(fn, *args):
    err = _Error()
    status = fn(*args, ctypes.byref(err))
    if status not in (_OK, _CHECK_FAILED):
        _raise(err)
    return status


# ---- tensors ----------------------------------------------------------------

class TensorInfo:
    """An input or output: its name, the dtype the program computes it in, the
    dtype the source model declares, and its shape."""

    def __init__(self, info):
        self.name = info.name.decode()
        self.dtype = _DTYPES[info.dtype]
        self.declared = _DTYPES[info.declared]
        self.shape = tuple(info.shape[a] for a in range(info.rank))

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.dtype}{list(self.shape)})"


def _infos(count, get, handle):
    out = {}
    for role in (_INPUT, _OUTPUT):
        infos = []
        for i in range(count(handle, role)):
            info = _Info()
            _call(get, handle, role, i, ctypes.byref(info))
            infos.append(TensorInfo(info))
        out[role] = infos
    return out[_INPUT], out[_OUTPUT]


def _as_array(x):
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _host_tensors(values, infos, what):
    """Host tensors (with the arrays that keep their memory alive) for a dict
    of name -> array; the library checks names and shapes against infos."""
    if values is None:
        return None, 0, []
    if not isinstance(values, dict):
        raise Error(f"tessel: error: {what} are a dict of name -> array (names: {', '.join(i.name for i in infos)})")
    tensors = (_Tensor * max(len(values), 1))()
    keep = []
    for k, (name, x) in enumerate(values.items()):
        a = np.require(_as_array(x), requirements="C")  # 0-d stays 0-d (ascontiguousarray makes it 1-d)
        wants = {i.name: i.dtype for i in infos}
        if a.dtype == np.int64 and wants.get(name) == "i32":  # PyTorch's token ids, when every value fits
            narrow = a.astype(np.int32)
            if not np.array_equal(narrow, a):
                raise Error(f"tessel: error: {what[:-1]} '{name}' holds int64 values that do not fit 32 bits")
            a = narrow
        if a.dtype not in _NUMPY:
            raise Error(f"tessel: error: {what[:-1]} '{name}' has dtype {a.dtype}; "
                        "tessel takes float32, float16, float64, int32 (and int64 for an i32 input)")
        if a.ndim > _MAX_RANK:
            raise Error(f"tessel: error: {what[:-1]} '{name}' has {a.ndim} axes; tessel takes at most {_MAX_RANK}")
        t = tensors[k]
        t.name = str(name).encode()
        t.dtype = _NUMPY[a.dtype]
        t.rank = a.ndim
        for ax, n in enumerate(a.shape):
            t.shape[ax] = n
        t.data = a.ctypes.data
        keep.append((a, t.name))
    return tensors, len(values), keep


def _room(infos):
    """f32 arrays for every output, and the tensors naming them."""
    arrays = {i.name: np.empty(i.shape, dtype=np.float32) for i in infos}
    tensors, n, keep = _host_tensors(arrays, infos, "outputs")
    return arrays, tensors, n, keep


# ---- models -----------------------------------------------------------------

class _Handle:
    """A library handle with inputs and outputs, freed with the object."""

    _count = _tensor = _free = None  # the library's functions for this kind of handle

    def __init__(self, handle):
        self._h = handle
        self.inputs, self.outputs = _infos(type(self)._count, type(self)._tensor, self._h)

    def __del__(self):
        if getattr(self, "_h", None):
            type(self)._free(self._h)
            self._h = None

    @property
    def input_names(self):
        return [i.name for i in self.inputs]

    @property
    def output_names(self):
        return [o.name for o in self.outputs]


class Model(_Handle):
    """A model tessel can compile: from a torch.nn.Module, an .onnx or .tsl
    file, ONNX bytes, or a zoo spec."""

    _count, _tensor, _free = _lib.tessel_model_count, _lib.tessel_model_tensor, _lib.tessel_model_free

    def __init__(self, handle, name):
        super().__init__(handle)
        self.name = name


def _torch_onnx(module, example_inputs):
    """A torch.nn.Module's ONNX bytes, exported in memory; inputs are named
    after forward's parameters, outputs output, output1, ..."""
    import torch

    if example_inputs is None:
        raise Error("tessel: error: a torch.nn.Module needs example_inputs to be exported")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params[:len(example_inputs)]]
    names += [f"input{k}" for k in range(len(names), len(example_inputs))]
    buf = io.BytesIO()
    was_training = module.training
    module.eval()  # before any call: no dropout, and BatchNorm's statistics left as they are
    try:
        with torch.no_grad():
            outs = module(*example_inputs)
        nout = len(outs) if isinstance(outs, (tuple, list)) else 1
        torch.onnx.export(module, tuple(example_inputs), buf, input_names=names,
                          output_names=["output"] + [f"output{k}" for k in range(1, nout)], opset_version=17,
                          do_constant_folding=True)
    finally:
        module.train(was_training)
    return buf.getvalue(), type(module).__name__ + ".onnx"


def load_model(model, example_inputs=None, precision="f16", reroll=True):
    """A Model from a torch.nn.Module (with its example inputs), a path
    (.onnx, .tsl), ONNX bytes, or a zoo spec. precision (f16, fp8, fp8-all,
    f32) types an imported model; zoo models take precision= in their spec."""
    if isinstance(model, Model):
        return model
    if precision not in _PRECISIONS:
        raise Error(f"tessel: error: precision must be one of {', '.join(_PRECISIONS)}, not '{precision}'")
    opts = _ModelOptions(precision=_PRECISIONS[precision], no_reroll=0 if reroll else 1)
    h = _P()
    if isinstance(model, (bytes, bytearray)):
        model, name = bytes(model), "model.onnx"
    elif isinstance(model, (str, os.PathLike)):
        spec = os.fspath(model)
        if precision != "f16" and not spec.endswith(".onnx"):
            opts.precision = 0  # zoo and .tsl models carry their own precision
            if spec.startswith("zoo:") and "precision=" not in spec:
                spec += ("," if ":" in spec[4:] else ":") + f"precision={precision}"
        _call(_lib.tessel_model_load, spec.encode(), ctypes.byref(opts), ctypes.byref(h))
        return Model(h, spec)
    elif hasattr(model, "forward"):
        model, name = _torch_onnx(model, example_inputs)
    else:
        raise Error(f"tessel: error: a model is a torch.nn.Module, a path, ONNX bytes or a zoo spec, not {type(model).__name__}")
    _call(_lib.tessel_model_from_onnx, model, len(model), name.encode(), ctypes.byref(opts), ctypes.byref(h))
    return Model(h, name)


# ---- packages ---------------------------------------------------------------

class Outputs(dict):
    """A run's outputs by name (NumPy float32 arrays), with its cycles, the
    cycles by kind, and the whole statistics (`tessel run --json`)."""

    def __init__(self, arrays, stats):
        super().__init__(arrays)
        self.stats = stats
        self.cycles = stats["cycles"]
        self.by_kind = stats.get("cycles_by_kind", {})


class Package(_Handle):
    """A compiled program: run it, check it, save it, report on it."""

    _count, _tensor, _free = _lib.tessel_package_count, _lib.tessel_package_tensor, _lib.tessel_package_free

    def __init__(self, handle, model=None):
        super().__init__(handle)
        self.model = model  # the Model it was compiled from, when known (for check)

    @property
    def machine(self):
        return _lib.tessel_machine_name(_lib.tessel_package_machine(self._h)).decode()

    @property
    def recipe(self):
        """The plan as a recipe (a dict); compile(..., recipe=path) replays it."""
        r = _lib.tessel_package_recipe(self._h)
        return json.loads(r) if r else None

    @property
    def report(self):
        """The compile report (a dict), when compiled with report=True."""
        r = _lib.tessel_package_report_json(self._h)
        return json.loads(r) if r else None

    def save(self, path):
        _call(_lib.tessel_package_save, self._h, os.fspath(path).encode())

    def _inputs(self, inputs):
        return _host_tensors(inputs, self.inputs, "inputs")

    def run(self, inputs=None, convert=False, progress=False):
        """Runs on the simulator: inputs by name (those left out are seeded),
        NumPy arrays or torch tensors; returns Outputs."""
        tin, nin, keep_in = self._inputs(inputs)
        arrays, tout, nout, keep_out = _room(self.outputs)
        opts = _RunOptions(convert=int(convert), progress=int(progress))
        r = _P()
        _call(_lib.tessel_run, self._h, tin, nin, tout, nout, ctypes.byref(opts), ctypes.byref(r))
        try:
            stats = json.loads(_lib.tessel_result_json(r))
        finally:
            _lib.tessel_result_free(r)
        del keep_in, keep_out
        return Outputs(arrays, stats)

    def report_html(self, path, inputs=None, convert=False):
        """Runs on inputs and writes the HTML report (`tessel report`) to path."""
        tin, nin, keep = self._inputs(inputs)
        opts = _RunOptions(convert=int(convert))
        _call(_lib.tessel_report_html, self._h, tin, nin, ctypes.byref(opts), os.fspath(path).encode())
        del keep

    def check(self, inputs=None, expect=None, convert=False, locate=False):
        """Checks the package against its model (see tessel.check)."""
        if self.model is None:
            raise Error("tessel: error: this package was loaded, not compiled here: give check() its model")
        return _check(self.model, self, inputs, expect, convert, locate)


class CheckResult:
    """A check's verdict: passed, bit-exact against the plan-exact
    reference, the worst cosine against the FP32 model and against the
    expected values, and the whole comparison (`tessel check --json`) in
    .details."""

    def __init__(self, details):
        self.details = details
        self.passed = details["pass"]
        self.exact = details["exact"]
        self.cosine = details["cosine"]
        self.expect_cosine = details.get("expect_cosine")
        self.cycles = details["cycles"]

    def __bool__(self):
        return self.passed

    def __repr__(self):
        num = lambda v: "None" if v is None else f"{v:.6f}"  # noqa: E731 (null: a non-finite output)
        return (f"CheckResult(passed={self.passed}, exact={self.exact}, cosine={num(self.cosine)}"
                + (f", expect_cosine={num(self.expect_cosine)}" if "expect_cosine" in self.details else "")
                + f", cycles={self.cycles})")


def _expected(expect, model):
    if expect is None:
        return None
    if not isinstance(expect, dict):
        if not isinstance(expect, (tuple, list)):
            expect = (expect,)
        if len(expect) != len(model.outputs):
            raise Error(f"tessel: error: {len(expect)} expected outputs given; the model has {len(model.outputs)} "
                        f"({', '.join(model.output_names)})")
        expect = dict(zip(model.output_names, expect))
    return {k: _as_array(v).astype(np.float32) for k, v in expect.items()}


def _check(model, pkg, inputs, expect, convert, locate):
    tin, nin, keep_in = _host_tensors(inputs, model.inputs, "inputs")
    exp = _expected(expect, model)
    texp, nexp, keep_exp = _host_tensors(exp, model.outputs, "outputs")
    opts = _CheckOptions(run=_RunOptions(convert=int(convert)), expect=texp, nexpect=nexp, locate=int(locate))
    out = _P()
    _call(_lib.tessel_check, model._h, pkg._h, tin, nin, ctypes.byref(opts), ctypes.byref(out))
    try:
        details = json.loads(ctypes.string_at(out).decode())
    finally:
        _lib.tessel_free(out)
    del keep_in, keep_exp
    return CheckResult(details)


# ---- the entry points -------------------------------------------------------

def _named_inputs(model, example_inputs):
    if example_inputs is None:
        return None
    if isinstance(example_inputs, dict):
        return example_inputs
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    return dict(zip(model.input_names, example_inputs))


def compile(model, example_inputs=None, machine="c600", precision="f16", recipe=None, search_steps=None, beam=None,
            report=False, progress=False, fuse=True, siblings=True):
    """Compiles model for machine (a preset or a machine .json) into a Package.
    report=True keeps the compile report (Package.report). Raises NoFit when
    no plan fits."""
    m = load_model(model, example_inputs, precision)
    mach = _P()
    _call(_lib.tessel_machine_load, os.fspath(machine).encode(), ctypes.byref(mach))
    try:
        opts = _CompileOptions()
        _lib.tessel_compile_options_init(ctypes.byref(opts))
        if recipe is not None:
            opts.recipe = os.fspath(recipe).encode()
        if search_steps is not None:
            opts.search_steps = search_steps
        if beam is not None:
            opts.beam = beam
        opts.report, opts.progress = int(report), int(progress)
        opts.no_fuse, opts.no_siblings = int(not fuse), int(not siblings)
        p = _P()
        _call(_lib.tessel_compile, m._h, mach, ctypes.byref(opts), ctypes.byref(p))
    finally:
        _lib.tessel_machine_free(mach)
    return Package(p, m)


def check(model, example_inputs=None, expect=None, machine="c600", precision="f16", package=None, convert=False,
          locate=False, **compile_options):
    """Compiles model (or takes package, compiled from it), runs it on
    example_inputs and compares every output bit for bit with the plan-exact
    reference, by cosine with the FP32 model, and with expect (PyTorch's
    output: an array, a tuple of them, or a dict by output name). Returns a
    CheckResult; a failed comparison is a result, not an exception."""
    m = load_model(model, example_inputs, precision)
    pkg = package or compile(m, machine=machine, **compile_options)
    return _check(m, pkg, _named_inputs(m, example_inputs), expect, convert, locate)


def load(path, model=None):
    """A saved package (model: what it was compiled from, for check)."""
    h = _P()
    _call(_lib.tessel_package_load, os.fspath(path).encode(), ctypes.byref(h))
    return Package(h, load_model(model) if model is not None else None)
