#!/usr/bin/env python3
"""Opens a tessel HTML report in headless Chromium and checks it.

html_check.py PAGE.html [--run R.json] [--plan P.json] [--check C.json] [--shot OUT.png]

Fails (exit 1, saying why) on any console message (a script error, a
refused request: the page's Content-Security-Policy refuses every one) or
failed request; when the page never finishes drawing; when a section lacks
its content; when a figure the page embeds or shows differs from the JSON
report given (tessel run --json, tessel compile --report, tessel check
--json); or when the screenshot is blank. Prints one line per check.
"""
import json, re, subprocess, sys, tempfile, zlib, struct, os

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--enable-logging=stderr", "--v=0"]
TIMING = {"host_seconds", "kernel_seconds", "compile_seconds", "ref_seconds", "fp32_ref_seconds", "exact_ref_seconds", "seconds"}


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def strip(j):
    if isinstance(j, dict):
        return {k: strip(v) for k, v in j.items() if k not in TIMING}
    if isinstance(j, list):
        return [strip(v) for v in j]
    return j


def chromium(args, url):
    with tempfile.TemporaryDirectory() as profile:  # a fresh profile: parallel tests never share one
        r = subprocess.run(CHROMIUM + ["--user-data-dir=" + profile] + args + [url], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, HOME=profile))
    bad = [l for l in r.stderr.splitlines() if ":CONSOLE" in l or "net::ERR" in l or "Failed to load" in l]
    if bad:
        fail("the browser reported: " + " | ".join(bad))
    if r.returncode != 0:
        fail("chromium exited %d: %s" % (r.returncode, r.stderr[-400:]))
    return r.stdout


