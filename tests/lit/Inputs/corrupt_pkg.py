#!/usr/bin/env python3
"""Corrupts one exchange fragment of a tessel package (docs/package.md):
   corrupt_pkg.py IN OUT STEP_LABEL FIELD DELTA
moves FIELD (dst: destination offset, bytes: length, src_tile: source tile)
of the middle fragment of the exchange step labelled STEP_LABEL by DELTA."""
import struct, sys

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

src, dst, label, field, delta = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
data = bytearray(open(src, "rb").read())
nsec = struct.unpack_from("<I", data, 12)[0]
at, sections = 24, {}
for _ in range(nsec):
    tag = bytes(data[at:at + 4]).decode()
    length = struct.unpack_from("<Q", data, at + 8)[0]
    sections[tag] = (at + 16, length, at)
    at += 16 + length
strs_at, strs_len, _ = sections["STRS"]
strings = bytes(data[strs_at:strs_at + strs_len])
step_at, step_len, _ = sections["STEP"]
frag_at, frag_len, frag_head = sections["FRAG"]
nsteps = struct.unpack_from("<I", data, step_at)[0]
at, frags = step_at + 4, 0
for i in range(nsteps):
    kind, lab = struct.unpack_from("<BI", data, at)
    at += 5
    count = 0
    if kind in (0, 1, 2):  # compute, exchange: a count; repeat: iterations
        count = struct.unpack_from("<I", data, at)[0]
        at += 4
    first = frags
    if kind == 1:
        frags += count
    name = strings[lab:strings.index(b"\0", lab)].decode()
    if kind == 1 and name == label:
        rec = frag_at + 40 * (first + count // 2)
        off = {"dst": 20, "bytes": 28, "src_tile": 0}[field]
        value = struct.unpack_from("<I", data, rec + off)[0]
        struct.pack_into("<I", data, rec + off, value + delta)
        # a forged checksum: the damage must be caught by the check, not the loader
        struct.pack_into("<I", data, frag_head + 4, crc32c(bytes(data[frag_at:frag_at + frag_len])))
        open(dst, "wb").write(data)
        sys.exit(0)
sys.exit("no exchange step labelled " + label)
