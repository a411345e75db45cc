# (report_reasons.test) every matmul choice has a reason, and a runner-up
# better alone is worse, or does not fit, in the whole program.
import json, sys
n = 0
for path in sys.argv[1:]:
    r = json.load(open(path))
    total = r["predicted_cycles"]
    for o in r["ops"]:
        if o["kind"] != "matmul_grid":
            continue
        assert o.get("why"), o
        if "runner_up" not in o or "runner_up_predicted_cycles" not in o:
            continue
        n += 1
        if o["runner_up_score"] < o["score"] and o["runner_up_fits"]:
            assert o["runner_up_predicted_cycles"] >= total, (o["op"], o["runner_up_predicted_cycles"], total)
            assert "whole program predicts" in o["why"], o["why"]
assert n > 0
print("reasons ok")
