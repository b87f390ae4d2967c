# examples/torch/capacity_bench.py (issue 33): its pure-Python parts on CPU (argument checks, the budget ->
# max requests arithmetic against the package's memory accounting, the page pool, the report writer with
# fake measurements, the model's shapes), and a short GPU run that skips without a GPU.
import json
import math
import os
import struct
import sys

import pytest
import torch

import kvtile

from conftest import requires_gpu

_examples = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "examples", "torch")
sys.path.insert(0, _examples)

import capacity_bench as cb  # noqa: E402
import engine  # noqa: E402

SHAPE = dict(cb.SHAPES["llama3-8b"], name="llama3-8b")
BUDGET = 60e9


def accounted(cache, rows, tokens, shape=SHAPE):
    """One layer's bytes, computed here from the package's objects and formulas (not through capacity_bench)."""
    kv, d, hq = shape["kv_heads"], shape["head_dim"], shape["heads"]
    if cache == "fp16":
        return kvtile.Fp16PagedCache(rows, tokens, kv, d, q_heads=hq, device="cpu").nbytes
    return kvtile.PagedCache.bytes_needed(rows, tokens, kv, d, q_heads=hq, preset=cache)


# ---- arguments


def test_defaults():
    a = cb.parse_args([])
    assert a.caches == ["fp16", "k4v4_g128", "k4v2_g128", "k2v2_g128"]
    assert a.prompts == [16384, 65536] and a.mixed == [] and a.budget_gb == 60.0
    assert a.sweep == [0.125, 0.25, 0.5, 1.0]
    assert cb.shape_of(a)["layers"] == 32 and cb.shape_of(cb.parse_args(["--layers", "4"]))["layers"] == 4


@pytest.mark.parametrize("argv,message", [
    (["--caches", "fp16,k3v3_g128"], "unknown cache k3v3_g128"),
    (["--caches", "fp16,fp16"], "listed twice"),
    (["--caches", ","], "unknown cache"),
    (["--prompts", "0"], "must be >= 1"),
    (["--prompts", "16k"], "comma-separated list of integers"),
    (["--prompts", ""], "at least one prompt length"),
    (["--mixed", "16384"], "at least two prompt lengths"),
    (["--chunk", "100"], "multiple of 128"),
    (["--fill-chunk", "0"], "multiple of 128"),
    (["--sweep", "0"], "in (0, 1]"),
    (["--sweep", "0.5,1.5"], "in (0, 1]"),
    (["--sweep", "half"], "fractions"),
    (["--gen", "8", "--steps", "12"], "--gen (8) must be >= --warmup + --steps (15)"),
    (["--warmup", "0"], "--warmup must be >= 1"),
    (["--budget-gb", "-1"], "--budget-gb must be a positive finite number"),
    (["--budget-gb", "nan"], "--budget-gb must be a positive finite number"),
    (["--time-limit", "0"], "--time-limit must be a positive"),
    (["--layers", "0"], "--layers must be >= 1"),
    (["--serve-steps", "-1"], "--serve-steps must be >= 0"),
])
def test_bad_arguments(argv, message):
    args = cb.build_parser().parse_args(argv)
    with pytest.raises(ValueError) as e:
        cb.check_args(args)
    assert message in str(e.value)


def test_bad_arguments_exit_with_the_message(capsys):
    with pytest.raises(SystemExit) as e:
        cb.main(["--chunk", "100"])
    assert e.value.code == 2
    assert "--chunk must be a positive multiple of 128" in capsys.readouterr().err


# ---- budget -> max requests


@pytest.mark.parametrize("cache", ["fp16", "k4v4_g128", "k4v2_g128", "k2v2_g128"])
@pytest.mark.parametrize("prompt", [16384, 65536])
def test_max_requests_is_what_the_budget_holds(cache, prompt):
    tokens = prompt + 128
    n = cb.max_requests(cache, tokens, SHAPE, BUDGET)
    L = SHAPE["layers"]
    assert n >= 1
    assert L * accounted(cache, n, tokens) <= BUDGET < L * accounted(cache, n + 1, tokens)
    assert cb.layer_cache_bytes(cache, n, tokens, SHAPE) == accounted(cache, n, tokens)
    # pages alone bound it from above; per-row costs (tails, tables) take at most a few percent at these lengths
    per_token = cb.kv_bytes_per_token(cache, SHAPE)
    assert n <= BUDGET / (per_token * tokens) < n + 1 + 0.06 * n