def png_pixels(path):
    """(width, height, rows of bytes, bytes per pixel) of an 8-bit RGB(A) PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the screenshot is not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                fail("unexpected PNG format (depth %d, colour type %d)" % (depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, rows, bpp


def main():
    args = sys.argv[1:]
    page = os.path.abspath(args[0])
    opts = dict(zip(args[1::2], args[2::2]))
    html = open(page).read()
    m = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S)
    if not m:
        fail("no embedded data document")
    D = json.loads(m.group(1))
    if re.search(r'(src|href)\s*=\s*"(https?:)?//', html):
        fail("the page refers to something outside itself")
    print("size: %d bytes" % len(html.encode()))

    dom = chromium(["--dump-dom", "--virtual-time-budget=5000"], "file://" + page)
    if 'data-ready="1"' not in dom:
        fail("the page's script did not finish")
    print("opened without console messages or failed requests")

    def section(sid):
        s = re.search(r'<section id="%s"([^>]*>.*?)</section>' % sid, dom, re.S)
        if not s:
            fail("section %s is missing" % sid)
        return s.group(1)

    def table_rows(text, tid):
        t = re.search(r'id="%s"[^>]*>(.*?)</table>' % tid, text, re.S)
        if not t:
            fail("table %s is missing" % tid)
        return re.findall(r"<tr>(.*?)</tr>", t.group(1), re.S)[1:]  # after the header

    cells = lambda row: [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    fmt = lambda v: "{:,}".format(int(round(v)))
    R, M = D["run"], D["machine"]

    tl = section("timeline")
    steps = int(re.search(r'data-steps="(\d+)"', tl).group(1))
    if steps != len(D["events"]["start"]) or steps == 0:
        fail("timeline: %d steps drawn of %d" % (steps, len(D["events"]["start"])))
    if sum(D["events"]["cycles"]) != R["cycles"]:
        fail("timeline: the steps' cycles add up to %d, the run took %d" % (sum(D["events"]["cycles"]), R["cycles"]))
    ev = D["events"]
    for i in range(steps):  # the busiest tile's work: its runs' cycles make the compute step's
        if not ev["exchange"][i]:
            work = ev["works"][ev["work"][i]]
            got = sum(int(x) for x in re.findall(r": (\d+) cycles", work))
            if got != ev["cycles"][i]:
                fail("timeline: step %d takes %d cycles, its busiest tile's work %r adds up to %d" % (i, ev["cycles"][i], work, got))
        elif "fragments" not in ev["works"][ev["work"][i]]:
            fail("timeline: exchange step %d has no busiest tile's fragments" % i)
    print("timeline: %d steps, %s iteration bands, the busiest tiles' work adds up" % (steps, re.search(r'data-bands="(\d+)"', tl).group(1)))

    cy = section("cycles")
    kinds = {cells(r)[0]: cells(r)[1] for r in table_rows(cy, "kinds")}
    want = {k: fmt(v) for k, v in R["cycles_by_kind"].items()}
    if kinds != want:
        fail("cycles by kind: the page shows %s, the run %s" % (kinds, want))
    if len(table_rows(cy, "steps")) == 0:
        fail("no step rows")
    print("where the cycles go: %d kinds as the run reports them, %d step rows" % (len(kinds), len(table_rows(cy, "steps"))))

    ti = section("tiles")
    drawn = int(re.search(r'data-tiles="(\d+)"', ti).group(1))
    if drawn != M["tiles"] or len(D["tiles"]["end_bytes"]) != M["tiles"]:
        fail("tiles: %d drawn of %d" % (drawn, M["tiles"]))
    mm = table_rows(re.search(r'id="memory-map".*', ti, re.S).group(0), "memory-map")
    if len(mm) < 2:
        fail("the memory map lists no buffer")
    print("tiles: %d drawn, memory map of %d rows" % (drawn, len(mm)))

    pl = section("plan")
    nops = int(re.search(r'data-ops="(\d+)"', pl).group(1))
    if nops == 0 or len(table_rows(pl, "plan-ops")) != nops:
        fail("plan: %d ops" % nops)
    print("plan: %d ops" % nops)

    es = section("estimate")
    tot = {cells(r)[0]: cells(r)[1:3] for r in table_rows(es, "estimate-totals")}
    if tot["cycles"][1] != fmt(R["cycles"]):
        fail("estimate: simulated cycles %s, the run %d" % (tot["cycles"][1], R["cycles"]))
    print("estimate against simulation: predicted %s, simulated %s" % tuple(tot["cycles"]))

    ch = section("check")
    if "check" in D:
        outs = table_rows(ch, "check-outputs")
        if len(outs) != len(D["check"]["outputs"]):
            fail("check: %d output rows of %d" % (len(outs), len(D["check"]["outputs"])))
        print("check: %d outputs, %s" % (len(outs), "PASS" if D["check"]["pass"] else "FAIL"))

    if 'data-cycles="%d"' % R["cycles"] not in dom:
        fail("the summary does not show the run's cycles")
    if "--run" in opts:
        j = strip(json.load(open(opts["--run"])))
        for k in ("package", "machine"):
            j.pop(k, None)
        if strip(R) != j:
            fail("the page's run figures differ from %s" % opts["--run"])
        print("run figures equal %s" % os.path.basename(opts["--run"]))
    if "--plan" in opts:
        if strip(D.get("plan")) != strip(json.load(open(opts["--plan"]))):
            fail("the page's plan differs from %s" % opts["--plan"])
        print("plan equals %s" % os.path.basename(opts["--plan"]))
    if "--check" in opts:
        j = strip(json.load(open(opts["--check"])))
        if strip(D.get("check")) != j:
            fail("the page's check differs from %s" % opts["--check"])
        if strip(R) != {k: v for k, v in j.items() if k in R}:
            fail("the page's run figures differ from the check's")
        print("check figures equal %s" % os.path.basename(opts["--check"]))

    shot = opts.get("--shot") or tempfile.mktemp(suffix=".png")
    chromium(["--window-size=1000,1400", "--screenshot=" + shot, "--virtual-time-budget=5000"], "file://" + page)
    w, h, rows, bpp = png_pixels(shot)
    colours, ink = set(), 0
    for line in rows[::4]:
        for i in range(0, len(line), bpp * 4):
            px = bytes(line[i:i + 3])
            colours.add(px)
            ink += px != b"\xff\xff\xff"
    total = len(rows[::4]) * ((w + 3) // 4)
    if len(colours) < 16 or ink < total // 20:
        fail("the screenshot looks blank: %d colours, %d of %d sampled pixels not white" % (len(colours), ink, total))
    print("screenshot: %dx%d, not blank" % (w, h))


if __name__ == "__main__":
    main()
