"""End to end on the small Llama checkpoint (../shared/data/tinylm-model): per
kvtile preset next to the fp16 cache,

  * greedy generation through model.generate(past_key_values=kvtile.hf.Cache(...))
    and the token agreement with the fp16 cache (DynamicCache),
  * teacher-forced NLL and KL(fp16 || kvtile) on val_bytes.npy: prompt prefilled,
    then every later byte fed as a decode step through the kvtile cache,
  * a continuous-batching loop (engine.py: ragged requests joining and leaving,
    decode step under a CUDA graph) with tokens/s against kvtile's fp16 cache,
  * cache bytes per token.

    python3 examples/torch/tinylm_e2e.py --model ../shared/data/tinylm-model --json out.json --md out.md
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvtile  # noqa: E402
import kvtile.hf  # noqa: E402
from engine import Engine, run_workload  # noqa: E402

PRESETS = ["k4v2_g128", "k4v4_g128", "k2v2_g128"]


def load(path, attn):
    from transformers import LlamaForCausalLM

    try:
        m = LlamaForCausalLM.from_pretrained(path, dtype=torch.float16, attn_implementation=attn)
    except TypeError:
        m = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float16, attn_implementation=attn)
    return m.cuda().eval()


def batches(val, n, length, seed):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(val) - length, size=n)
    return torch.tensor(np.stack([val[s:s + length] for s in starts]).astype(np.int64), device="cuda")


@torch.no_grad()
def generate(model, ids, new, cache):
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, past_key_values=cache, pad_token_id=0)
    return out[:, ids.shape[1]:]


def agreement(a, b):
    same = (a == b).float()
    first_diff = [(int(torch.nonzero(row == 0)[0]) if (row == 0).any() else row.numel()) for row in same]
    return float(same.mean()), float(np.mean(first_diff))


@torch.no_grad()
def teacher_forced(model, ids, prompt, preset):
    """NLL of the kvtile cache (and of fp16) over positions prompt..L-1, and KL(fp16 || kvtile)."""
    ref = model(ids).logits.float()  # fp16 full forward: the fp16-cache reference
    b, L = ids.shape
    cache = kvtile.hf.Cache(model.config, preset=preset, max_cache_len=L)
    out = model(ids[:, :prompt], past_key_values=cache, use_cache=True)
    logits = [out.logits[:, -1:].float()]
    for t in range(prompt, L - 1):
        out = model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
        logits.append(out.logits.float())
    q = torch.cat(logits, 1)  # predictions for positions prompt..L-1
    p = ref[:, prompt - 1:L - 1]
    tgt = ids[:, prompt:]
    nll_q = torch.nn.functional.cross_entropy(q.reshape(-1, q.shape[-1]), tgt.reshape(-1)).item()
    nll_p = torch.nn.functional.cross_entropy(p.reshape(-1, p.shape[-1]), tgt.reshape(-1)).item()
    lp, lq = p.log_softmax(-1), q.log_softmax(-1)
    kl = (lp.exp() * (lp - lq)).sum(-1).mean().item()
    return nll_p, nll_q, kl


def batching_workload(val, n, seed):
    rng = np.random.default_rng(seed)
    reqs = []
    for _ in range(n):
        plen = int(rng.integers(32, 400))
        s = int(rng.integers(0, len(val) - plen))
        reqs.append((torch.tensor(val[s:s + plen].astype(np.int64), device="cuda"), int(rng.integers(16, 200))))
    return reqs


def batching(model, backend, reqs, max_batch):
    """The batching loop timed like for like for every backend: one engine (CUDA-graph decode step), a
    full warm-up run (graph capture, every prompt shape's first use), then the timed run of the same
    workload on the same engine (every row has left at the end of a run)."""
    eng = Engine(model, backend, max_batch=max_batch, max_len=1024)
    run_workload(eng, reqs, max_batch)
    tokens, stats = run_workload(eng, reqs, max_batch)
    return eng, tokens, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("KVTILE_TINYLM", "../shared/data/tinylm-model"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--gen-batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--tf-batch", type=int, default=8)
    ap.add_argument("--tf-len", type=int, default=1024)
    ap.add_argument("--tf-prompt", type=int, default=128)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--presets", default=",".join(PRESETS))
    args = ap.parse_args()
    presets = [p for p in args.presets.split(",") if p]

    kvtile.hf.register()
    val = np.load(os.path.join(args.model, "val_bytes.npy"))
    fused = load(args.model, "kvtile")
    gen_ids = batches(val, args.gen_batch, args.prompt, 1)
    tf_ids = batches(val, args.tf_batch, args.tf_len, 2)
    reqs = batching_workload(val, args.requests, 3)

    rows = []
    ref_tokens = generate(fused, gen_ids, args.new, None)  # DynamicCache: fp16 (prompt and decode via sdpa)
    # continuous batching, fp16 baseline
    eng, fp16_tokens, fp16_stats = batching(fused, "fp16", reqs, args.max_batch)
    rows.append({"cache": "fp16", "token_agreement": 1.0, "agree_prefix": float(args.new),
                 "nll": None, "kl": 0.0, "tokens_per_s": fp16_stats["tokens_per_s"],
                 "decode_step_ms": fp16_stats["decode_step_ms"], "bytes_per_token": eng.bytes_per_token(),
                 "cache_bytes": eng.cache_bytes(), "graph": eng.graph is not None})
    for preset in presets:
        t0 = time.perf_counter()
        cache = kvtile.hf.Cache(fused.config, preset=preset, max_cache_len=args.prompt + args.new)
        toks = generate(fused, gen_ids, args.new, cache)
        agree, prefix = agreement(toks, ref_tokens)
        nll_p, nll_q, kl = teacher_forced(fused, tf_ids, args.tf_prompt, preset)
        rows[0]["nll"] = nll_p
        eng, q_tokens, q_stats = batching(fused, preset, reqs, args.max_batch)
        same = [float(np.mean([a == b for a, b in zip(x, y)])) for x, y in zip(q_tokens, fp16_tokens)]
        rows.append({"cache": "kvtile " + preset, "token_agreement": agree, "agree_prefix": prefix, "nll": nll_q,
                     "kl": kl, "tokens_per_s": q_stats["tokens_per_s"], "decode_step_ms": q_stats["decode_step_ms"],
                     "bytes_per_token": eng.bytes_per_token(), "cache_bytes": eng.cache_bytes(),
                     "graph": eng.graph is not None, "batching_token_agreement": float(np.mean(same)),
                     "seconds": time.perf_counter() - t0})
        print(rows[-1], flush=True)
        write(args, rows, None)

    write(args, rows, table_lines(args, rows))


def table_lines(args, rows):
    lines = ["| cache | token agreement (greedy, %d x %d new) | agreeing prefix | NLL nats/byte | KL vs fp16 | "
             "tokens/s (batching) | decode step ms | cache bytes/token |" % (args.gen_batch, args.new),
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %.3f | %.1f | %.4f | %.2e | %.0f | %.2f | %.0f |" % (
            r["cache"], r["token_agreement"], r["agree_prefix"], r["nll"] if r["nll"] is not None else float("nan"),
            r["kl"], r["tokens_per_s"], r["decode_step_ms"], r["bytes_per_token"]))
    return lines


def write(args, rows, lines):
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": __import__("transformers").__version__, "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": " ".join(["python3"] + sys.argv), "args": vars(args)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if lines is None:
        return
    head = ["# kvtile in PyTorch: end to end on the small Llama checkpoint", "",
            "- Date: %s. GPU: %s. torch %s, transformers %s." % (meta["date"], meta["gpu"], meta["torch"],
                                                                 meta["transformers"]),
            "- Command: `%s`" % meta["command"], ""]
    table = "\n".join(head + lines)
    print(table)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