def test_capacity_ratios_follow_the_bits():
    """At 16K tokens per request the quantized caches hold what their bits promise, less their fp16 tails."""
    n = {c: cb.max_requests(c, 16384 + 128, SHAPE, BUDGET) for c in cb.CACHES}
    assert n["fp16"] == 27  # 60e9 / (16512 tokens x 32 layers x 4096 bytes) = 27.7
    assert 4.6 < n["k4v2_g128"] / n["fp16"] < 4.92
    assert 3.6 < n["k4v4_g128"] / n["fp16"] < 3.77
    assert 6.5 < n["k2v2_g128"] / n["fp16"] < 7.1
    assert cb.kv_bytes_per_token("fp16", SHAPE) == 32 * 8 * 128 * 2 * 2


def test_max_requests_limits():
    assert cb.max_requests("k4v2_g128", 65536, SHAPE, 1e6) == 0  # not one request
    assert cb.max_requests("k4v2_g128", 16384, SHAPE, BUDGET, cap=10) == 10
    small = dict(SHAPE, layers=2)
    assert cb.max_requests("fp16", 1024, small, BUDGET, cap=7) == 7


def test_sweep_points():
    assert cb.sweep_points(131, [0.125, 0.25, 0.5, 1.0], 27) == [131, 66, 33, 27, 16]
    assert cb.sweep_points(6, [0.125, 0.5], None) == [6, 3, 1]
    assert cb.sweep_points(27, [1.0], 27) == [27]


# ---- the page pool (mixed workload)


@pytest.mark.parametrize("cache", ["fp16", "k4v2_g128", "k2v2_g128"])
def test_pool_pages(cache):
    rows, max_len = 40, 65536 + 128
    n = cb.pool_pages(cache, rows, max_len, SHAPE, BUDGET)
    per = BUDGET / SHAPE["layers"]
    assert cb.layer_cache_bytes(cache, rows, max_len, SHAPE, n) <= per < \
        cb.layer_cache_bytes(cache, rows, max_len, SHAPE, n + 1)
    assert cb.pool_pages(cache, rows, max_len, SHAPE, 1e3) == 0


def test_pooled_caches_on_cpu():
    f = engine.pooled_cache("fp16", 4, 1000, 8, 128, 32, 10, "cpu")
    assert f.k.shape == (11, 8, 64, 128) and f.scratch_page == 10  # the pool and a scratch page
    assert f.page_table.shape == (4, 16) and bool((f.page_table == 10).all())
    assert f.max_seqs == 4 and f.max_pages_per_seq == 16 and f.seq_lens.shape == (4,)
    assert f.nbytes == cb.layer_cache_bytes("fp16", 4, 1000, SHAPE, num_pages=10)
    q = engine.pooled_cache("k4v2_g128", 4, 1000, 8, 128, 32, 10, "cpu")
    assert q.pages.shape[0] == 10 and bool((q.page_table == -1).all())
    assert q.nbytes == cb.layer_cache_bytes("k4v2_g128", 4, 1000, SHAPE, num_pages=10)


# ---- the model


