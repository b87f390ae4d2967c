"""Markdown tables from kv_fidelity.json files (kv_fidelity.py --variant runs), for docs/accuracy.md.
Usage: python3 tables.py OUT_DIR... ; rows are grouped by preset (the name's first word), each with its KL
relative to that preset's "fp16 cover" row (min-max rounding, fp16 scales: kvtile 0.1's fp16_scales codec)."""
import json, os, sys

res = {}
for d in sys.argv[1:]:
    res.update(json.load(open(os.path.join(d, "kv_fidelity.json"))))
fp16 = res.pop("fp16")
groups = {}
for name, r in res.items():
    groups.setdefault(name.split()[0], []).append((name, r))
for g, rows in sorted(groups.items()):
    base = res.get(f"{g} fp16 cover")
    print(f"\n| {g} variant | KL | vs fp16 cover | NLL - fp16 | top-1 agree |\n|---|---:|---:|---:|---:|")
    for name, r in sorted(rows, key=lambda x: -x[1]["kl"]):
        rel = f"{r['kl'] / base['kl']:.3f}" if base else "-"
        print(f"| {name} | {r['kl']:.5f} | {rel} | {r['nll'] - fp16['nll']:+.4f} | {r['top1_agree']:.4f} |")
