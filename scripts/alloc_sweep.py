#!/usr/bin/env python3
"""The allocation-failure sweep: out of host memory is a user error.

Runs small tessel jobs with the N-th host allocation failing, for every N
from 1 to the number of allocations the job makes, and checks that each run
fails cleanly: exit status 2, one tessel message about host memory on
stderr (no sanitizer report, no "internal error"), no output file or
temporary left in the job's output directory, and under ASan (with
detect_leaks=1) no leak.

Needs a tessel built with -DTESSEL_ALLOC_FAIL=ON (TESSEL_FAIL_ALLOC=N fails
allocation N; TESSEL_COUNT_ALLOC=1 prints the count at exit), best with
-DTESSEL_SANITIZE=ON too (`make alloc-sweep` uses build-asan).

  scripts/alloc_sweep.py BUILD [--jobs tsl,npy,...] [--stride K] [--first F] [-j P]

--stride K tries every N up to F (default 300) and then every K-th (CI);
the default stride 1 tries every N.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

MODEL = "zoo:mlp:tokens=16,width=64,hidden=128"
CHIPS = "zoo:vit:layers=2,width=16,heads=2,mlp=16,image=8,patch=4,batch=2"  # two chips, two micro-batches
TRAIN = "zoo:train-mlp:tokens=8,width=8,hidden=8,optimizer=adamw"  # two replicas, two micro-batches each
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job_table(w):
    """Each job: argv (after the tessel binary) and the directory its outputs go to."""
    i, o = os.path.join(w, "in"), "{out}"
    return {
        # the .tsl parser (and printer)
        "tsl": ["graph", f"{i}/mlp.tsl"],
        # the ONNX importer, with external data
        "onnx": ["graph", f"{SRC}/tests/onnx/hand_erf_op17.onnx"],
        # .npy reading, then the reference and its .npy outputs
        "npy": ["ref", f"{i}/mlp.tsl", "--quiet", "--input", f"x={i}/x.npy", "--output-dir", f"{o}/ref"],
        # a machine description from JSON
        "machine": ["machine", f"{i}/tiny.json"],
        # package loading
        "inspect": ["inspect", f"{i}/mlp.tpk"],
        # compile: .tsl, machine JSON, search, lowering, placement, the package, report and recipe
        "compile": ["compile", f"{i}/mlp.tsl", "--machine", f"{i}/tiny.json", "-o", f"{o}/mlp.tpk", "--report",
                    f"{o}/report.json", "--save-recipe", f"{o}/recipe.json", "--quiet", "--search-steps", "8"],
        # run: package, .npy input, simulator, .npy outputs and the trace
        "run": ["run", f"{i}/mlp.tpk", "--input", f"x={i}/x.npy", "--output-dir", f"{o}/run", "--trace", f"{o}/trace.json"],
        # check: compile, simulate, both references, compare
        "check": ["check", MODEL, "--machine", "tiny", "--search-steps", "8", "--trace", f"{o}/trace.json"],
        # the library through its public header (tests/alloc/api_job.c): load, compile, run, save, HTML report
        "api": ["@api_job", f"{i}/mlp.tsl", f"{i}/tiny.json", o],
        # several chips: the cut, micro-batches, every stage's compile, the package for several chips
        # (no search: the search is the compile job's, and with it this job makes 30 times the allocations)
        "chips": ["compile", CHIPS, "--machine", "tinyx2", "--micro-batches", "2", "-o", f"{o}/chips.tpk", "--save-recipe",
                  f"{o}/chips.json", "--quiet", "--search-steps", "0", "--beam", "0"],
        # and its run: the package read, every chip's stage simulated, the handovers, the outputs
        "chips_run": ["run", f"{i}/chips.tpk", "--output-dir", f"{o}/chips"],
        # a training step over replicas: the split, replica and owners compiled, the fused sums, the package
        "train": ["compile", TRAIN, "--machine", "tinyx2", "--micro-batches", "2", "-o", f"{o}/train.tpk", "--save-recipe",
                  f"{o}/train.json", "--quiet", "--search-steps", "0", "--beam", "0"],
        # and its run: replicas, the rows to their owners, the owners, the outputs put together
        "train_run": ["run", f"{i}/train.tpk", "--output-dir", f"{o}/train"],
    }


def write_npy_f16(path, shape, values):
    header = "{'descr': '<f2', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}, " for d in shape)
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(b"".join(struct.pack("<e", v) for v in values))


def setup(tessel, w):
    i = os.path.join(w, "in")
    os.makedirs(i)
    env = clean_env()

    def make(argv, stdout=None):
        r = subprocess.run([tessel] + argv, env=env, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"alloc_sweep: setup 'tessel {' '.join(argv)}' failed ({r.returncode}):\n{r.stderr}")

    with open(f"{i}/mlp.tsl", "w") as f:
        make(["graph", MODEL], f)
    with open(f"{i}/tiny.json", "w") as f:
        make(["machine", "tiny", "--json"], f)
    make(["compile", f"{i}/mlp.tsl", "--machine", f"{i}/tiny.json", "-o", f"{i}/mlp.tpk", "--quiet"])
    make(["compile", CHIPS, "--machine", "tinyx2", "--micro-batches", "2", "-o", f"{i}/chips.tpk", "--quiet", "--search-steps", "0",
          "--beam", "0"])
    make(["compile", TRAIN, "--machine", "tinyx2", "--micro-batches", "2", "-o", f"{i}/train.tpk", "--quiet", "--search-steps", "0",
          "--beam", "0"])
    write_npy_f16(f"{i}/x.npy", (16, 64), [((k * 37) % 101 - 50) / 25.0 for k in range(16 * 64)])


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSEL_")}
    env["TESSEL_THREADS"] = "1"  # one order of allocations, the same every run
    asan = env.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "detect_leaks=1:abort_on_error=0"
    env.update(extra)
    return env


def program(tessel, argv):
    """The command line of a job: tessel and its argv, or (argv[0] "@NAME")
    the build's program NAME."""
    if argv and argv[0].startswith("@"):
        return [os.path.join(os.path.dirname(tessel), argv[0][1:])] + argv[1:]
    return [tessel] + argv


