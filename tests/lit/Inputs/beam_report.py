# The beam's report against the local search's alone (tests/lit/cli/beam.test).
import json, sys
b, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert b["search"]["beam_evaluations"] > 0 and n["search"]["beam_evaluations"] == 0, (b["search"], n["search"])
assert any(s["by"] == "beam" for s in b["search_steps"]), b["search_steps"]
assert all(s["by"] != "beam" for s in n["search_steps"]), n["search_steps"]
assert b["predicted_cycles"] < n["predicted_cycles"], (b["predicted_cycles"], n["predicted_cycles"])
