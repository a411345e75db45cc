#!/usr/bin/env python3
"""Prints the complete program in include/tessel/tessel.h's opening comment
(from "#include <stdio.h>" to the end of main), as C source."""
import sys

header = open(sys.argv[1]).read()
start, end = header.index(" * A complete program"), header.index(" * Build it with")
body = header[start:end].split("\n")[2:]
print("\n".join(line[5:] if line.startswith(" *   ") else "" for line in body).strip())