def run(tessel, argv, out, **extra):
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    argv = [a.replace("{out}", out) for a in argv]
    r = subprocess.run(program(tessel, argv), env=clean_env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", timeout=600)
    return r


BAD_STDERR = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error|internal error|Aborted")
GOOD_STDERR = re.compile(r"error: .*(host memory)")


def leftovers(out):
    return sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)


def count(tessel, name, argv, w):
    r = run(tessel, argv, os.path.join(w, name, "count"), TESSEL_COUNT_ALLOC="1")
    m = re.search(r"tessel: allocations: (\d+)", r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"alloc_sweep: job {name} fails without injection ({r.returncode}):\n{r.stderr}")
    if BAD_STDERR.search(r.stderr):
        sys.exit(f"alloc_sweep: job {name} reports a problem without injection:\n{r.stderr}")
    return int(m.group(1))


def one(tessel, name, argv, w, n):
    out = os.path.join(w, name, f"n{n}")
    r = run(tessel, argv, out, TESSEL_FAIL_ALLOC=str(n))
    why = []
    if r.returncode != 2:
        why.append(f"exit status {r.returncode}")
    if BAD_STDERR.search(r.stderr):
        why.append("a sanitizer report or internal error")
    elif r.returncode == 2 and not GOOD_STDERR.search(r.stderr):
        why.append("no message about host memory")
    left = leftovers(out)
    if left:
        why.append("files left: " + ", ".join(left))
    if not why:
        shutil.rmtree(out)
        return None
    return f"{name} N={n}: {'; '.join(why)}\n    tessel {' '.join(argv)}\n    stderr: " + \
        "\n            ".join(r.stderr.strip().splitlines()[:30])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--jobs", default="tsl,onnx,npy,machine,inspect,compile,run,check,api,chips,chips_run,train,train_run")
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--first", type=int, default=300)
    ap.add_argument("-j", type=int, default=2, dest="par")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    tessel = os.path.abspath(os.path.join(a.build, "tessel"))
    w = tempfile.mkdtemp(prefix="tessel-alloc-sweep-")
    setup(tessel, w)
    jobs = job_table(w)
    failures, total = [], 0
    for name in a.jobs.split(","):
        argv = jobs[name]
        n = count(tessel, name, argv, w)
        ns = [k for k in range(1, n + 1) if a.stride <= 1 or k <= a.first or k % a.stride == 0]
        with ThreadPoolExecutor(max_workers=a.par) as ex:
            bad = [f for f in ex.map(lambda k: one(tessel, name, argv, w, k), ns) if f]
        total += len(ns)
        failures += bad
        print(f"alloc_sweep: {name:8s} {n:6d} allocations, {len(ns):6d} failure points tried, {len(bad)} bad", flush=True)
    for f in failures[:40]:
        print(f, file=sys.stderr)
    if not a.keep:
        shutil.rmtree(w, ignore_errors=True)
    else:
        print(f"alloc_sweep: work directory {w}")
    print(f"alloc_sweep: {total} runs, {len(failures)} bad")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
