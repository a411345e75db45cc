#!/usr/bin/env python3
"""trace_tiles.py TRACE.json INSPECT.json: checks a Chrome trace's
per-tile tracks and memory counters (src/report/trace.c).

- one track per sampled tile, tiles k * tiles / 8;
- every slice on a tile's track lies inside a compute set of the same name
  and start, and is no longer than it; the set's busiest tile, when sampled,
  has a slice exactly as long as the set;
- each of tile 0's counter values equals the bytes that `tessel inspect
  --json --tile 0` says tile 0's live buffers reserve at the step the
  counter starts with (its memory map, summed here), and the counter
  reaches their peak.
"""
import json, sys

trace = json.load(open(sys.argv[1]))["traceEvents"]
insp = json.load(open(sys.argv[2]))
tiles = len(insp["tiles"])
names = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
want = sorted({k * tiles // 8 for k in range(8)})
got = sorted(int(n.split()[1]) for t, n in names.items() if n.startswith("tile "))
assert got == want, (got, want)
tid_of = {int(n.split()[1]): t for t, n in names.items() if n.startswith("tile ")}
sets = {(e["name"], e["ts"]): e for e in trace if e["ph"] == "X" and e["tid"] == 0}
slices = [e for e in trace if e["ph"] == "X" and e["tid"] >= 2]
assert slices, "no tile slices"
for e in slices:
    s = sets.get((e["name"], e["ts"]))
    assert s and 0 < e["dur"] <= s["dur"], (e, s)
exact = 0
for (name, ts), s in sets.items():
    b = s["args"]["busiest_tile"]
    if b in tid_of:
        mine = [e for e in slices if e["tid"] == tid_of[b] and e["ts"] == ts and e["name"] == name]
        assert mine and mine[0]["dur"] == s["dur"], (s, mine)
        exact += 1
assert insp["memory_map"]["tile"] == 0
bufs = insp["memory_map"]["buffers"]
counters = [e for e in trace if e["ph"] == "C" and e["name"] == "tile 0 live bytes"]
assert counters
live = lambda s: sum(b["reserved_bytes"] for b in bufs if b["first_step"] <= s <= b["last_step"])
steps = {}
for e in trace:
    if e["ph"] == "X" and e["tid"] in (0, 1):
        steps.setdefault(e["ts"], []).append(e["args"]["step"])
for c in counters:
    assert any(live(s) == c["args"]["reserved"] for s in steps[c["ts"]]), (c, [live(s) for s in steps[c["ts"]]])
values = sorted({c["args"]["reserved"] for c in counters})
peak = max(live(s) for ss in steps.values() for s in ss)
assert max(values) == peak, (max(values), peak)
print("tile tracks: %d tiles sampled, %d slices inside their sets, %d busiest-tile slices exact" % (len(got), len(slices), exact))
print("tile 0 live bytes: %d values, all from its memory map, peak %d" % (len(values), max(values)))
