"""Speculative decoding on the small Llama checkpoint (issue 30, item 5): per
kvtile cache, the continuous-batching loop of engine.py with prompt-lookup
drafts (run_workload_spec) against the same loop without speculation
(run_workload), on one workload of ragged requests from val_bytes.npy (a
quarter of them in groups that share a prompt prefix, started by fork):

  * acceptance rate (accepted drafts / drafts) and tokens per verify step,
  * tokens/s of the batching loop with and without speculation (each timed
    after a full warm-up run of the same workload on the same engine),
  * greedy token agreement of speculative against plain greedy decoding with
    the same cache (docs/python.md explains why it can be below 1).

    python3 examples/torch/spec_bench.py --model ../shared/data/tinylm-model --json out.json --md out.md

The fp16 baseline cache is not in the table: its decode kernel attends one
token per row, so the engine cannot verify drafts on it.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvtile  # noqa: E402,F401
from engine import Engine, run_workload, run_workload_spec  # noqa: E402
from tinylm_e2e import PRESETS, load  # noqa: E402


def workload(val, n, seed, shared_groups=3, per_group=4, prefix=160):
    """n ragged (prompt, n_new) requests, then shared_groups x per_group requests (prompt, n_new, prefix)."""
    rng = np.random.default_rng(seed)
    reqs = []
    for _ in range(n):
        plen = int(rng.integers(32, 400))
        s = int(rng.integers(0, len(val) - plen))
        reqs.append((torch.tensor(val[s:s + plen].astype(np.int64), device="cuda"), int(rng.integers(16, 200))))
    for _ in range(shared_groups):
        s = int(rng.integers(0, len(val) - prefix))
        head = val[s:s + prefix]
        for _ in range(per_group):
            t = int(rng.integers(0, len(val) - 64))
            tail = val[t:t + int(rng.integers(8, 64))]
            prompt = np.concatenate([head, tail]).astype(np.int64)
            reqs.append((torch.tensor(prompt, device="cuda"), int(rng.integers(16, 200)), prefix))
    return reqs


def agreement(a, b):
    return float(np.mean([np.mean([x == y for x, y in zip(p, q)]) for p, q in zip(a, b)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("KVTILE_TINYLM", "../shared/data/tinylm-model"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--requests", type=int, default=36)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--k", type=int, default=7, help="prompt-lookup drafts per row and step (<= 7)")
    ap.add_argument("--presets", default=",".join(["k4v4_g128", "k4v2_g128", "k2v2_g128"]))
    args = ap.parse_args()
    model = load(args.model, "sdpa")
    val = np.load(os.path.join(args.model, "val_bytes.npy"))
    reqs = workload(val, args.requests, 5)
    plain_reqs = [r[:2] for r in reqs]  # the same prompts, each prefilled on its own
    rows = []
    for preset in [p for p in args.presets.split(",") if p in PRESETS]:
        plain = Engine(model, preset, max_batch=args.max_batch, max_len=1024)
        run_workload(plain, plain_reqs, args.max_batch)
        plain_out, plain_stats = run_workload(plain, plain_reqs, args.max_batch)
        del plain
        spec = Engine(model, preset, max_batch=args.max_batch, max_len=1024, spec_k=args.k)
        run_workload_spec(spec, reqs, args.max_batch)
        spec_out, spec_stats = run_workload_spec(spec, reqs, args.max_batch)
        nofork = [i for i, r in enumerate(reqs) if len(r) == 2]
        rows.append({"cache": preset, "k": args.k, "acceptance": spec_stats["acceptance"],
                     "tokens_per_verify_step": spec_stats["tokens_per_step"],
                     "tokens_per_s_plain": plain_stats["tokens_per_s"], "tokens_per_s_spec": spec_stats["tokens_per_s"],
                     "decode_step_ms": plain_stats["decode_step_ms"], "verify_step_ms": spec_stats["verify_step_ms"],
                     "greedy_agreement": agreement([spec_out[i] for i in nofork], [plain_out[i] for i in nofork]),
                     "forked_requests": len(reqs) - len(nofork), "spec": spec_stats, "plain": plain_stats})
        print(rows[-1], flush=True)
        del spec
    lines = ["| cache | k | acceptance | tokens / verify step | tokens/s plain | tokens/s speculative | "
             "step ms plain / verify | greedy agreement |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %d | %.3f | %.2f | %.0f | %.0f | %.2f / %.2f | %.3f |" % (
            r["cache"], r["k"], r["acceptance"], r["tokens_per_verify_step"], r["tokens_per_s_plain"],
            r["tokens_per_s_spec"], r["decode_step_ms"], r["verify_step_ms"], r["greedy_agreement"]))
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "command": " ".join(["python3"] + sys.argv),
            "args": vars(args)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    table = "\n".join(["# Speculative decoding (prompt lookup) on the small Llama checkpoint", "",
                       "- Date: %s. GPU: %s. torch %s." % (meta["date"], meta["gpu"], meta["torch"]),
                       "- Command: `%s`" % meta["command"], ""] + lines)
    print(table)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
