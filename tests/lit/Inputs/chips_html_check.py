#!/usr/bin/env python3
"""Opens the HTML report of a check on several chips in headless Chromium.

chips_html_check.py PAGE.html CHECK.json [--shot OUT.png]

Fails (exit 1, saying why) on any console message or failed request (the
page's Content-Security-Policy refuses every one), when the page never
finishes drawing, when a section lacks its content, when the timeline does
not end at the check's cycles or draws another number of bars than the plan
has, when a table's cycles differ from CHECK.json (tessel check --json of
the same check), or when the screenshot is blank. One line per check.
"""
import json, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from html_check import chromium, fail, png_pixels  # noqa: E402


def main():
    page, check = os.path.abspath(sys.argv[1]), json.load(open(sys.argv[2]))
    opts = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    html = open(page).read()
    m = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S)
    if not m:
        fail("no embedded data document")
    D = json.loads(m.group(1))
    if re.search(r'(src|href)\s*=\s*"(https?:)?//', html):
        fail("the page refers to something outside itself")
    strip = lambda j: {k: v for k, v in j.items() if "seconds" not in k}
    if strip(D["check"]) != strip(check):
        fail("the page embeds another check than %s" % sys.argv[2])
    dom = chromium(["--dump-dom", "--virtual-time-budget=5000"], "file://" + page)
    if 'data-ready="1"' not in dom:
        fail("the page's script did not finish")
    print("opened without console messages or failed requests")
    for sid in ("summary", "timeline"):
        if not re.search(r'<section id="%s"' % sid, dom):
            fail("section %s is missing" % sid)
    T, fmt = check["simulated"], lambda v: "{:,}".format(int(round(v)))
    bars = int(re.search(r'data-bars="(\d+)"', dom).group(1))
    ticks = re.findall(r'<text[^>]*>([0-9,]+) \(', dom)
    if not ticks or ticks[-1] != fmt(T["cycles"]):
        fail("the timeline ends at %s, the check's %s cycles" % (ticks[-1:] or "nothing", fmt(T["cycles"])))
    rows = lambda tid: [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
                        for r in re.findall(r"<tr>(.*?)</tr>", re.search(r'id="%s"[^>]*>(.*?)</table>' % tid, dom, re.S).group(1), re.S)[1:]]
    if check["plan"] == "pipeline":
        S, M = T["stages"], T["micro_batches"]
        want = M * (len(S) + sum(1 for s in S if s["link_cycles"]))
        if bars != want:
            fail("timeline: %d bars, the pipeline has %d" % (bars, want))
        got = rows("stage-table")
        if [r[2] for r in got] != [fmt(s["cycles"]) for s in S]:
            fail("stages: the page shows cycles %s, the check %s" % ([r[2] for r in got], [s["cycles"] for s in S]))
        print("pipeline: %d stages, %d micro-batches, %d bars ending at %s cycles" % (len(S), M, bars, fmt(T["cycles"])))
    else:
        n, M = T["replicas"], T["micro_batches"]
        if bars != n * (M + 3):
            fail("timeline: %d bars, the step has %d" % (bars, n * (M + 3)))
        got = rows("program-table")
        if [r[2] for r in got[1:]] != [fmt(c) for c in T["owner_cycles"]]:
            fail("programs: the page shows owners' cycles %s, the check %s" % ([r[2] for r in got[1:]], T["owner_cycles"]))
        print("training: %d replicas, %d micro-batches, %d bars ending at %s cycles" % (n, M, bars, fmt(T["cycles"])))
    if "--shot" in opts:
        chromium(["--screenshot=" + opts["--shot"], "--window-size=1200,900", "--virtual-time-budget=5000"], "file://" + page)
        w, h, px, bpp = png_pixels(opts["--shot"])
        if len(set(bytes(r) for r in px[::40])) < 3:
            fail("the screenshot is blank")
        print("screenshot: %dx%d, not blank" % (w, h))


if __name__ == "__main__":
    main()
