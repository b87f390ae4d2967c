#!/usr/bin/env python3
"""bench/device/attention_report.py: one JSON + Markdown summary of a decode-attention run.

Usage: python3 bench/device/attention_report.py --attention attention.json [--sdpa sdpa.json]
           [--jit80 attention_jit80.json] [--previous attention_old.json --previous-name REV]
           [--date D] [--gpu "..."] [--command "..."] --out PREFIX

--date defaults to today (UTC), --gpu to the device named in attention.json. A
--sdpa file that does not exist is left out (the SDPA run was skipped); exit 77
(CTest bench/attention_report: skipped) when attention.json does not exist.

Reads the JSON written by bench/device/attention.cu (--json) and by sdpa_bench.py
(same device call), writes PREFIX.json (both merged) and PREFIX.md: one row per
shape with kvtile (plan/run and one-call), kvtile's fp16 kernel and PyTorch SDPA
(best of cuDNN and flash), the fraction of the same-run read ceiling and the
speedups; then every other kernel of the run, and the issue's targets checked.
With rows of forced policies (bench_attention --policies: k4v2_g128_sm80 / _sm86 /
_sm120), --jit80 (bench_attention built as compute_80 PTX only and run with
CUDA_FORCE_PTX_JIT=1: the policy the PTX selects) and --previous (another
build's bench_attention, same call) an "Architectures" section compares each
with the Hopper policy row by row.
"""
import argparse
import datetime
import json
import math
import os
import sys


def shape_key(r):
    return (r["batch"], r["q_heads"], r["kv_heads"], r["head_dim"], r["tokens"], r.get("lengths", "uniform"))


def fmt_shape(k):
    b, hq, hkv, d, t, lens = k
    if lens != "uniform":
        return f"{lens}: {b} seqs, ({hq}, {hkv}, {d}), <= {t // 1024}K"
    return f"({b}, {hq}, {hkv}, {d}, {t // 1024}K)"


# kvtile kernel-name suffix -> (SDPA variant, query tokens per sequence): the SDPA run a kvtile row
# compares with (sdpa_bench.py runs these for the uniform rows of a kvtile run).
SDPA_VARIANTS = {"": ("", 1), "_bf16q": ("bf16", 1), "_mq2": ("mq2", 2), "_mq4": ("mq4", 4), "_mq8": ("mq8", 8)}


# bench_attention's rows with every sequence cut into n chunks: SPLIT_PREFIX + str(n).
SPLIT_PREFIX = "k4v2_g128_split"


def sdpa_runs(path, kernel="k4v2_g128"):
    """(shape, SDPA variant, query tokens per sequence) for the uniform rows of a kvtile attention JSON
    (bench/device/attention.cu --json) whose kernel is `kernel` plus a suffix of SDPA_VARIANTS, in the
    file's order, each once: the runs sdpa_bench.py times."""
    with open(path) as f:
        rows = json.load(f)["results"]
    runs = []
    for r in rows:
        suffix = r["kernel"][len(kernel):] if r["kernel"].startswith(kernel) else None
        if r.get("lengths") != "uniform" or suffix not in SDPA_VARIANTS:
            continue
        run = ((r["batch"], r["q_heads"], r["kv_heads"], r["head_dim"], r["tokens"]),) + SDPA_VARIANTS[suffix]
        if run not in runs:
            runs.append(run)
    return runs


def sdpa_variant(kernel):
    """The SDPA variant a kvtile kernel row compares with: that of a suffix of SDPA_VARIANTS in its
    name, at its end or before a variant's own suffix (k4v2_g128_mq4_nsplit: mq4), the one-token run
    for the other rows (other presets and options), None for none (the ragged multi-query rows,
    whose token counts SDPA has no batch for)."""
    if "_mqr" in kernel:
        return None
    for suffix, (v, _) in SDPA_VARIANTS.items():
        if suffix and (kernel.endswith(suffix) or suffix + "_" in kernel):
            return v
    return ""