def test_minimal_model_shapes_on_cpu():
    shape = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "intermediate": 96}
    m = cb.build_model("minimal", shape, 50, torch.float32, torch.device("cpu"), 128)
    assert sum(p.numel() for p in m.parameters()) == cb.param_count(shape, 50)
    assert not any(p.requires_grad for p in m.parameters())
    layer = m.model.layers[0]
    assert layer.self_attn.k_proj.weight.shape == (2 * 16, 64)
    # rotary: scores depend on relative positions only
    q, k = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 1, 16)
    x = torch.zeros(1, 1, 64)

    def score(pq, pk):
        cq, sq = m.model.rotary_emb(x, torch.tensor([[pq]]))
        ck, sk = m.model.rotary_emb(x, torch.tensor([[pk]]))
        rq, _ = m.kvtile_apply_rope(q, k, cq, sq)
        _, rk = m.kvtile_apply_rope(q, k, ck, sk)
        return (rq[0, 0, 0] * rk[0, 0, 0]).sum()

    assert torch.allclose(score(7, 3), score(107, 103), atol=1e-4)
    assert not torch.allclose(score(7, 3), score(7, 5), atol=1e-4)
    rot, apply = engine._rope(m)
    assert rot is m.model.rotary_emb and apply == m.kvtile_apply_rope


# ---- the engine's host side on CPU (the fp16 cache's writer is plain torch; steps are simulated)

TINY = {"layers": 2, "hidden": 128, "heads": 2, "kv_heads": 1, "head_dim": 64, "intermediate": 128}


def cpu_engine(backend, rows, max_len, num_pages=None):
    model = cb.build_model("minimal", TINY, 50, torch.float32, torch.device("cpu"), max_len)
    return engine.PlannedEngine(model, backend, max_batch=rows, max_len=max_len, num_pages=num_pages)


