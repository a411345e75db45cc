#!/usr/bin/env python3
"""Corrupts one row of a tessel package's exchange tables (docs/package.md,
"Exchange tables"):
   corrupt_pkg.py IN OUT STEP_LABEL FIELD DELTA
moves FIELD of one row of the exchange step labelled STEP_LABEL by DELTA:
dst (the pointer of a receive row through which the fewest fragments
stream, the middle one of those), bytes (the middle send row's length) or
src (its source address)."""
import json, struct, sys

def crc32c(data):
    # CRC-32C (Castagnoli, reflected 0x82f63b78), as package sections carry
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

def bits_for(v):
    return max(1, v.bit_length())

src, dst, label, field, delta = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
data = bytearray(open(src, "rb").read())
nsec = struct.unpack_from("<I", data, 12)[0]
at, sections = 24, {}
for _ in range(nsec):
    tag = bytes(data[at:at + 4]).decode()
    length = struct.unpack_from("<Q", data, at + 8)[0]
    sections[tag] = (at + 16, length, at)
    at += 16 + length

def payload(tag):
    a, n, _ = sections[tag]
    return bytes(data[a:a + n])

mach = json.loads(payload("MACH"))
num = lambda v: int(v, 16) if isinstance(v, str) else int(v)
base, end = num(mach["tile_memory_base"]), num(mach["tile_memory_end"])
tiles, max_send = num(mach["tiles"]), num(mach["max_send_bytes"])
groups = struct.unpack_from("<I", payload("GRPS"), 0)[0]
A, L, G = bits_for(end - base - 1), bits_for(max_send - 1), bits_for(tiles + groups - 1)
send_bytes = 4 * ((2 * A + L + G + 31) // 32)
recv_words = (A + 8 + 31) // 32
recv_bytes, C = 4 * recv_words, 32 * recv_words - A

strings = payload("STRS")
steps = payload("STEP")
phase, at, k = None, 4, 0
for i in range(struct.unpack_from("<I", steps, 0)[0]):
    kind, lab = struct.unpack_from("<BI", steps, at)
    at += 5 + (4 if kind in (0, 2) else 0)
    if kind == 1:
        if strings[lab:strings.index(b"\0", lab)].decode() == label:
            phase = k
        k += 1
if phase is None:
    sys.exit("no exchange step labelled " + label)

xa, xn, xhead = sections["XTAB"]
sizes = struct.unpack_from("<%dI" % tiles, data, xa)
rows = []  # (offset of the row in data, row bytes) of the wanted kind, per tile in order
pos = xa + 4 * tiles
for t in range(tiles):
    p, stop = pos, pos + sizes[t]
    while p < stop:
        ph, ns, nr, np = struct.unpack_from("<HHHH", data, p)
        first = p + 8 + (ns * send_bytes if field == "dst" else 0)
        n, width = (nr, recv_bytes) if field == "dst" else (ns, send_bytes)
        if ph == phase and n:
            for r in range(n):
                o = first + width * r
                count = (int.from_bytes(data[o:o + width], "little") >> A) + 1 if field == "dst" else 0
                rows.append((count, o, width))
        p += 8 + ns * send_bytes + nr * recv_bytes + 8 * np
    pos = stop
if not rows:
    sys.exit("no row to corrupt in phase %d" % phase)
fewest = min(r[0] for r in rows)
rows = [r for r in rows if r[0] == fewest]
_, off, width = rows[len(rows) // 2]
row = int.from_bytes(data[off:off + width], "little")
shift, bits = {"dst": (0, A), "src": (0, A), "bytes": (A, L)}[field]
mask = ((1 << bits) - 1) << shift
value = ((row & mask) >> shift) + delta
row = (row & ~mask) | ((value << shift) & mask)
data[off:off + width] = row.to_bytes(width, "little")
# a forged checksum: the damage must be caught by the check, not the loader
struct.pack_into("<I", data, xhead + 4, crc32c(bytes(data[xa:xa + xn])))
open(dst, "wb").write(data)
