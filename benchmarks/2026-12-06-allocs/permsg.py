#!/usr/bin/env python3
"""Bytes and objects allocated per delivered message, from a heap profile's
-raw dump: the whole process, and the samples whose stack holds a function
matching each pattern.

    python3 permsg.py PROFILE DELIVERED [FUNC-REGEXP ...]
"""
import re, subprocess, sys
prof, delivered = sys.argv[1], float(sys.argv[2])
pats = sys.argv[3:]
raw = subprocess.run(["go", "tool", "pprof", "-raw", prof], capture_output=True, text=True).stdout
samples, locs, sec, cur = [], {}, None, None
for line in raw.splitlines():
    if line.startswith("Samples:"): sec = "s"; continue
    if line.startswith("Locations"): sec = "l"; continue
    if line.startswith("Mappings"): sec = None; continue
    if sec == "s":
        m = re.match(r"\s*(\d+)\s+(\d+)\s+\d+\s+\d+:\s*(.*)", line)
        if m: samples.append((int(m.group(1)), int(m.group(2)), m.group(3).split()))
    elif sec == "l":
        m = re.match(r"\s*(\d+):\s+\S+\s+M=\d+\s+(\S+)", line)
        if m: cur = m.group(1); locs[cur] = [m.group(2)]; continue
        m = re.match(r"\s+(\S+)\s+\S+:\d+", line)
        if m and cur: locs[cur].append(m.group(1))
def tot(f):
    o = b = 0
    for ao, as_, ids in samples:
        if f(ids): o += ao; b += as_
    return o, b
o, b = tot(lambda ids: True)
print(f"all: {o/delivered:.1f} objects/msg, {b/delivered:.0f} B/msg")
for p in pats:
    r = re.compile(p)
    o, b = tot(lambda ids: any(r.search(fn) for i in ids for fn in locs.get(i, [])))
    print(f"{p}: {o/delivered:.2f} objects/msg, {b/delivered:.0f} B/msg")
