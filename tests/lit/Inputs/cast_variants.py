# Cast ordering's recipes and figures (tests/lit/e2e/cast_order.test).
#   cast_variants.py make RECIPE REPORT DIR   writes DIR/late.json (no cast
#       lines: every site late), DIR/early.json (every eligible site of the
#       report listed) and DIR/v1.json (version 1, no cast lines: read as
#       every site early)
#   cast_variants.py figures SEARCHED LATE EARLY   compile reports: the
#       searched plan no slower than either replay and faster than all-early,
#       every site it moved named by a search step
import json, sys

if sys.argv[1] == "make":
    recipe, report, out = json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), sys.argv[4]
    assert recipe["version"] == 2, recipe["version"]
    base = [c for c in recipe["choices"] if c["kind"] != "cast_before_copies"]
    sites = [s for s in report["cast_sites"] if s["eligible"]]
    assert sites, report["cast_sites"]
    for name, version, extra in [("late", 2, []), ("early", 2, [{"op": s["op"], "kind": "cast_before_copies",
                                                                 "ordinal": s["ordinal"]} for s in sites]), ("v1", 1, [])]:
        r = dict(recipe, version=version, choices=base + extra)
        json.dump(r, open(f"{out}/{name}.json", "w"), indent=1)
else:
    s, late, early = (json.load(open(p)) for p in sys.argv[2:5])
    cyc = lambda r: r["predicted_cycles"]
    assert cyc(s) <= cyc(late) and cyc(s) < cyc(early), (cyc(s), cyc(late), cyc(early))
    assert all(x["early"] for x in early["cast_sites"] if x["eligible"]), early["cast_sites"]
    assert not any(x["early"] for x in late["cast_sites"]), late["cast_sites"]
    moved = {(st["cast_site"]["op"], st["cast_site"]["ordinal"]) for st in s["search_steps"] if "cast_site" in st}
    late_now = {(x["op"], x["ordinal"]) for x in s["cast_sites"] if x["eligible"] and not x["early"]}
    assert late_now <= moved, (late_now, moved)  # the search started every site early
    print(f"searched {cyc(s):.0f} late {cyc(late):.0f} early {cyc(early):.0f} moved {sorted(moved)}")
