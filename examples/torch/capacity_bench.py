"""The headline claim, measured (issue 33): at one fixed KV memory budget, how many concurrent long requests each
cache holds and how many tokens per second a decode step serves, on a model of Llama-3-8B shapes.

    python3 examples/torch/capacity_bench.py --out bench/results

For each cache (kvtile's fp16 paged cache and the quantized presets) and each prompt length:

  * max requests: the most rows of (prompt + --gen) tokens whose caches, all layers, fit the budget, computed from
    the package's own accounting (PagedCache.bytes_needed; the nbytes of an Fp16PagedCache built on the meta
    device): pages, page tables, lengths, fp16 tails and the decode workspace all count;
  * decode tokens/s and time per output token (TPOT) at that concurrency and at a sweep of lower ones (plus the
    fp16 cache's maximum, for a comparison at equal concurrency), each step a CUDA graph whose attention runs
    through kvtile.DecodePlan (planned from the host lengths before every step);
  * the attention share of a step: the GPU time of the step's attention alone (every layer's planned decode,
    replayed in its own graph) over the step's GPU time; and, from torch.profiler over eager steps, where the
    kernel time of a step goes (attention, cache writes, GEMMs, other);
  * prefill tokens/s: real prompts through the model in chunks (--chunk), each chunk attending the earlier ones
    read back from the cache;
  * serving: continuous batching at the maximum concurrency, requests at staggered progress leaving after --gen
    tokens and new ones admitted into the memory they free.

The decode timings need caches full of long requests (e.g. 131 x 16K tokens); running those prompts through an
8B model would take far longer than the benchmark, so the rows are filled with synthetic keys and values by the
cache's own writers (kvtile.prefill, Fp16PagedCache.write). Decode speed does not depend on the values; the
prefill rate is measured with real model runs. The weights are random (built on the GPU; no download), and
generation ignores end-of-sequence tokens: accuracy is measured elsewhere (kv-fidelity, kvtile-eval).

--mixed 16384,65536 adds a mixed-length workload: one page pool per cache sized from the same budget, requests
admitted whenever a row and the pages of their full length are free (engine.PlannedEngine.admit).

Results: <out>/<date>-<gpu>-capacity.json, .md and .png (tokens/s against concurrent requests per cache; through
matplotlib, else gnuplot, else skipped with a message; --replot <json> draws it later on any machine).
"""
import argparse
import gc
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvtile  # noqa: E402
from engine import PlannedEngine, pooled_cache  # noqa: E402

GB = 1e9
CACHES = ["fp16", "k4v4_g128", "k4v2_g128", "k2v2_g128"]
# Model shapes: Llama-3-8B, and GQA 8 at 64 query heads (Llama-3-70B's attention and MLP, fewer layers by default
# so that its weights leave room for the budget on one GPU).
SHAPES = {
    "llama3-8b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
                  "intermediate": 14336},
    "gqa8-64q": {"layers": 16, "hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128,
                 "intermediate": 28672},
}
DEVICE = "cuda"
PAGE_ALIGN = 128  # chunk sizes are multiples of every cache's page (quantized tiles 128, fp16 pages 64)
PLAN_CHECK_TOL = 2e-2  # relative difference allowed between the shared plan and the one-call decode


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------------ the model
class RMSNorm(nn.Module):
    def __init__(self, n, eps, device, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Rotary(nn.Module):
    """Llama's rotary embedding: forward(x, position_ids [B, T]) -> cos, sin [B, T, head_dim] in x's dtype."""

    def __init__(self, head_dim, theta, device):
        super().__init__()
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x, position_ids):
        f = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat([f, f], -1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def apply_rope(q, k, cos, sin):
    """q [B, hq, T, d], k [B, hkv, T, d], cos/sin [B, T, d] (transformers' apply_rotary_pos_emb)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class Attention(nn.Module):
    def __init__(self, c, device, dtype):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        d = c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * d, **kw)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * d, **kw)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * d, **kw)
        self.o_proj = nn.Linear(c.num_attention_heads * d, c.hidden_size, **kw)


class MLP(nn.Module):
    def __init__(self, c, device, dtype):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, **kw)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, **kw)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, **kw)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c, device, dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device, dtype)
        self.self_attn = Attention(c, device, dtype)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device, dtype)
        self.mlp = MLP(c, device, dtype)


class Body(nn.Module):
    def __init__(self, c, device, dtype):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, device=device, dtype=dtype)
        self.layers = nn.ModuleList([DecoderLayer(c, device, dtype) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, device, dtype)
        self.rotary_emb = Rotary(c.head_dim, c.rope_theta, device)


class MiniLlama(nn.Module):
    """A Llama decoder with transformers' module names (what engine.Engine reads: model.model.layers[i].self_attn
    .q_proj, ..., model.model.rotary_emb, model.lm_head), built directly on the device with random weights. The
    forward pass is engine.py's."""

    def __init__(self, config, device, dtype):
        super().__init__()
        self.config = config
        self.model = Body(config, device, dtype)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device=device, dtype=dtype)

    def kvtile_apply_rope(self, q, k, cos, sin):  # engine._rope uses it instead of transformers' function
        return apply_rope(q, k, cos, sin)


def model_config(shape, vocab):
    return types.SimpleNamespace(
        num_hidden_layers=shape["layers"], hidden_size=shape["hidden"], num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"], head_dim=shape["head_dim"], intermediate_size=shape["intermediate"],
        vocab_size=vocab, rms_norm_eps=1e-5, rope_theta=500000.0)


def build_model(impl, shape, vocab, dtype, device, max_positions):
    """Random weights on the device: MiniLlama, or transformers' LlamaForCausalLM from a LlamaConfig."""
    if impl == "minimal":
        return MiniLlama(model_config(shape, vocab), device, dtype).eval().requires_grad_(False)
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
                      num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                      num_key_value_heads=shape["kv_heads"], head_dim=shape["head_dim"],
                      max_position_embeddings=max_positions, tie_word_embeddings=False)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters made in the model's dtype, on the device, never on the CPU
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    for p in model.parameters():
        if p.dtype != dtype:
            p.data = p.data.to(dtype)
    return model.eval().requires_grad_(False)


