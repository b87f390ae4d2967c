#!/usr/bin/env python3
"""bench/device/attention_report.py: one JSON + Markdown summary of a decode-attention run.

Usage: python3 bench/device/attention_report.py --attention attention.json [--sdpa sdpa.json]
           [--variant NAME=FILE ...] --date D --gpu "..." --command "..." --out PREFIX

Reads the JSON written by bench/device/attention.cu (--json) and by sdpa_bench.py,
writes PREFIX.json (everything merged) and PREFIX.md (one table per shape: every
kvtile kernel, the fp16 baseline, PyTorch SDPA; speedups vs the fp16 baseline
and vs cuDNN SDPA; the issue's targets checked), from the numbers of that run only.
"""
import argparse
import json


def shape_key(r):
    return (r["batch"], r["q_heads"], r["kv_heads"], r["head_dim"], r["tokens"])


def fmt_shape(k):
    b, hq, hkv, d, t = k
    return f"({b}, {hq}, {hkv}, {d}, {t // 1024}K)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attention", required=True)
    ap.add_argument("--sdpa")
    ap.add_argument("--variant", action="append", default=[], help="NAME=FILE (split at the last =)")
    ap.add_argument("--date", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    att = json.load(open(a.attention))
    sdpa = json.load(open(a.sdpa)) if a.sdpa else None
    variants = {}
    for v in a.variant:
        name, path = v.rsplit("=", 1)
        variants[name] = json.load(open(path))
    merged = dict(date=a.date, gpu=a.gpu, command=a.command, kvtile=att, sdpa=sdpa, variants=variants)
    json.dump(merged, open(a.out + ".json", "w"), indent=1)

    ceiling = att["read_ceiling_gbs"]
    by_shape = {}
    for r in att["results"]:
        by_shape.setdefault(shape_key(r), []).append(r)
    sd = {}
    if sdpa:
        for r in sdpa["results"]:
            sd[(shape_key(r), r["backend"])] = r
    L = [f"# Decode attention on the quantized paged cache: {a.gpu}, {a.date}", "",
         f"- command: `{a.command}`",
         f"- method: median of {att['iterations']} CUDA-event timings per configuration, L2 flushed before each "
         "timed launch; bytes = compressed records (+ fp16 tail) or fp16 K+V, each read once; read ceiling = "
         f"same-run read-only kernel over 4 GiB: **{ceiling:.0f} GB/s**",
         f"- PyTorch SDPA: {sdpa['torch'] if sdpa else 'not run'} (`enable_gqa=True`, cuDNN and flash backends, "
         "dense fp16 K/V)", "- JSON: same name, `.json`", ""]
    L += ["| shape (B, Hq, Hkv, D, tokens) | kernel | splits | us | GB/s | % of read ceiling | MB read | "
          "vs fp16 baseline | vs cuDNN SDPA |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k, rows in by_shape.items():
        cud = sd.get((k, "cudnn"))
        for r in rows:
            vs = f"{cud['us'] / r['us']:.2f}x" if cud else "-"
            L.append(f"| {fmt_shape(k)} | {r['kernel']} | {r['splits']} | {r['us']:.1f} | {r['gbs']:.0f} | "
                     f"{100 * r['ceiling_fraction']:.1f}% | {r['bytes'] / 1e6:.1f} | "
                     f"{r['speedup_vs_fp16_baseline']:.2f}x | {vs} |")
        for be in ("cudnn", "flash"):
            s = sd.get((k, be))
            if s:
                base = next((r for r in rows if r["kernel"] == "fp16_baseline"), None)
                sp = f"{base['us'] / s['us']:.2f}x" if base else "-"
                L.append(f"| {fmt_shape(k)} | SDPA {be} | - | {s['us']:.1f} | {s['gbs']:.0f} | "
                         f"{100 * s['gbs'] / ceiling:.1f}% | {s['bytes'] / 1e6:.1f} | {sp} | - |")
    L += ["", "## Targets (issue 4)", ""]

    def find(kernel, key):
        return next((r for r in by_shape.get(key, []) if r["kernel"] == kernel), None)

    t1 = find("k4v2_g128", (16, 32, 8, 128, 65536))
    t2 = find("k4v2_g128", (1, 32, 8, 128, 16384))
    if t1:
        L.append(f"- k4v2_g128 at (16, 32, 8, 128, 64K): {t1['speedup_vs_fp16_baseline']:.2f}x the fp16 baseline "
                 f"(target 4.0x), {100 * t1['ceiling_fraction']:.1f}% of the read ceiling on its compressed bytes "
                 f"(target 85%): {'met' if t1['speedup_vs_fp16_baseline'] >= 4.0 and t1['ceiling_fraction'] >= 0.85 else 'NOT met'}")
    if t2:
        L.append(f"- k4v2_g128 at (1, 32, 8, 128, 16K): {t2['speedup_vs_fp16_baseline']:.2f}x the fp16 baseline "
                 f"(target 2.5x): {'met' if t2['speedup_vs_fp16_baseline'] >= 2.5 else 'NOT met'}")
    base_long = find("fp16_baseline", (16, 32, 8, 128, 65536))
    if base_long:
        L.append(f"- fp16 baseline at (16, 32, 8, 128, 64K): {100 * base_long['ceiling_fraction']:.1f}% of the read "
                 "ceiling (target 85%)")
    if variants:
        L += ["", "## Compile-time variants (k4v2_g128; same GPU, same session; the call is named)", "",
              "| variant | shape | kernel | us | vs fp16 baseline |", "|---|---|---|---:|---:|"]
        for name, v in variants.items():
            for r in v["results"]:
                if r["kernel"] in ("k4v2_g128", "fp16_baseline"):
                    L.append(f"| {name} | {fmt_shape(shape_key(r))} | {r['kernel']} | {r['us']:.1f} | "
                             f"{r['speedup_vs_fp16_baseline']:.2f}x |")
    open(a.out + ".md", "w").write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