def test_fill_synthetic_writes_every_row_in_chunks():
    eng = cpu_engine("fp16", 3, 512)
    src_k, src_v = torch.randn(256, 1, 64), torch.randn(256, 1, 64)
    eng.fill_synthetic({0: 300, 2: 130}, src_k, src_v)
    assert eng.lens == [300, 0, 130] and eng.seq_lens.tolist() == [300, 0, 130]
    # calls: row 0 tokens 0..255 alone (256 tokens), then row 0 tokens 256..299 and row 2 tokens 0..129
    expect = {0: torch.cat([src_k[:256], src_k[:44]]), 2: src_k[44:174]}
    for row, want in expect.items():
        for layer_cache in eng.caches:
            pos = torch.arange(want.shape[0])
            page = layer_cache.page_table[row, pos // 64].long()
            got = layer_cache.k[page, :, pos % 64, :]
            assert torch.equal(got, want.half())


def test_fill_synthetic_keeps_each_rows_pieces_in_order():
    eng = cpu_engine("fp16", 2, 512)
    src_k, src_v = torch.randn(256, 1, 64), torch.randn(256, 1, 64)
    # row 1's first piece (256 tokens) does not fit beside row 0's 101: its second piece must wait for it
    eng.fill_synthetic({0: 101, 1: 301}, src_k, src_v)
    assert eng.lens == [101, 301]
    c = eng.caches[0]
    pos = torch.arange(301)
    got = c.k[c.page_table[1, pos // 64].long(), :, pos % 64, :]
    assert torch.equal(got, torch.cat([src_k[:256], src_k[:45]]).half())


def test_fill_synthetic_prefill_calls(monkeypatch):
    eng = cpu_engine("k4v2_g128", 4, 1024)
    calls = []

    def prefill(cache, k, v, cu, max_tokens_per_seq=None):
        if cache is eng.caches[0]:
            calls.append((cu.tolist(), eng.seq_lens.tolist(), k.shape[0], max_tokens_per_seq))

    monkeypatch.setattr(engine.kvtile, "prefill", prefill)
    eng.fill_synthetic({1: 600, 3: 100}, torch.zeros(512, 1, 64), torch.zeros(512, 1, 64))
    assert calls == [([0, 0, 512, 512, 512], [0, 512, 0, 0], 512, 512),
                     ([0, 0, 88, 88, 188], [0, 600, 0, 100], 188, 100)]


def test_pool_admit_and_release():
    eng = cpu_engine("fp16", 3, 1000, num_pages=20)
    assert eng.admit(0, 640)  # 10 pages of 64 tokens
    assert eng.row_pages[0] == list(range(10)) and eng.page_table[0, :10].tolist() == list(range(10))
    assert not eng.admit(1, 700)  # 11 pages, 10 free: waits
    assert eng.admit(1, 640) and not eng.free_pages
    assert bool((eng.page_table[2] == 20).all())  # unassigned entries: the scratch page
    eng.lens[0], eng.act[0] = 500, 1
    eng.release(0)
    assert eng.lens[0] == 0 and eng.act[0] == 0
    assert sorted(eng.free_pages) == list(range(10)) and bool((eng.page_table[0] == 20).all())
    with pytest.raises(ValueError, match="already holds a request"):
        eng.admit(1, 64)
    with pytest.raises(ValueError, match="exceeds max_len"):
        eng.admit(0, 1001)
    q = cpu_engine("k4v2_g128", 2, 1000, num_pages=5)
    assert bool((q.page_table == -1).all()) and all(c.page_table is q.page_table for c in q.caches)
    assert q.admit(1, 300) and q.page_table[1].tolist() == [0, 1, 2, -1, -1, -1, -1, -1]


@pytest.mark.parametrize("backend,mixed", [("fp16", True), ("k4v2_g128", False)])
def test_serving_bookkeeping(monkeypatch, backend, mixed):
    """serve() on CPU with simulated steps: lengths stay within each request's pages, pages are never lost or
    shared, every request leaves after gen tokens and the freed memory is taken again."""
    gen, rows = 6, 4
    prompts = [100, 300] if mixed else [200]
    max_len = max(prompts) + gen
    eng = cpu_engine(backend, rows, max_len, num_pages=12 if mixed else None)
    if backend != "fp16":
        monkeypatch.setattr(engine.kvtile, "prefill", lambda *a, **k: None)
    monkeypatch.setattr(cb, "_sync", lambda: None)
    produced = {}
    first = []

    def step(n=None, events=None):
        assert n == rows
        if not first:  # the rows' lengths as filled: prompt + (r * gen) // rows generated tokens
            first.append(list(eng.lens))
        for r in range(n):
            if eng.act[r]:
                eng.lens[r] += 1
                produced[r] = produced.get(r, 0) + 1
                assert eng.lens[r] <= max_len
                if mixed:
                    assert eng.lens[r] <= len(eng.row_pages[r]) * 64
        if mixed:
            held = [p for ids in eng.row_pages.values() for p in ids]
            assert len(set(held)) == len(held) and len(held) + len(eng.free_pages) == 12

    monkeypatch.setattr(eng, "step", step)
    order = iter(range(10**6))
    args = cb.parse_args(["--gen", str(gen), "--warmup", "1", "--steps", "1", "--serve-steps", "20"])
    out = cb.serve(eng, rows, lambda: prompts[next(order) % len(prompts)], args, (torch.zeros(256, 1, 64),) * 2)
    assert first[0] == ([100, 301, 103, 0] if mixed else [200, 201, 203, 204])  # 300 + 100 + 300 > 12 pages
    assert out["steps"] == 20 and out["finished"] > 0 and out["admitted"] > 0
    assert out["tokens"] <= sum(produced.values())  # the warm-up step's tokens are not counted
    if not mixed:  # every row always busy: the freed row is taken in the same step
        assert out["mean_live"] == rows and out["tokens"] == 20 * rows
        assert abs(out["finished"] - 20 * rows / gen) <= rows
    else:
        assert 1 <= out["min_live"] <= out["max_live"] <= rows


class _Event:
    def __init__(self, **kwargs):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 2.0


class _Graph:
    def __init__(self, fn):
        self.fn = fn

    def replay(self):
        self.fn()


def _fake_device(monkeypatch):
    """The device side faked on CPU: CUDA events and graphs (a graph replays its function), kvtile's device ops
    checking their arguments, DecodePlan checking that the lengths a run sees are the planned ones, a reference
    attention for the prefill. Returns the call counts."""
    calls = {"plan": 0, "run": 0, "prefill": 0, "append": 0, "dequantize": 0}

    class Plan:
        def __init__(self, cache, dtype=torch.float16, rows=None, softmax_scale=None):
            self.cache, self.dtype, self.rows, self.lens = cache, dtype, rows, None

        def plan(self, lens):
            page = 64 if isinstance(self.cache, kvtile.Fp16PagedCache) else 128
            assert len(lens) == self.rows and all(0 <= x <= self.cache.max_pages_per_seq * page for x in lens)
            self.lens = list(lens)
            calls["plan"] += 1

        def run(self, q, cache=None):
            c = self.cache if cache is None else cache
            assert type(c) is type(self.cache) and c.max_pages_per_seq == self.cache.max_pages_per_seq
            assert q.dtype == self.dtype and q.shape == (self.rows, c.q_heads, c.head_dim)
            assert c.seq_lens[:self.rows].tolist() == self.lens, "run over lengths that were not planned"
            calls["run"] += 1
            return torch.zeros_like(q)

        def close(self):
            pass

    def prefill(cache, k, v, cu, max_tokens_per_seq=None):
        n = cu[1:] - cu[:-1]
        assert k.shape[0] == int(cu[-1]) and cu.numel() == cache.max_seqs + 1 and k.is_contiguous()
        assert int(n.max()) <= max_tokens_per_seq and bool((cache.seq_lens >= n).all())
        calls["prefill"] += 1

    def append(cache, k, v, rows=None):
        assert k.shape == (rows, cache.kv_heads, cache.head_dim)
        calls["append"] += 1

    def dequantize(cache, ids):
        assert ids.dtype == torch.int32 and ids.is_contiguous() and bool((ids >= 0).all())
        calls["dequantize"] += 1
        shape = (ids.shape[0], cache.kv_heads, cache.tile_tokens, cache.head_dim)
        return torch.zeros(shape, dtype=torch.float16), torch.zeros(shape, dtype=torch.float16)

    def attention(q, k, v, scale):
        n, L = q.shape[2], k.shape[2]
        mask = torch.ones(n, L, dtype=torch.bool).tril(L - n)
        return torch.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(~mask, -math.inf), -1) @ v

    def capture(self, fn):
        saved = self.seq_lens.clone()
        fn()  # the eager warm-up of PlannedEngine._capture
        self.seq_lens.copy_(saved)
        return _Graph(fn)

    for name, value in (("DecodePlan", Plan), ("prefill", prefill), ("append", append),
                        ("dequantize_pages", dequantize),
                        ("decode", lambda cache, q, softmax_scale=None, rows=None: torch.zeros_like(q)),
                        ("fp16_decode", lambda cache, q, softmax_scale=None, rows=None: torch.zeros_like(q))):
        monkeypatch.setattr(engine.kvtile, name, value)
    monkeypatch.setattr(engine, "_causal_attention", attention)
    monkeypatch.setattr(engine.PlannedEngine, "_capture", capture)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (200e9, 200e9))
    return calls


def test_a_failed_part_keeps_the_others(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

    def fails():
        raise torch.cuda.OutOfMemoryError("fake") if hasattr(torch.cuda, "OutOfMemoryError") else RuntimeError("fake")

    assert cb._part(fails)["error"].endswith(": fake")
    assert cb._part(lambda x: {"v": x}, 3) == {"v": 3}

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(cb, "_fatal_cuda", lambda: True)  # a broken context ends the run
    with pytest.raises(RuntimeError, match="illegal memory access"):
        cb._part(broken)


def test_every_measurement_on_cpu_with_faked_device_ops(monkeypatch, tmp_path):
    """run_uniform (prefill, fills, plan check, sweep, part timings, serving) and run_mixed end to end on a tiny
    model on CPU, the device ops faked (their argument checks and the planned lengths asserted)."""
    calls = _fake_device(monkeypatch)
    shape = dict(TINY, heads=4, kv_heads=2, name="tiny")
    model = cb.build_model("minimal", shape, 64, torch.float32, torch.device("cpu"), 4096)
    args = cb.parse_args(["--prompts", "1000", "--gen", "20", "--warmup", "2", "--steps", "3", "--serve-steps", "25",
                          "--prefill-tokens", "1000", "--chunk", "256", "--fill-chunk", "512", "--profile-steps",
                          "0", "--mixed", "500,1500", "--sweep", "0.5,1"])
    src = (torch.randn(512, 2, 64), torch.randn(512, 2, 64))
    gen = torch.Generator()
    budget = 20e6
    results = {"meta": fake_results()["meta"], "shape": shape, "budget_bytes": budget, "configs": [], "errors": []}
    for cache, fp16_max in (("fp16", None), ("k4v2_g128", 12)):
        rec = cb.run_uniform(model, args, shape, cache, 1000, src, fp16_max, budget, 64, gen)
        assert "error" not in rec, rec["error"]
        n = rec["capacity"]["max_requests"]
        assert rec["capacity"]["cache_bytes_allocated"] == rec["capacity"]["cache_bytes_accounted"] <= budget
        assert [p["requests"] for p in rec["sweep"]] == cb.sweep_points(n, [0.5, 1], fp16_max)
        assert rec["serve"]["mean_live"] == n and rec["serve"]["finished"] == rec["serve"]["admitted"] > 0
        assert rec["prefill"]["requests"] == 1 and rec["plan_check"]["mode"] == "shared"
        results["configs"].append(rec)
    mixed = cb.run_mixed(model, args, shape, "k4v2_g128", src, budget)
    assert "error" not in mixed, mixed["error"]
    assert mixed["serve"]["admitted"] > 0 and mixed["serve"]["max_live"] <= mixed["capacity"]["rows"]
    results["configs"].append(mixed)
    assert calls["run"] > 0 and calls["plan"] > 0 and calls["dequantize"] > 0 and calls["append"] > 0
    md = open(cb.write_report(str(tmp_path), "cpu", results, picture=False)[1]).read()
    assert "| 1000 | k4v2_g128 |" in md


# ---- the report


def fake_results():
    def point(n, tps, share):
        return {"requests": n, "context_tokens": 16387, "tokens_per_s": tps, "tpot_ms": 1e3 * n / tps,
                "tpot_ms_median": 1e3 * n / tps, "step_gpu_ms": 900.0 * n / tps,
                "attention_ms": 900.0 * n / tps * share, "cache_write_ms": 0.1, "attention_share": share,
                "cache_write_share": 0.01}

    fp16 = {"mode": "uniform", "cache": "fp16", "prompt": 16384, "gen": 128,
            "capacity": {"max_requests": 27, "kv_bytes_per_token": 131072, "budget_bytes": BUDGET},
            "sweep": [point(27, 1500.0, 0.8), point(14, 1000.0, 0.7)],
            "prefill": {"tokens_per_s": 20000.0, "requests": 2},
            "serve": {"rows": 27, "steps": 32, "tokens": 864, "mean_live": 27.0, "decode_tokens_per_s": 1450.0,
                      "tpot_ms": 18.6, "finished": 6, "admitted": 6, "admission_fill_ms": 4.0},
            "profile": {"requests": 27, "steps": 2, "kernel_ms_per_step": 17.0,
                        "share": {"attention": 0.78, "cache_write": 0.01, "gemm": 0.18, "other": 0.03},
                        "top": [{"name": "fp16_decode_kernel<...>", "category": "attention", "ms_per_step": 13.0,
                                 "calls_per_step": 32, "share": 0.76}]}}
    q = {"mode": "uniform", "cache": "k4v2_g128", "prompt": 16384, "gen": 128,
         "capacity": {"max_requests": 131, "kv_bytes_per_token": 26656.0, "budget_bytes": BUDGET},
         "sweep": [point(131, 6000.0, 0.75), point(27, 2400.0, 0.5)],
         "prefill": {"tokens_per_s": 19000.0, "requests": 2}, "serve": {"error": "RuntimeError: fake serve"}}
    bad = {"mode": "uniform", "cache": "k2v2_g128", "prompt": 65536, "gen": 128, "sweep": [],
           "capacity": {"max_requests": 48}, "error": "OutOfMemoryError: fake"}
    mixed = {"mode": "mixed", "cache": "fp16", "prompts": [16384, 65536], "gen": 128,
             "capacity": {"rows": 11, "pool_pages": 7151, "pool_tokens": 457664, "budget_bytes": BUDGET,
                          "cache_bytes_accounted": 59.9e9},
             "serve": {"rows": 11, "steps": 32, "tokens": 300, "mean_live": 9.4, "decode_tokens_per_s": 500.0,
                       "tpot_ms": 18.0, "finished": 2, "admitted": 2, "admission_fill_ms": 9.0}}
    meta = {"date": "2026-12-06", "gpu": "NVIDIA H200", "gpu_memory_bytes": 150e9, "torch": "2.11", "cuda": "13.0",
            "transformers": None, "commit": "abc1234", "command": "python3 examples/torch/capacity_bench.py",
            "args": {"gen": 128}, "vocab": 32000, "dtype": "bf16", "model": "minimal", "weight_bytes": 14.5e9}
    return {"meta": meta, "shape": SHAPE, "budget_bytes": BUDGET, "configs": [fp16, q, bad, mixed],
            "errors": ["mixed k2v2_g128  not run: --time-limit 225 s reached"]}


def test_report(tmp_path):
    res = fake_results()
    paths = cb.write_report(str(tmp_path), "2026-12-06-h200-capacity", res, picture=False)
    assert paths == [str(tmp_path / "2026-12-06-h200-capacity.json"), str(tmp_path / "2026-12-06-h200-capacity.md")]
    back = json.loads((tmp_path / "2026-12-06-h200-capacity.json").read_text())
    assert back["configs"][1]["capacity"]["max_requests"] == 131
    md = (tmp_path / "2026-12-06-h200-capacity.md").read_text()
    assert "- Date: 2026-12-06. GPU: NVIDIA H200 (150 GB). torch 2.11, CUDA 13.0. kvtile abc1234." in md
    assert "- Command: `python3 examples/torch/capacity_bench.py`" in md
    # k4v2 at the budget: 131 / 27 requests = 4.85x, 6000 / 1500 tokens/s = 4.00x, 2400 tokens/s at 27 requests
    assert "| 16K | k4v2_g128 | 26656 | 131 | 4.85x | 6000 | 4.00x | 21.83 | 19.65 | 75% | 2400 | 19000 | - |" in md
    assert "| 16K | fp16 | 131072 | 27 | 1.00x | 1500 | 1.00x | 18.00 | 16.20 | 80% | 1500 | 20000 | 1450 |" in md
    assert "| 16K | k4v2_g128 | 27 | 2400 | 11.25 | 10.12 | 5.06 | 0.10 | 50% |" in md
    assert "| 16K | fp16 | 27 | 32 | 27.0 | 6 / 6 | 1450 | 18.60 | 4.0 |" in md
    assert "| mixed 16K/64K | fp16 | 11 | 32 | 9.4 | 2 / 2 | 500 | 18.00 | 9.0 |" in md
    assert "| 16K | fp16 | 27 | 17.00 | 78% | 1% | 18% | 3% | fp16_decode_kernel<...> 76% |" in md
    assert "| fp16 | 16K/64K | 11 | 457664 | 59.9 |" in md
    assert "- k2v2_g128 64K: OutOfMemoryError: fake" in md
    assert "- k4v2_g128 16K, serve: RuntimeError: fake serve" in md
    assert "time-limit 225 s reached" in md
    assert "**max requests**" in md and "synthetic" in md


def test_picture(tmp_path):
    res = fake_results()
    png = str(tmp_path / "p.png")
    tool = cb.plot(res, png)
    if tool is None:  # neither matplotlib nor gnuplot here: skipped, and said so
        assert not os.path.exists(png)
        pytest.skip("no matplotlib or gnuplot: the picture is skipped (checked that nothing was written)")
    with open(png, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width >= 600 and height >= 300
    res["meta"]["picture"] = None
    paths = cb.write_report(str(tmp_path), "r", res, picture=True)
    assert paths[-1].endswith("r.png") and "![decode tokens/s" in open(paths[1]).read()


def test_replot_rewrites_the_report_from_the_json(tmp_path):
    res = fake_results()
    cb.write_report(str(tmp_path), "x-capacity", res, picture=False)
    (tmp_path / "x-capacity.md").unlink()
    assert cb.main(["--replot", str(tmp_path / "x-capacity.json")]) == 0
    md = (tmp_path / "x-capacity.md").read_text()
    assert "| 16K | k4v2_g128 | 26656 | 131 | 4.85x |" in md
    assert os.path.exists(tmp_path / "x-capacity.png") == (json.loads(
        (tmp_path / "x-capacity.json").read_text())["meta"].get("picture") is not None)


def test_kernel_categories():
    assert cb.kernel_category("void kvtile::v0::attention::detail::quant_decode_kernel<...>") == "attention"
    assert cb.kernel_category("void kvtile::attention::detail::combine_kernel<...>") == "attention"
    assert cb.kernel_category("void kvtile::append_kernel<...>") == "cache_write"
    assert cb.kernel_category("nvjet_tst_128x64_64x4_1x2_h_bz_NNT") == "gemm"
    assert cb.kernel_category("sm90_xmma_gemm_bf16bf16_bf16f32") == "gemm"
    assert cb.kernel_category("void at::native::vectorized_elementwise_kernel<...>") == "other"
    s = cb.summarize_kernels([("a_decode_kernel", 3000.0), ("gemm1", 1000.0), ("x", 1000.0), ("gemm1", 1000.0)], 2)
    assert math.isclose(s["kernel_ms_per_step"], 3.0)
    assert math.isclose(s["share"]["attention"], 0.5) and math.isclose(s["share"]["gemm"], 1 / 3)
    assert s["top"][0]["name"] == "a_decode_kernel" and s["top"][1]["calls_per_step"] == 1.0


def test_gpu_tag():
    assert cb.gpu_tag("NVIDIA H200") == "h200"
    assert cb.gpu_tag("NVIDIA H100 80GB HBM3") == "h100"
    assert cb.gpu_tag("NVIDIA A100-SXM4-80GB") == "a100"


# ---- the GPU run (a small model, every mode)


@requires_gpu
def test_small_run_on_the_gpu(tmp_path):
    argv = ["--out", str(tmp_path), "--tag", "test", "--layers", "2", "--vocab", "1024", "--budget-gb", "0.5",
            "--prompts", "2048", "--mixed", "1024,3072", "--gen", "24", "--warmup", "2", "--steps", "3",
            "--serve-steps", "30", "--prefill-tokens", "4096", "--chunk", "1024", "--fill-chunk", "4096",
            "--profile-steps", "1", "--headroom-gb", "1"]
    assert cb.main(argv) == 0
    name = [f for f in os.listdir(tmp_path) if f.endswith("-test-capacity.json")]
    res = json.loads((tmp_path / name[0]).read_text())
    uni = [r for r in res["configs"] if r["mode"] == "uniform"]
    assert [r["cache"] for r in uni] == cb.CACHES
    for r in uni:
        assert "error" not in r, r
        n = r["capacity"]["max_requests"]
        assert r["capacity"]["cache_bytes_allocated"] == r["capacity"]["cache_bytes_accounted"] <= 0.5e9
        assert r["sweep"][0]["requests"] == n and all(p["tokens_per_s"] > 0 for p in r["sweep"])
        assert 0 < r["sweep"][0]["attention_share"] < 1
        assert r["plan_check"]["rel_err"] <= cb.PLAN_CHECK_TOL
        assert r["serve"]["admitted"] > 0 and r["serve"]["finished"] > 0
        assert r["prefill"]["tokens_per_s"] > 0 and "share" in r["profile"]
    mixed = [r for r in res["configs"] if r["mode"] == "mixed"]
    assert len(mixed) == 4 and all("error" not in r and r["serve"]["admitted"] > 0 for r in mixed)