def param_count(shape, vocab):
    """Parameters of MiniLlama for shape (also LlamaForCausalLM's with untied embeddings)."""
    h, d, hq, hkv, inter = shape["hidden"], shape["head_dim"], shape["heads"], shape["kv_heads"], shape["intermediate"]
    per_layer = h * hq * d * 2 + h * hkv * d * 2 + 3 * h * inter + 2 * h
    return shape["layers"] * per_layer + 2 * vocab * h + h


# ------------------------------------------------------------------------------------------------ arguments
def _ints(name, text):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError("%s must be a comma-separated list of integers (got %r)" % (name, text)) from None
    return vals


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results", help="directory of the results (created if missing)")
    ap.add_argument("--tag", default=None, help="GPU tag of the file names (default: from the GPU's name, e.g. h200)")
    ap.add_argument("--budget-gb", type=float, default=60.0, help="KV memory budget of every cache, GB (1e9 bytes)")
    ap.add_argument("--caches", default=",".join(CACHES), help="fp16 and/or kvtile presets, comma-separated")
    ap.add_argument("--prompts", default="16384,65536", help="prompt lengths (tokens), comma-separated")
    ap.add_argument("--gen", type=int, default=128, help="tokens generated per request (its rows hold prompt + gen)")
    ap.add_argument("--mixed", default="", help="prompt lengths of a mixed workload in one page pool (e.g. "
                                                "16384,65536; empty: none)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default: the shape's)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="weights and activations")
    ap.add_argument("--model", choices=["minimal", "hf"], default="minimal",
                    help="minimal: this file's Llama; hf: transformers' LlamaForCausalLM from a LlamaConfig")
    ap.add_argument("--sweep", default="0.125,0.25,0.5,1", help="concurrencies as fractions of the maximum")
    ap.add_argument("--warmup", type=int, default=3, help="untimed decode steps per point (the first captures)")
    ap.add_argument("--steps", type=int, default=12, help="timed decode steps per point")
    ap.add_argument("--parts-iters", type=int, default=5, help="replays timing a step's attention / cache writes")
    ap.add_argument("--serve-steps", type=int, default=32, help="timed steps of continuous batching (0: none)")
    ap.add_argument("--prefill-tokens", type=int, default=32768,
                    help="prompt tokens run through the model per cache and length for the prefill rate "
                         "(at least one request; 0: no prefill measurement)")
    ap.add_argument("--chunk", type=int, default=8192, help="chunked-prefill chunk (multiple of 128)")
    ap.add_argument("--fill-chunk", type=int, default=262144, help="tokens per synthetic-fill call (multiple of 128)")
    ap.add_argument("--profile-steps", type=int, default=2, help="eager steps under torch.profiler (0: none)")
    ap.add_argument("--max-requests", type=int, default=0, help="cap on the concurrency (0: the budget decides)")
    ap.add_argument("--plan-mode", choices=["shared", "per_layer"], default="shared",
                    help="one DecodePlan per step for all layers, or one per layer")
    ap.add_argument("--headroom-gb", type=float, default=6.0,
                    help="free GPU memory kept beyond the caches (activations, prefill scratch, graphs)")
    ap.add_argument("--time-limit", type=float, default=225.0,
                    help="seconds after which no new measurement starts (the results so far are written)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--replot", default=None, metavar="JSON",
                    help="no measurement: rewrite the .md and .png beside a results JSON of this script (no GPU)")
    return ap


def check_args(args):
    """Validates and normalizes args in place (lists parsed); raises ValueError naming the argument."""
    caches = [c.strip() for c in args.caches.split(",") if c.strip()]
    known = ["fp16"] + list(kvtile.PRESETS)
    bad = [c for c in caches if c not in known]
    if not caches or bad:
        raise ValueError("--caches: unknown cache %s (known: %s)" % (", ".join(bad) or "(none given)",
                                                                       ", ".join(known)))
    if len(set(caches)) != len(caches):
        raise ValueError("--caches: a cache is listed twice (%s)" % args.caches)
    args.caches = caches
    args.prompts = _ints("--prompts", args.prompts)
    args.mixed = _ints("--mixed", args.mixed)
    if not args.prompts and not args.mixed:
        raise ValueError("--prompts: give at least one prompt length (or --mixed)")
    for name, vals in (("--prompts", args.prompts), ("--mixed", args.mixed)):
        if any(v < 1 for v in vals):
            raise ValueError("%s: prompt lengths must be >= 1 (got %s)" % (name, vals))
    if args.mixed and len(args.mixed) < 2:
        raise ValueError("--mixed: a mixed workload needs at least two prompt lengths (got %s)" % args.mixed)
    try:
        args.sweep = [float(x) for x in args.sweep.split(",") if x.strip()]
    except ValueError:
        raise ValueError("--sweep must be a comma-separated list of fractions (got %r)" % args.sweep) from None
    if not args.sweep or any(not (0 < f <= 1) for f in args.sweep):
        raise ValueError("--sweep: fractions of the maximum concurrency must be in (0, 1] (got %s)" % args.sweep)
    for name in ("budget_gb", "headroom_gb", "time_limit"):
        v = getattr(args, name)
        if not (math.isfinite(v) and (v > 0 or (name == "headroom_gb" and v == 0))):
            raise ValueError("--%s must be a positive finite number (got %r)" % (name.replace("_", "-"), v))
    for name, lo in (("gen", 1), ("vocab", 2), ("warmup", 1), ("steps", 1), ("parts_iters", 1), ("serve_steps", 0),
                     ("prefill_tokens", 0), ("profile_steps", 0), ("max_requests", 0), ("seed", 0)):
        if getattr(args, name) < lo:
            raise ValueError("--%s must be >= %d (got %d)" % (name.replace("_", "-"), lo, getattr(args, name)))
    if args.layers is not None and args.layers < 1:
        raise ValueError("--layers must be >= 1 (got %d)" % args.layers)
    for name in ("chunk", "fill_chunk"):
        v = getattr(args, name)
        if v < PAGE_ALIGN or v % PAGE_ALIGN:
            raise ValueError("--%s must be a positive multiple of %d, every cache's page size (got %d)"
                             % (name.replace("_", "-"), PAGE_ALIGN, v))
    if args.gen < args.warmup + args.steps:
        raise ValueError("--gen (%d) must be >= --warmup + --steps (%d): a sweep point decodes that many tokens "
                         "into rows of prompt + gen tokens" % (args.gen, args.warmup + args.steps))
    return args


def parse_args(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        check_args(args)
    except ValueError as e:
        ap.error(str(e))
    return args


def shape_of(args):
    s = dict(SHAPES[args.shape])
    if args.layers is not None:
        s["layers"] = args.layers
    s["name"] = args.shape
    return s


# ------------------------------------------------------------------------------------------------ memory accounting
def layer_cache_bytes(cache, rows, max_len, shape, num_pages=None):
    """Device bytes of one layer's cache of `rows` rows of up to max_len tokens, by the package's own accounting:
    PagedCache.bytes_needed for a quantized preset, the nbytes of an Fp16PagedCache built on the meta device
    (nothing allocated) for fp16. num_pages: one shared pool (engine.pooled_cache); otherwise each row owns its
    max_len tokens."""
    kv, d, hq = shape["kv_heads"], shape["head_dim"], shape["heads"]
    if cache == "fp16":
        if num_pages is None:
            return kvtile.Fp16PagedCache(rows, max_len, kv, d, q_heads=hq, device="meta").nbytes
        return pooled_cache("fp16", rows, max_len, kv, d, hq, num_pages, "meta").nbytes
    return kvtile.PagedCache.bytes_needed(rows, max_len, kv, d, q_heads=hq, preset=cache, num_pages=num_pages)


def kv_bytes_per_token(cache, shape):
    """Bytes per token of all layers' pages (the caches' bytes_per_token; tails and workspace are per row)."""
    kv, d, hq = shape["kv_heads"], shape["head_dim"], shape["heads"]
    if cache == "fp16":
        probe = kvtile.Fp16PagedCache(1, 64, kv, d, q_heads=hq, device="meta")
    else:
        probe = kvtile.PagedCache(1, 128, kv, d, q_heads=hq, preset=cache, device="meta")
    return shape["layers"] * probe.bytes_per_token()


def max_requests(cache, tokens, shape, budget, cap=None):
    """The most rows of `tokens` tokens each whose caches (all layers) fit `budget` bytes (0: not even one);
    at most cap when given."""
    def fits(r):
        return shape["layers"] * layer_cache_bytes(cache, r, tokens, shape) <= budget

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):  # doubling: lo fits, hi does not
        lo, hi = hi, hi * 2
        if cap and lo >= cap:
            return cap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return min(lo, cap) if cap else lo


def pool_pages(cache, rows, max_len, shape, budget):
    """The most pages of a shared pool (engine.pooled_cache) whose caches, all layers, with `rows` rows of up to
    max_len tokens fit `budget` bytes (0: none). The bytes are affine in the pages."""
    per_layer = budget / shape["layers"]
    b1 = layer_cache_bytes(cache, rows, max_len, shape, num_pages=1)
    if b1 > per_layer:
        return 0
    page = layer_cache_bytes(cache, rows, max_len, shape, num_pages=2) - b1
    n = int((per_layer - b1) // page) + 1
    while n > 1 and layer_cache_bytes(cache, rows, max_len, shape, num_pages=n) > per_layer:
        n -= 1
    return n


def sweep_points(max_n, fractions, extra=None):
    """Concurrencies of the sweep, largest first: max_n always, max(1, round(f * max_n)) per fraction, and extra
    (the fp16 cache's maximum) when it is below max_n."""
    pts = {max_n} | {max(1, int(round(f * max_n))) for f in fractions}
    if extra and extra < max_n:
        pts.add(extra)
    return sorted(pts, reverse=True)


# ------------------------------------------------------------------------------------------------ measurements
def _mean(xs):
    return sum(xs) / len(xs) if xs else None


def _median(xs):
    s = sorted(xs)
    return (s[len(s) // 2] + s[(len(s) - 1) // 2]) / 2 if s else None


def _sync():
    torch.cuda.synchronize()


def measure_prefill(eng, prompt_len, args, vocab, gen):
    """Real prompts of prompt_len tokens through the model, chunked (engine.PlannedEngine.prefill_chunked), after
    a warm-up prompt of min(prompt_len, 2 chunks) tokens; rows 0.. are reset afterwards."""
    n_req = max(1, args.prefill_tokens // prompt_len)
    dev = eng.device
    warm = torch.randint(0, vocab, (min(prompt_len, 2 * args.chunk),), device=dev, generator=gen)
    eng.prefill_chunked(0, warm, args.chunk)
    times = []
    for i in range(n_req):
        prompt = torch.randint(0, vocab, (prompt_len,), device=dev, generator=gen)
        _sync()
        t0 = time.perf_counter()
        eng.prefill_chunked(i % eng.max_batch, prompt, args.chunk)  # returns the first token: synchronizes
        times.append(time.perf_counter() - t0)
    for r in range(min(n_req, eng.max_batch)):
        eng.lens[r] = 0
    eng.upload()
    total = sum(times)
    return {"requests": n_req, "prompt_tokens": prompt_len, "chunk": args.chunk, "seconds": times,
            "tokens_per_s": n_req * prompt_len / total, "ms_per_request": 1e3 * total / n_req}


def set_rows(eng, n, length):
    """Every row at `length` tokens, rows [0, n) active."""
    eng.lens = [length] * eng.max_batch
    eng.act = [1 if r < n else 0 for r in range(eng.max_batch)]
    eng.upload()
    eng.tokens.zero_()


def measure_decode(eng, n, prompt_len, args):
    """Decode steps of rows [0, n) from prompt_len tokens on: warm-up (the first captures the graph), timed steps
    (wall: plan + replay + reading the tokens on the host, as a server does; GPU: CUDA events around the replay),
    then the step's attention and cache writes timed alone (PlannedEngine.time_parts)."""
    set_rows(eng, n, prompt_len)
    for _ in range(args.warmup):
        eng.step(n)
        eng.tokens[:n].copy_(eng.next_tokens[:n])
    _sync()
    wall, gpu = [], []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(args.steps):
        t0 = time.perf_counter()
        eng.step(n, events=(e0, e1))
        eng.next_tokens[:n].tolist()  # synchronizes: the host has the step's tokens
        wall.append(time.perf_counter() - t0)
        gpu.append(e0.elapsed_time(e1))
        eng.tokens[:n].copy_(eng.next_tokens[:n])
    parts = eng.time_parts(n, args.parts_iters)
    step_gpu = _mean(gpu)
    return {"requests": n, "context_tokens": prompt_len + args.warmup, "tokens_per_s": n / _mean(wall),
            "tpot_ms": 1e3 * _mean(wall), "tpot_ms_median": 1e3 * _median(wall), "step_gpu_ms": step_gpu,
            "attention_ms": parts["attention_ms"], "cache_write_ms": parts["cache_write_ms"],
            "attention_share": parts["attention_ms"] / step_gpu,
            "cache_write_share": parts["cache_write_ms"] / step_gpu}


def serve(eng, rows, next_prompt, args, src):
    """Continuous batching over rows [0, rows): the rows start with requests at staggered progress (request i has
    generated (i * gen) // rows of its gen tokens); every step, requests that have generated gen tokens leave
    (release: their pages back to the pool) and queued requests (prompt lengths from next_prompt()) are admitted,
    first come first served, while a row and the pages of their whole length are free; an admitted request's
    prompt is filled synthetically (its cost: admission_fill_ms; the real prefill rate is measured separately).
    The first --warmup steps are untimed."""
    gen = args.gen
    eng.lens = [0] * eng.max_batch
    eng.act = [0] * eng.max_batch
    rem = [0] * rows
    pending = next_prompt()
    fill = {}
    for r in range(rows):
        if not eng.admit(r, pending + gen):
            break
        off = (r * gen) // rows
        fill[r] = pending + off
        rem[r] = gen - off
        eng.act[r] = 1
        pending = next_prompt()
    if not fill:
        raise RuntimeError("not one request fits the pool")
    eng.fill_synthetic(fill, *src)
    eng.upload()
    eng.tokens.zero_()
    wall, live, admitted, finished, admit_s = [], [], 0, 0, 0.0
    for s in range(args.warmup + args.serve_steps):
        n_live = sum(eng.act[:rows])
        _sync()
        t0 = time.perf_counter()
        eng.step(rows)
        eng.next_tokens[:rows].tolist()
        dt = time.perf_counter() - t0
        eng.tokens[:rows].copy_(eng.next_tokens[:rows])
        timed = s >= args.warmup
        if timed:
            wall.append(dt)
            live.append(n_live)
        done = []
        for r in range(rows):
            if eng.act[r]:
                rem[r] -= 1
                if rem[r] == 0:
                    done.append(r)
        t0 = time.perf_counter()
        for r in done:
            eng.release(r)
        finished += len(done) if timed else 0
        free = [r for r in range(rows) if not eng.act[r]]
        fill = {}
        for r in free:
            if not eng.admit(r, pending + gen):
                break  # first come first served: the head of the queue waits for pages
            fill[r] = pending
            rem[r] = gen
            pending = next_prompt()
        if fill:
            eng.fill_synthetic(fill, *src)
            for r in fill:
                eng.act[r] = 1
        eng.upload()
        _sync()
        if timed:
            admit_s += time.perf_counter() - t0
            admitted += len(fill)
    tokens = sum(live)
    return {"rows": rows, "steps": args.serve_steps, "tokens": tokens, "mean_live": _mean(live),
            "min_live": min(live) if live else None, "max_live": max(live) if live else None,
            "decode_tokens_per_s": tokens / sum(wall) if wall else None, "tpot_ms": 1e3 * _mean(wall) if wall else None,
            "finished": finished, "admitted": admitted,
            "admission_fill_ms": 1e3 * admit_s / admitted if admitted else None}


_CATEGORIES = (("attention", ("decode_kernel", "combine_kernel")),
               ("cache_write", ("append_kernel", "index_put", "index_elementwise")),
               ("gemm", ("gemm", "gemv", "cutlass", "nvjet", "xmma", "cublas", "splitk")))


def kernel_category(name):
    """attention (kvtile's decode and merge kernels), cache_write (append, the fp16 cache's index_put), gemm,
    or other (norms, rotary, activations, embedding, copies)."""
    low = name.lower()
    for cat, keys in _CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def summarize_kernels(events, steps, top=12):
    """events: (name, microseconds) of device kernels over `steps` steps -> per-step ms, shares, top kernels."""
    by_name, by_cat = {}, {}
    for name, us in events:
        t = by_name.setdefault(name, [0.0, 0])
        t[0] += us
        t[1] += 1
        c = kernel_category(name)
        by_cat[c] = by_cat.get(c, 0.0) + us
    total = sum(by_cat.values())
    if total <= 0:
        return {"kernel_ms_per_step": 0.0, "share": {}, "top": []}
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    return {"kernel_ms_per_step": total / steps / 1e3,
            "share": {c: by_cat.get(c, 0.0) / total for c in ("attention", "cache_write", "gemm", "other")},
            "top": [{"name": n[:160], "category": kernel_category(n), "ms_per_step": v[0] / steps / 1e3,
                     "calls_per_step": v[1] / steps, "share": v[0] / total} for n, v in ranked]}


def profile_steps(eng, n, prompt_len, args):
    """Kernel time of eager decode steps of rows [0, n) (torch.profiler; the graph replays hide the kernels)."""
    from torch.profiler import ProfilerActivity, profile

    set_rows(eng, n, prompt_len)
    eng.step_eager(n)  # warm
    _sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.profile_steps):
            eng.step_eager(n)
            eng.tokens[:n].copy_(eng.next_tokens[:n])
        _sync()
    events = []
    for e in prof.events():
        if "CUDA" not in str(getattr(e, "device_type", "")):
            continue
        tr = getattr(e, "time_range", None)
        us = tr.elapsed_us() if tr is not None else getattr(e, "device_time", getattr(e, "cuda_time", 0.0))
        events.append((e.name, float(us)))
    out = summarize_kernels(events, args.profile_steps)
    out["requests"] = n
    out["steps"] = args.profile_steps
    return out


def _part(fn, *a):
    """fn(*a), or {"error": ...} when it fails (a failed prefill, serving or profile keeps the other measurements;
    a broken CUDA context is re-raised)."""
    try:
        return fn(*a)
    except Exception as e:
        msg = "%s: %s" % (type(e).__name__, e)
    log("  failed: %s" % msg)
    if _fatal_cuda():
        raise RuntimeError(msg)
    _free_gpu()
    return {"error": msg}


def _free_gpu():
    gc.collect()
    if not _fatal_cuda():
        torch.cuda.empty_cache()


def _check_free(need, what):
    free, total = torch.cuda.mem_get_info()
    if need > free:
        raise MemoryError("%s needs %.1f GB of GPU memory, %.1f GB are free (of %.1f GB): lower --budget-gb or "
                          "--headroom-gb" % (what, need / GB, free / GB, total / GB))


def run_uniform(model, args, shape, cache, prompt_len, src, fp16_max, budget, vocab, gen):
    """Every measurement of one cache at one prompt length; returns its record (error: the message of a failure,
    the measurements made before it kept)."""
    tokens = prompt_len + args.gen
    rec = {"mode": "uniform", "cache": cache, "prompt": prompt_len, "gen": args.gen, "sweep": []}
    t_start = time.perf_counter()
    n = max_requests(cache, tokens, shape, budget, args.max_requests or None)
    cap = {"max_requests": n, "request_tokens": tokens, "kv_bytes_per_token": kv_bytes_per_token(cache, shape),
           "budget_bytes": budget}
    rec["capacity"] = cap
    if n == 0:
        rec["error"] = "the budget of %.1f GB holds no request of %d tokens" % (budget / GB, tokens)
        return rec
    cap["cache_bytes_accounted"] = shape["layers"] * layer_cache_bytes(cache, n, tokens, shape)
    log("  [%s %s] %d requests of %d tokens: %.2f GB accounted" % (cache, _k(prompt_len), n, tokens,
                                                                     cap["cache_bytes_accounted"] / GB))
    _check_free(cap["cache_bytes_accounted"] + args.headroom_gb * GB, "%s with %d requests" % (cache, n))
    eng = PlannedEngine(model, cache, max_batch=n, max_len=tokens, plan_mode=args.plan_mode)
    try:
        cap["cache_bytes_allocated"] = eng.cache_bytes()
        cap["workspace_bytes"] = sum(c.workspace.numel() for c in eng.caches)  # in the above (the caches' own)
        if args.prefill_tokens:
            rec["prefill"] = _part(measure_prefill, eng, prompt_len, args, vocab, gen)
            if "error" not in rec["prefill"]:
                log("  [%s %s] prefill %.0f tokens/s (%d requests, %.0f ms each)" % (
                    cache, _k(prompt_len), rec["prefill"]["tokens_per_s"], rec["prefill"]["requests"],
                    rec["prefill"]["ms_per_request"]))
        t0 = time.perf_counter()
        eng.fill_synthetic({r: prompt_len for r in range(n)}, *src)
        _sync()
        rec["fill_s"] = time.perf_counter() - t0
        set_rows(eng, n, prompt_len)
        err = eng.check_plan(n)
        rec["plan_check"] = {"rel_err": err, "mode": eng.plan_mode}
        if not err <= PLAN_CHECK_TOL and eng.plan_mode == "shared":
            log("  [%s] the shared plan differs from the one-call decode by %.3g: one plan per layer instead"
                % (cache, err))
            eng.close_plans()
            eng.plan_mode = "per_layer"
            rec["plan_check"]["rel_err_per_layer"] = eng.check_plan(n)
            rec["plan_check"]["mode"] = "per_layer"
        for m in sweep_points(n, args.sweep, fp16_max):
            p = measure_decode(eng, m, prompt_len, args)
            rec["sweep"].append(p)
            log("  [%s %s] %4d requests: %8.0f tokens/s, TPOT %.2f ms, attention %.0f%% of %.2f ms" % (
                cache, _k(prompt_len), m, p["tokens_per_s"], p["tpot_ms"], 100 * p["attention_share"],
                p["step_gpu_ms"]))
        if args.serve_steps:
            rec["serve"] = _part(serve, eng, n, lambda: prompt_len, args, src)
            if "error" not in rec["serve"]:
                log("  [%s %s] serving: %.0f tokens/s, %d admitted, %.1f live" % (
                    cache, _k(prompt_len), rec["serve"]["decode_tokens_per_s"], rec["serve"]["admitted"],
                    rec["serve"]["mean_live"]))
        if args.profile_steps:
            rec["profile"] = _part(profile_steps, eng, n, prompt_len, args)
    except Exception as e:  # the measurements made before the failure are kept
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        eng.close()
        del eng
        _free_gpu()
        rec["seconds"] = time.perf_counter() - t_start
    return rec


def run_mixed(model, args, shape, cache, src, budget):
    """The mixed workload on one cache: a pool of pages from the budget, rows for requests of the mean length."""
    mix = args.mixed
    mean_tokens = int(round(sum(mix) / len(mix))) + args.gen
    max_len = max(mix) + args.gen
    rec = {"mode": "mixed", "cache": cache, "prompts": mix, "gen": args.gen}
    t_start = time.perf_counter()
    rows = max_requests(cache, mean_tokens, shape, budget, args.max_requests or None)
    pages = pool_pages(cache, rows, max_len, shape, budget) if rows else 0
    page_tokens = kvtile.Fp16PagedCache.page_tokens if cache == "fp16" else kvtile.preset_info(
        cache, shape["head_dim"])["tile_tokens"]
    rec["capacity"] = {"rows": rows, "pool_pages": pages, "pool_tokens": pages * page_tokens, "budget_bytes": budget}
    if not rows or pages * page_tokens < max_len:
        rec["error"] = "the budget of %.1f GB holds no pool for a request of %d tokens" % (budget / GB, max_len)
        return rec
    rec["capacity"]["cache_bytes_accounted"] = shape["layers"] * layer_cache_bytes(cache, rows, max_len, shape, pages)
    _check_free(rec["capacity"]["cache_bytes_accounted"] + args.headroom_gb * GB, "%s pool" % cache)
    eng = PlannedEngine(model, cache, max_batch=rows, max_len=max_len, num_pages=pages, plan_mode=args.plan_mode)
    try:
        rec["capacity"]["cache_bytes_allocated"] = eng.cache_bytes()
        order = iter(range(1 << 62))
        rec["serve"] = serve(eng, rows, lambda: mix[next(order) % len(mix)], args, src)
        log("  [%s mixed] %d rows, pool %d tokens: %.0f tokens/s, %.1f live, %d admitted" % (
            cache, rows, pages * page_tokens, rec["serve"]["decode_tokens_per_s"], rec["serve"]["mean_live"],
            rec["serve"]["admitted"]))
    except Exception as e:
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        eng.close()
        del eng
        _free_gpu()
        rec["seconds"] = time.perf_counter() - t_start
    return rec


# ------------------------------------------------------------------------------------------------ the report
def gpu_tag(name):
    """'NVIDIA H200' -> 'h200'; otherwise the name in lower case with dashes."""
    m = re.search(r"\b([A-Z]+\d+[A-Za-z]*)\b", name.replace("NVIDIA", ""))
    return m.group(1).lower() if m else (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu")


def _fmt(v, spec="%.0f"):
    return "-" if v is None else spec % v


def _ratio(a, b):
    return None if a is None or not b else a / b


def _k(n):
    return "%dK" % (n // 1024) if n % 1024 == 0 else str(n)


def _at(rec, n):
    for p in rec.get("sweep", []):
        if p["requests"] == n:
            return p
    return None


def table_lines(results):
    """The Markdown of the results (without the header)."""
    uni = [r for r in results["configs"] if r.get("mode") == "uniform"]
    base = {r["prompt"]: r for r in uni if r["cache"] == "fp16" and r.get("sweep")}
    out = [] if not uni else ["## At the budget, per cache and prompt length", "",
           "| prompt | cache | KV bytes/token | max requests | vs fp16 | decode tokens/s at max | vs fp16 | TPOT ms | "
           "step GPU ms | attention share | tokens/s at fp16's max | prefill tokens/s | serving tokens/s |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in uni:
        cap = r.get("capacity", {})
        n = cap.get("max_requests")
        top = _at(r, n) if n else None
        b = base.get(r["prompt"])
        bn = b["capacity"]["max_requests"] if b else None
        btop = _at(b, bn) if b else None
        same = _at(r, bn) if bn else None
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            _k(r["prompt"]), r["cache"], _fmt(cap.get("kv_bytes_per_token")), _fmt(n),
            _fmt(_ratio(n, bn), "%.2fx"), _fmt(top and top["tokens_per_s"]),
            _fmt(_ratio(top and top["tokens_per_s"], btop and btop["tokens_per_s"]), "%.2fx"),
            _fmt(top and top["tpot_ms"], "%.2f"), _fmt(top and top["step_gpu_ms"], "%.2f"),
            _fmt(top and 100 * top["attention_share"], "%.0f%%"), _fmt(same and same["tokens_per_s"]),
            _fmt(r.get("prefill", {}).get("tokens_per_s")), _fmt(r.get("serve", {}).get("decode_tokens_per_s"))))
    out += [] if not uni else [
        "", "## Decode sweep (tokens/s against concurrent requests)", "",
        "| prompt | cache | requests | tokens/s | TPOT ms | step GPU ms | attention ms | cache write ms | "
        "attention share |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in uni:
        for p in r.get("sweep", []):
            out.append("| %s | %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %.0f%% |" % (
                _k(r["prompt"]), r["cache"], p["requests"], p["tokens_per_s"], p["tpot_ms"], p["step_gpu_ms"],
                p["attention_ms"], p["cache_write_ms"], 100 * p["attention_share"]))
    serves = [r for r in results["configs"] if r.get("serve") and "error" not in r["serve"]]
    if serves:
        out += ["", "## Continuous batching (requests leave after their tokens, new ones join the freed memory)", "",
                "| workload | cache | rows | steps | mean live requests | finished / admitted | decode tokens/s | "
                "TPOT ms | admission fill ms |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in serves:
            s = r["serve"]
            wl = _k(r["prompt"]) if r["mode"] == "uniform" else "mixed " + "/".join(_k(p) for p in r["prompts"])
            out.append("| %s | %s | %d | %d | %.1f | %d / %d | %s | %s | %s |" % (
                wl, r["cache"], s["rows"], s["steps"], s["mean_live"] or 0, s["finished"], s["admitted"],
                _fmt(s["decode_tokens_per_s"]), _fmt(s["tpot_ms"], "%.2f"), _fmt(s["admission_fill_ms"], "%.1f")))
    profs = [r for r in uni if r.get("profile") and r["profile"].get("top")]
    if profs:
        out += ["", "## Where a step's kernel time goes (torch.profiler, eager steps at the maximum)", "",
                "| prompt | cache | requests | kernel ms / step | attention | cache write | GEMM | other | "
                "largest kernels |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in profs:
            p = r["profile"]
            sh = p["share"]
            top = "; ".join("%s %.0f%%" % (t["name"][:48], 100 * t["share"]) for t in p["top"][:3])
            out.append("| %s | %s | %d | %.2f | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %s |" % (
                _k(r["prompt"]), r["cache"], p["requests"], p["kernel_ms_per_step"], 100 * sh.get("attention", 0),
                100 * sh.get("cache_write", 0), 100 * sh.get("gemm", 0), 100 * sh.get("other", 0),
                top.replace("|", "/")))
    mixed = [r for r in results["configs"] if r.get("mode") == "mixed" and r.get("capacity")]
    if mixed:
        out += ["", "## Mixed workload: one page pool per cache", "",
                "| cache | prompts | rows | pool tokens | GB accounted | mean live requests | vs fp16 | "
                "decode tokens/s | vs fp16 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        mbase = next((r.get("serve") for r in mixed if r["cache"] == "fp16"), None) or {}
        for r in mixed:
            c, sv = r["capacity"], r.get("serve") or {}
            out.append("| %s | %s | %d | %d | %s | %s | %s | %s | %s |" % (
                r["cache"], "/".join(_k(p) for p in r["prompts"]), c["rows"], c["pool_tokens"],
                _fmt(c.get("cache_bytes_accounted") and c["cache_bytes_accounted"] / GB, "%.1f"),
                _fmt(sv.get("mean_live"), "%.1f"), _fmt(_ratio(sv.get("mean_live"), mbase.get("mean_live")), "%.2fx"),
                _fmt(sv.get("decode_tokens_per_s")),
                _fmt(_ratio(sv.get("decode_tokens_per_s"), mbase.get("decode_tokens_per_s")), "%.2fx")))
    errs = []
    for r in results["configs"]:
        where = "%s %s" % (r["cache"], _k(r["prompt"]) if "prompt" in r else "mixed")
        errs += ["- %s: %s" % (where, r["error"])] if r.get("error") else []
        errs += ["- %s, %s: %s" % (where, part, r[part]["error"]) for part in ("prefill", "serve", "profile")
                 if isinstance(r.get(part), dict) and "error" in r[part]]
    if errs or results.get("errors"):
        out += ["", "## Errors", ""] + errs + ["- %s" % e for e in results.get("errors", [])]
    out += ["", "## Columns", ""] + COLUMN_NOTES
    return out


COLUMN_NOTES = [
    "- **KV bytes/token**: all layers' page bytes per token (`bytes_per_token()` of the cache; the fp16 tails of "
    "a quantized cache and the decode workspace are per-row costs, counted in max requests).",
    "- **max requests**: the most requests of prompt + gen tokens whose caches fit the budget (all layers: pages, "
    "page tables, lengths, tails, workspace), from `PagedCache.bytes_needed` and `Fp16PagedCache(..., "
    "device=\"meta\").nbytes`; **vs fp16**: against the fp16 cache at the same prompt length.",
    "- **decode tokens/s at max**: requests x steps / wall time of the steps at that concurrency (each step: plan "
    "on the host, CUDA-graph replay, the tokens read back on the host); **TPOT**: wall ms per step, the time per "
    "output token of every request; **step GPU ms**: CUDA events around the graph's replay.",
    "- **attention share**: GPU time of the step's attention alone (every layer's `DecodePlan.run`, replayed in "
    "its own graph) over step GPU ms; the rest is the model (GEMMs, norms, rotary) and the cache writes.",
    "- **tokens/s at fp16's max**: the decode rate at the fp16 cache's maximum concurrency (equal concurrency).",
    "- **prefill tokens/s**: real prompts through the model in chunks, each chunk attending the earlier ones read "
    "back from the cache (dequantized pages for a quantized cache), the chunk written into the cache.",
    "- **serving tokens/s**: continuous batching at the maximum: requests at staggered progress leave after gen "
    "tokens and new ones are admitted into the freed memory; tokens generated / wall time of the decode steps "
    "(admission fills, synthetic, excluded: admission fill ms).",
    "- Decode timings run on caches filled with synthetic keys and values by the caches' own writers "
    "(`kvtile.prefill`, `Fp16PagedCache.write`): speed does not depend on the values. Weights are random.",
]


def header_lines(results):
    m = results["meta"]
    s = results["shape"]
    lines = ["# Capacity and decode throughput at a fixed KV memory budget", "",
             "- Date: %s. GPU: %s (%.0f GB). torch %s, CUDA %s%s. kvtile %s." % (
                 m["date"], m["gpu"], (m.get("gpu_memory_bytes") or 0) / GB, m["torch"], m["cuda"],
                 ", transformers %s" % m["transformers"] if m.get("transformers") else "", m.get("commit") or "?"),
             "- Command: `%s`" % m["command"],
             "- Model: %s shapes, %d layers, hidden %d, %d query heads, %d KV heads, head_dim %d, intermediate %d, "
             "vocab %d, %s, random weights (%s; %.1f GB)." % (
                 s["name"], s["layers"], s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["intermediate"],
                 m["vocab"], m["dtype"], m["model"], (m.get("weight_bytes") or 0) / GB),
             "- KV budget: %.1f GB for every cache; each request holds its prompt + %d generated tokens." % (
                 results["budget_bytes"] / GB, m["args"]["gen"]),
             "- Decode caches filled with synthetic values by the package's own writers (speed does not depend on "
             "the values); prefill measured through the model.", ""]
    return lines


def plot(results, path):
    """tokens/s against concurrent requests, one panel per prompt length, one line per cache -> path (PNG).
    matplotlib if importable, otherwise gnuplot if on PATH; returns the tool used or None (skipped)."""
    panels = {}
    for r in results["configs"]:
        if r.get("mode") == "uniform" and r.get("sweep"):
            pts = sorted((p["requests"], p["tokens_per_s"]) for p in r["sweep"])
            panels.setdefault(r["prompt"], []).append((r["cache"], pts))
    if not panels:
        log("picture: no decode measurements to draw")
        return None
    title = "%s, %.0f GB KV budget, %s" % (results["shape"]["name"], results["budget_bytes"] / GB,
                                           results["meta"]["gpu"])
    prompts = sorted(panels)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        fig, axes = plt.subplots(1, len(prompts), figsize=(6 * len(prompts), 4.5), squeeze=False)
        for ax, p in zip(axes[0], prompts):
            for cache, pts in panels[p]:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=cache)
            ax.set_title("%s-token prompts" % _k(p))
            ax.set_xlabel("concurrent requests")
            ax.set_ylabel("decode tokens/s")
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return "matplotlib"
    gp = shutil.which("gnuplot")
    if gp is None:
        log("picture skipped: neither matplotlib nor gnuplot is available")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, p in enumerate(prompts):
            series = []
            for j, (cache, pts) in enumerate(panels[p]):
                dat = os.path.join(tmp, "p%d_%d.dat" % (i, j))
                with open(dat, "w") as f:
                    f.write("".join("%d %.3f\n" % xy for xy in pts))
                series.append("'%s' using 1:2 with linespoints pt 7 title '%s'" % (dat, cache))
            plots.append("set title '%s-token prompts'\nplot %s\n" % (_k(p), ", ".join(series)))
        body = ("set output '%s'\nset multiplot layout 1,%d title '%s'\nset xlabel 'concurrent requests'\n"
                "set ylabel 'decode tokens/s'\nset grid\nset key top left\nset yrange [0:*]\n%sunset multiplot\n"
                % (path.replace("'", ""), len(prompts), title.replace("'", ""), "".join(plots)))
        for term in ("pngcairo noenhanced size %d,480" % (600 * len(prompts)),
                     "png noenhanced size %d,480" % (600 * len(prompts))):
            script = os.path.join(tmp, "plot.gp")
            with open(script, "w") as f:
                f.write("set terminal %s\n%s" % (term, body))
            r = subprocess.run([gp, script], capture_output=True, text=True, timeout=60)
            if r.returncode == 0 and os.path.isfile(path) and os.path.getsize(path) > 0:
                return "gnuplot"
        log("picture skipped: gnuplot failed (%s)" % r.stderr.strip()[:300])
    return None


def write_report(out_dir, name, results, picture=True):
    """<out_dir>/<name>.json and .md (and .png when picture and a plotting tool is there); returns the paths
    written."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    paths = []
    if picture:
        tool = plot(results, base + ".png")
        results["meta"]["picture"] = tool
        if tool:
            paths.append(base + ".png")
    lines = header_lines(results)
    if results["meta"].get("picture"):
        lines += ["![decode tokens/s against concurrent requests](%s.png)" % name, ""]
    with open(base + ".json", "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines + table_lines(results)) + "\n")
    return [base + ".json", base + ".md"] + paths


def _commit():
    """The source revision of the results: KVTILE_SOURCE_REV when set (a copy of the tree whose .git is not its
    own), else git rev-parse of this checkout."""
    if os.environ.get("KVTILE_SOURCE_REV"):
        return os.environ["KVTILE_SOURCE_REV"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _fatal_cuda():
    """True when the CUDA context is broken (a later measurement cannot run)."""
    try:
        torch.cuda.synchronize()
        return False
    except Exception:
        return True


# ------------------------------------------------------------------------------------------------ main
def replot(path):
    """The .md and .png of a results JSON written by this script, beside it."""
    with open(path) as f:
        results = json.load(f)
    name = os.path.basename(path)[:-len(".json")] if path.endswith(".json") else os.path.basename(path)
    return write_report(os.path.dirname(os.path.abspath(path)), name, results, picture=True)


def main(argv=None):
    args = parse_args(argv)
    if args.replot:
        log("written: %s" % ", ".join(replot(args.replot)))
        return 0
    if not (torch.cuda.is_available() and kvtile.has_cuda()):
        log("capacity_bench: needs a CUDA GPU and kvtile built with CUDA (torch.cuda.is_available()=%s, "
            "kvtile.has_cuda()=%s)" % (torch.cuda.is_available(), kvtile.has_cuda()))
        return 2
    t_start = time.perf_counter()
    shape = shape_of(args)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    dev = torch.device(DEVICE)
    budget = args.budget_gb * GB
    free0, total = torch.cuda.mem_get_info()
    try:
        transformers_version = __import__("transformers").__version__
    except ImportError:
        transformers_version = None
    meta = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "gpu": torch.cuda.get_device_name(),
            "gpu_memory_bytes": total, "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers_version, "commit": _commit(),
            "command": " ".join(["python3"] + (sys.argv if argv is None else [sys.argv[0]] + list(argv))),
            "args": vars(args), "vocab": args.vocab, "dtype": args.dtype, "model": args.model}
    name = "%s-%s-capacity" % (meta["date"], args.tag or gpu_tag(meta["gpu"]))
    results = {"meta": meta, "shape": shape, "budget_bytes": budget, "configs": [], "errors": []}
    weights = param_count(shape, args.vocab) * torch.tensor([], dtype=dtype).element_size()
    fill_bytes = 2 * args.fill_chunk * shape["kv_heads"] * shape["head_dim"] * 2
    need = weights + budget + fill_bytes + args.headroom_gb * GB
    log("capacity_bench: %s, %s; %d layers; budget %.1f GB; weights %.1f GB; %.1f of %.1f GB free" % (
        meta["gpu"], shape["name"], shape["layers"], budget / GB, weights / GB, free0 / GB, total / GB))
    if need > free0:
        log("capacity_bench: weights %.1f + budget %.1f + fill buffers %.1f + headroom %.1f GB exceed the %.1f GB "
            "free: lower --budget-gb, --layers or --headroom-gb" % (weights / GB, budget / GB, fill_bytes / GB,
                                                                   args.headroom_gb, free0 / GB))
        return 2
    torch.manual_seed(args.seed)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    status = 0
    model = src = None
    try:
        t0 = time.perf_counter()
        model = build_model(args.model, shape, args.vocab, dtype, dev, max(args.prompts + args.mixed) + args.gen)
        _sync()
        meta["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        log("model built in %.1f s (%.1f GB)" % (time.perf_counter() - t0, meta["weight_bytes"] / GB))
        kv, d = shape["kv_heads"], shape["head_dim"]
        src = (torch.randn(args.fill_chunk, kv, d, device=dev, dtype=dtype, generator=gen),
               torch.randn(args.fill_chunk, kv, d, device=dev, dtype=dtype, generator=gen))
        jobs = [("uniform", p, c) for p in args.prompts for c in args.caches]
        jobs += [("mixed", None, c) for c in args.caches] if args.mixed else []
        fp16_max = {}
        for mode, p, cache in jobs:
            elapsed = time.perf_counter() - t_start
            label = "%s %s" % (cache, _k(p) if p else "mixed " + "/".join(_k(x) for x in args.mixed))
            if elapsed > args.time_limit:
                results["errors"].append("%s not run: --time-limit %.0f s reached" % (label, args.time_limit))
                continue
            log("[%5.0f s] %s" % (elapsed, label))
            try:
                if mode == "uniform":
                    rec = run_uniform(model, args, shape, cache, p, src, fp16_max.get(p), budget, args.vocab, gen)
                    if cache == "fp16" and rec.get("sweep"):
                        fp16_max[p] = rec["capacity"]["max_requests"]
                else:
                    rec = run_mixed(model, args, shape, cache, src, budget)
            except Exception as e:  # one failed measurement keeps the others
                rec = {"mode": mode, "cache": cache, "error": "%s: %s" % (type(e).__name__, e)}
                if p:
                    rec["prompt"] = p
                else:
                    rec["prompts"] = args.mixed
                status = 1
                log("  failed: %s" % rec["error"])
            if rec.get("error"):
                status = 1
                log("  error: %s" % rec["error"])
            results["configs"].append(rec)
            write_report(args.out, name, results, picture=False)
            if rec.get("error") and _fatal_cuda():
                results["errors"].append("the CUDA context failed: the remaining measurements were not run")
                break
    except Exception as e:
        results["errors"].append("%s: %s" % (type(e).__name__, e))
        status = 1
        log("capacity_bench: %s: %s" % (type(e).__name__, e))
    finally:
        results["meta"]["seconds"] = time.perf_counter() - t_start
        paths = write_report(args.out, name, results, picture=True)
        del model, src
        _free_gpu()
    log("\n".join(header_lines(results) + table_lines(results)[:4 + len(results["configs"])]))
    log("written: %s (%.0f s)" % (", ".join(paths), time.perf_counter() - t_start))
    return status


if __name__ == "__main__":
    sys.exit(main())
