# progress_gaps.py MAX CMD...: runs CMD with stderr to a pipe (not a
# terminal), prints each stderr line with its time, and fails unless every
# stretch without a line (from the start to the end) is at most MAX seconds
# and at least one progress line came; the run must outlast MAX, or the
# gaps prove nothing (tests/lit/e2e/progress.test).
import subprocess, sys, time
limit = float(sys.argv[1])
t0 = time.time(); last = t0; worst = (0.0, ''); lines = 0
p = subprocess.Popen(sys.argv[2:], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
for line in p.stderr:
    now = time.time()
    if now - last > worst[0]: worst = (now - last, line.strip()[:80])
    print(f"{now - t0:7.1f} +{now - last:5.1f}  {line.rstrip()[:150]}")
    last = now; lines += 1
p.wait(); now = time.time()
if now - last > worst[0]: worst = (now - last, '(end)')
print(f"exit {p.returncode} after {now - t0:.1f}s; longest silence {worst[0]:.1f}s before: {worst[1]}")
assert p.returncode == 0, p.returncode
assert now - t0 > limit, f"the run took {now - t0:.1f}s, not more than {limit}s: too short to test (a bigger model)"
assert lines >= 1, "no progress lines"
assert worst[0] <= limit, worst
print("progress ok")
