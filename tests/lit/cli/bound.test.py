"""Checks a compile report's bounds against its predictions and the run."""
import json
import sys

report, run, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
bounds = report["bounds"]
over = [(b["op"], b["bound_cycles"], b["predicted_cycles"]) for b in bounds if b["bound_cycles"] > b["predicted_cycles"] + 1e-6]
total = sum(b["bound_cycles"] * b["executions"] for b in bounds)
mm = sum(b["bound_cycles"] * b["executions"] for b in bounds if b["kind"].startswith("matmul"))
ok = (not over and abs(total - report["bound_cycles"]) <= 1e-6 * total and 0 < total <= run["cycles"]
      and abs(report["predicted_over_bound"] - report["predicted_cycles"] / total) < 1e-9 and mm > 0)
print(name.split("/")[-1], "OK" if ok else "FAIL", round(total), run["cycles"], over[:3])
