#!/usr/bin/env python3
"""Executed warp instructions per SASS opcode from Nsight Compute's source page.

    ncu --section SourceCounters --page source --print-source sass --csv ... > src.csv
    scripts/sass_histogram.py src.csv

Prints the total, then opcode, count and share, largest first (predicated-off
instructions count as executed, as in Nsight's "Warp Level Instructions Executed")."""
import collections
import csv
import re
import sys


def main(path):
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"') and "Source" in l)
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    src = head.index("Source")
    cand = [i for i, h in enumerate(head) if h.strip() in ("Warp Level Instructions Executed", "Instructions Executed")]
    if not cand:
        sys.exit("no executed-instructions column in: " + ", ".join(head))
    col = cand[0]
    hist = collections.Counter()
    for r in rows[1:]:
        if len(r) <= max(src, col):
            continue
        m = re.match(r"\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", r[src])
        try:
            n = float(r[col].replace(",", ""))
        except ValueError:
            continue
        if m:
            hist[m.group(1)] += n
    total = sum(hist.values())
    print(f"total {total:.0f} warp instructions ({head[col]})")
    for op, n in hist.most_common(40):
        print(f"{op:10s} {n:14.0f} {100 * n / total:6.2f}%")


if __name__ == "__main__":
    main(sys.argv[1])