def architectures(by_shape, prev_name, have_jit):
    """The per-architecture policies against the Hopper policy (k4v2_g128, D = 128), row by row."""
    cols = [("k4v2_g128_previous", f"{prev_name} (same call)"), ("k4v2_g128_jit80", "sm80 from compute_80 PTX (JIT)"),
            ("k4v2_g128_sm80", "sm80 forced (163 KB, cp.async)"), ("k4v2_g128_sm86", "sm86 forced (99 KB, cp.async)"),
            ("k4v2_g128_sm120", "sm120 forced (99 KB, bulk)")]
    cols = [c for c in cols if any(c[0] in rows for rows in by_shape.values())]
    if not cols:
        return []
    L = ["", "## Architectures (issue 28)", "",
         "k4v2_g128 (fp8_scales), D = 128, plan/run; each cell: us, % of the read ceiling, time / Hopper policy's. "
         "Forced = `attention::forced<decode_policy_smXX>` on this GPU (the shared memory and load path that GPU "
         "would get, this GPU's SMs, clocks and bandwidth)" + ("; JIT = bench_attention built as compute_80 PTX "
                                                              "only, run with CUDA_FORCE_PTX_JIT=1" if have_jit else ""),
         "", "| shape | Hopper policy | " + " | ".join(n for _, n in cols) + " |",
         "|---|---:|" + "---:|" * len(cols)]
    worst = {c: (0, None) for c, _ in cols}
    for k, rows in by_shape.items():
        q = rows.get("k4v2_g128")
        if not q or not any(c in rows for c, _ in cols):
            continue
        cells = []
        for c, _ in cols:
            r = rows.get(c)
            if not r:
                cells.append("-")
                continue
            x = r["us"] / q["us"]
            if x > worst[c][0]:
                worst[c] = (x, k)
            cells.append(f"{r['us']:.1f} ({100 * r['ceiling_fraction']:.0f}%, {x:.2f}x)")
        L.append(f"| {fmt_shape(k)} | {q['us']:.1f} ({100 * q['ceiling_fraction']:.1f}%) | " + " | ".join(cells) + " |")
    L += ["", "Targets (issue 28):", ""]
    big = by_shape.get((16, 32, 8, 128, 65536, "uniform"), {})
    for c, n in cols:
        x, k = worst[c]
        if k is None:
            continue
        if c == "k4v2_g128_previous":
            faster = max(rows["k4v2_g128"]["us"] / rows[c]["us"] for rows in by_shape.values() if c in rows)
            L.append(f"- Hopper policy against {prev_name}: at most {faster:.3f}x its time on any row (target <= 1.0: "
                     f"{'met' if faster <= 1.0 else 'NOT met'})")
            continue
        line = f"- {n}: at most {x:.2f}x the Hopper policy's time (at {fmt_shape(k)}; target <= 1.10: " \
               f"{'met' if x <= 1.10 else 'NOT met'})"
        if c in big:
            f = big[c]["ceiling_fraction"]
            line += f"; (16, 32, 8, 128, 64K) at {100 * f:.1f}% of the read ceiling" + \
                (f" (target 80%: {'met' if f >= 0.80 else 'NOT met'})" if c in ("k4v2_g128_jit80", "k4v2_g128_sm86")
                 else "")
        L.append(line)
    return L


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attention", required=True)
    ap.add_argument("--sdpa")
    ap.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    ap.add_argument("--gpu")
    ap.add_argument("--command", default="bench_attention --policies --iters 50")
    ap.add_argument("--out", required=True)
    ap.add_argument("--jit80")
    ap.add_argument("--previous")
    ap.add_argument("--previous-name", default="previous")
    a = ap.parse_args()
    if not os.path.exists(a.attention):
        print(f"SKIPPED: {a.attention} does not exist (no attention benchmark run)")
        sys.exit(77)
    att = json.load(open(a.attention))
    if a.gpu is None:
        a.gpu = att.get("device", "unknown GPU")
    if a.sdpa and not os.path.exists(a.sdpa):
        print(f"note: {a.sdpa} does not exist; no SDPA columns")
        a.sdpa = None
    sdpa = json.load(open(a.sdpa)) if a.sdpa else None
    jit80 = json.load(open(a.jit80)) if a.jit80 else None
    prev = json.load(open(a.previous)) if a.previous else None
    if prev and "kvtile" in prev:  # a report of this script
        prev = prev["kvtile"]
    json.dump(dict(date=a.date, gpu=a.gpu, command=a.command, kvtile=att, sdpa=sdpa, kvtile_jit80=jit80,
                   kvtile_previous=dict(revision=a.previous_name, run=prev) if prev else None),
              open(a.out + ".json", "w"), indent=1)
    ceiling = att["read_ceiling_gbs"]
    by_shape = {}
    for r in att["results"]:
        by_shape.setdefault(shape_key(r), {})[r["kernel"]] = r
    # rows of the other runs of the call, renamed; their ceiling fraction against this run's ceiling
    for run, suffix in ((jit80, "_jit80"), (prev, "_previous")):
        for r in (run or {}).get("results", []):
            if r["kernel"] == "k4v2_g128" and shape_key(r) in by_shape:
                by_shape[shape_key(r)]["k4v2_g128" + suffix] = dict(r, kernel="k4v2_g128" + suffix,
                                                                    ceiling_fraction=r["gbs"] / ceiling)
    best_sdpa = {}
    if sdpa:
        for r in sdpa["results"]:
            if "us" not in r:
                continue
            k = (r["batch"], r["q_heads"], r["kv_heads"], r["head_dim"], r["tokens"], "uniform", r.get("variant", ""))
            if k not in best_sdpa or r["us"] < best_sdpa[k]["us"]:
                best_sdpa[k] = r
    L = [f"# Decode attention: kvtile vs PyTorch SDPA, {a.gpu}, {a.date}", "",
         f"- command: `{a.command}`",
         f"- median of {att['iterations']} CUDA-event timings per configuration, L2 flushed before each timed "
         "launch; one query token per sequence, fp16 queries, softmax scale 1/sqrt(D)",
         "- kvtile = `k4v2_g128` (fp8_scales) through `decode_plan` (plan once, `run` timed); one-call = "
         "`paged_decode`; fp16 = kvtile's fp16 kernel over 64-token fp16 pages (plan/run)",
         f"- bytes = records of complete tiles + fp16 tail (+ sink), or fp16 K+V; read ceiling = same-run "
         f"read-only kernel over 4 GiB: **{ceiling:.0f} GB/s**",
         f"- PyTorch SDPA: {sdpa['torch'] if sdpa else 'not run'}, dense fp16 K/V, `enable_gqa=True`, best of the "
         "cuDNN and flash backends per shape (no paging; no ragged equivalent: ragged rows compare with kvtile fp16); "
         "`_bf16q` rows against bf16 SDPA, `_mq4` / `_mq8` against 4 / 8 query tokens with `causal_lower_right` "
         "(best of cuDNN, flash and efficient)",
         "- JSON: same name, `.json`", "",
         "| shape (B, Hq, Hkv, D, tokens) | kvtile us | % ceiling | one-call us | fp16 us | SDPA us (backend) | "
         "vs SDPA | vs fp16 | chunks |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    uniform_speedups = []
    sweep = {k: rows for k, rows in by_shape.items()
             if rows.get("k4v2_g128", {}).get("small_batch_sweep")}
    for k, rows in by_shape.items():
        q = rows.get("k4v2_g128")
        if not q or k in sweep:
            continue
        one = rows.get("k4v2_g128_onecall")
        f16 = rows.get("fp16_baseline")
        s = best_sdpa.get(k + ("",))
        vs = f"**{s['us'] / q['us']:.2f}x**" if s else "-"
        if s:
            uniform_speedups.append((k, s["us"] / q["us"]))
        L.append(f"| {fmt_shape(k)} | {q['us']:.1f} | {100 * q['ceiling_fraction']:.1f}% | "
                 f"{one['us']:.1f} | {f16['us']:.1f} | " if one and f16 else f"| {fmt_shape(k)} | {q['us']:.1f} | - | - | - | ")
        L[-1] += (f"{s['us']:.1f} ({s['backend']}) | {vs} | " if s else "- | - | ") + \
            f"{q['speedup_vs_fp16_baseline']:.2f}x | {q['chunks']} |"
    arch_rows = ("k4v2_g128_sm80", "k4v2_g128_sm86", "k4v2_g128_sm120", "k4v2_g128_jit80", "k4v2_g128_previous")
    others = [(k, n, r) for k, rows in by_shape.items() for n, r in rows.items()
              if n not in ("k4v2_g128", "k4v2_g128_onecall", "fp16_baseline") + arch_rows
              and not n.startswith(SPLIT_PREFIX)]
    if others:
        L += ["", "Other presets and options (same run):", "",
              "| shape | kernel | us | % ceiling | vs fp16 | vs SDPA |", "|---|---|---:|---:|---:|---:|"]
        for k, n, r in others:
            v = sdpa_variant(n)
            s = best_sdpa.get(k + (v,)) if v is not None else None
            L.append(f"| {fmt_shape(k)} | {n} | {r['us']:.1f} | {100 * r['ceiling_fraction']:.1f}% | "
                     f"{r['speedup_vs_fp16_baseline']:.2f}x | {s['us'] / r['us']:.2f}x |" if s else
                     f"| {fmt_shape(k)} | {n} | {r['us']:.1f} | {100 * r['ceiling_fraction']:.1f}% | "
                     f"{r['speedup_vs_fp16_baseline']:.2f}x | - |")
    if sweep:
        L += ["", "Small batches (batch 1, 2, 4 at 4K-256K with 1, 2 and 8 KV heads; the shapes not in the table "
              "above; same run):", "",
              "| shape (B, Hq, Hkv, D, tokens) | kvtile us | % ceiling | fp16 us | SDPA us (backend) | vs SDPA | "
              "vs fp16 | chunks |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for k, rows in sorted(sweep.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][4])):
            q, f16, s = rows["k4v2_g128"], rows.get("fp16_baseline"), best_sdpa.get(k + ("",))
            L.append(f"| {fmt_shape(k)} | {q['us']:.1f} | {100 * q['ceiling_fraction']:.1f}% | "
                     + (f"{f16['us']:.1f} | " if f16 else "- | ")
                     + (f"{s['us']:.1f} ({s['backend']}) | {s['us'] / q['us']:.2f}x | " if s else "- | - | ")
                     + f"{q['speedup_vs_fp16_baseline']:.2f}x | {q['chunks']} |")
    split_rows = [(k, rows) for k, rows in by_shape.items() if any(n.startswith(SPLIT_PREFIX) for n in rows)]
    if split_rows:
        L += ["", "Split counts at small batches (same run): the plan's own choice against every sequence cut into "
              "n chunks (`decode_args::num_splits`):", "",
              "| shape (B, Hq, Hkv, D, tokens) | plan chunks | plan us | best n | best us | plan / best | "
              "us at n = 1, 2, 4, ... |", "|---|---:|---:|---:|---:|---:|---|"]
        for k, rows in sorted(split_rows, key=lambda kv: (kv[0][2], kv[0][0], kv[0][4])):
            q = rows.get("k4v2_g128")
            forced = sorted(((int(n[len(SPLIT_PREFIX):]), r) for n, r in rows.items() if n.startswith(SPLIT_PREFIX)),
                            key=lambda t: t[0])
            bn, br = min(forced, key=lambda t: t[1]["us"])
            L.append(f"| {fmt_shape(k)} | {q['chunks']} | {q['us']:.1f} | {bn} | {br['us']:.1f} | "
                     f"{q['us'] / br['us']:.2f} | {', '.join('%.1f' % r['us'] for _, r in forced)} |")
    L += architectures(by_shape, a.previous_name, jit80 is not None)
    L += ["", "## Targets (issue 29)", ""]
    if uniform_speedups:
        g = math.exp(sum(math.log(x) for _, x in uniform_speedups) / len(uniform_speedups))
        lo_k, lo = min(uniform_speedups, key=lambda t: t[1])
        L.append(f"- geometric mean over the {len(uniform_speedups)} uniform shapes of the standard set: **{g:.2f}x** "
                 f"SDPA (target 3.5x: {'met' if g >= 3.5 else 'NOT met'}); lowest {lo:.2f}x at {fmt_shape(lo_k)} "
                 f"(target >= 2.5x: {'met' if lo >= 2.5 else 'NOT met'})")
        for k, x in uniform_speedups:
            if k[1] == 16 * k[2]:
                L.append(f"- GQA 16 at {fmt_shape(k)}: {x:.2f}x SDPA (target 3.5x: {'met' if x >= 3.5 else 'NOT met'})")
    for k, rows in by_shape.items():
        q = rows.get("k4v2_g128")
        if q and k[0] == 1 and k[5] == "uniform" and 16384 <= k[4] <= 65536:
            L.append(f"- batch 1 at {fmt_shape(k)}: {100 * q['ceiling_fraction']:.1f}% of the read ceiling (target 50%: "
                     f"{'met' if q['ceiling_fraction'] >= 0.5 else 'NOT met'})")
    for k, rows in by_shape.items():
        q = rows.get("k4v2_g128")
        if q and k[5] != "uniform":
            L.append(f"- {fmt_shape(k)}: {100 * q['ceiling_fraction']:.1f}% of the read ceiling (target 75%: "
                     f"{'met' if q['ceiling_fraction'] >= 0.75 else 'NOT met'})")
    big = by_shape.get((16, 32, 8, 128, 65536, "uniform"), {})
    q = big.get("k4v2_g128")
    if q:
        L.append(f"- (16, 32, 8, 128, 64K): {100 * q['ceiling_fraction']:.1f}% of the read ceiling (target 85%: "
                 f"{'met' if q['ceiling_fraction'] >= 0.85 else 'NOT met'})")
    # multi-query against the one-token step of the same cache (issue 29: 8 tokens <= 1.3x, 4 <= 1.15x)
    for k, rows in by_shape.items():
        q = rows.get("k4v2_g128")
        for n in (2, 4, 8):
            m = rows.get(f"k4v2_g128_mq{n}")
            if q and m:
                r = m["us"] / q["us"]
                lim = {4: 1.15, 8: 1.3}.get(n)
                target = f" (target <= {lim}x: {'met' if r <= lim else 'NOT met'})" if lim else ""
                L.append(f"- multi-query, {n} new tokens per sequence at {fmt_shape(k)}: {m['us']:.1f} us, "
                         f"{r:.2f}x the one-token step{target}")
        m, b = rows.get("k4v2_g128_mqr"), rows.get("k4v2_g128_mqr_bound")
        if q and m and b:
            L.append(f"- multi-query, 1-8 new tokens per sequence (ragged) at {fmt_shape(k)}: {m['us']:.1f} us "
                     f"planned with the host counts, {b['us']:.1f} us planned at 8 for every sequence; "
                     f"{m['us'] / q['us']:.2f}x the one-token step")
    open(a.out + ".md", "w").write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
