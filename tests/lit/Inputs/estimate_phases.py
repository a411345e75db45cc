# The estimate's phases and compute steps against what the package ran (tests/lit/e2e/estimate_phases.test).
import json, sys
r, u = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01  # of the simulated cycles
assert r["predicted_phases"] == u["exchange_phases"], (r["predicted_phases"], u["exchange_phases"])
p, c = r["predicted_exchange_cycles"], u["exchange_cycles"]
assert abs(p - c) <= tol * c, (p, c)
p, c = r["predicted_compute_cycles"], u["compute_cycles"]
assert abs(p - c) <= tol * c, (p, c)
