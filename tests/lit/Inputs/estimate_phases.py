# The estimate's phases and compute steps against what the package ran (tests/lit/e2e/estimate_phases.test).
import json, sys
r, u = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert r["predicted_phases"] == u["exchange_phases"], (r["predicted_phases"], u["exchange_phases"])
p, c = r["predicted_exchange_cycles"], u["exchange_cycles"]
assert abs(p - c) <= 0.01 * c, (p, c)
p, c = r["predicted_compute_cycles"], u["compute_cycles"]
assert abs(p - c) <= 0.01 * c, (p, c)
