#!/usr/bin/env python3
"""The shape of the tree: the includes follow the layer table
(ARCHITECTURE.md, README.md), a file of layer L including headers of L
itself or of layers above L only; the low program's header, the package,
placement and the simulator include neither mid nor the graph (NO_IR); and
no source file is longer than a reader can hold (MAX_LINES). Prints each violation and exits 1 when there
is one."""
import os
import re
import sys

MAX_LINES = 1500

# What reads only a package or a low program knows nothing of the compiler's
# IRs: these files and folders include neither mid's nor the graph's header.
NO_IR = ["low/low.h", "package", "place", "sim"]
IR = ("mid", "graph")

# Top to bottom: a layer may include only the layers before it.
LAYERS = ["util", "num", "graph", "models", "machine", "kern", "layout", "mid", "estimate", "low", "package", "place",
          "search", "sim", "calib", "driver", "report", "api", "cli"]

def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    bad = 0
    for layer in sorted(os.listdir(root)):
        if layer not in LAYERS:
            print(f"src/{layer}: not a layer of the table")
            bad += 1
            continue
        rank = LAYERS.index(layer)
        for name in sorted(os.listdir(os.path.join(root, layer))):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, layer, name)
            lines = sum(1 for _ in open(path, encoding="utf-8"))
            if lines > MAX_LINES:
                print(f"src/{layer}/{name}: {lines} lines, more than {MAX_LINES}")
                bad += 1
            for no, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s+"(?:\.\./)?([a-z_]+)/', line)
                if not m:
                    continue
                dep = m.group(1)
                if dep == "tessel" and rank >= LAYERS.index("api"):
                    continue  # the public header (include/tessel), which api implements
                if dep not in LAYERS or LAYERS.index(dep) > rank:
                    print(f"src/{layer}/{name}:{no}: {layer} includes {dep}, a layer below it")
                    bad += 1
                elif dep in IR and (layer in NO_IR or f"{layer}/{name}" in NO_IR):
                    print(f"src/{layer}/{name}:{no}: includes {dep}, which a reader of low programs and packages must not know")
                    bad += 1
    print(f"tree: {bad} violation(s)")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
