# kvtile's decode options on a GPU: multi-query (1-8 new tokens per row, ragged,
# 0 allowed, causal among the new tokens), the left window and the logit
# soft-cap, through the one-call op and the plan/run interface (DecodePlan),
# against an fp64 reference built from the dequantized pages; plan/run under
# CUDA-graph capture and replay with changing lengths; bad arguments and
# plan/run mismatches raising clear errors. Skips without a GPU.
import math

import pytest
import torch

import kvtile
from conftest import requires_gpu
from test_device import D, H, make_tokens, reference_kv

pytestmark = requires_gpu

SCALE = 1.0 / math.sqrt(D)


def filled(lengths, q_heads=4, sink=False, max_q_tokens=8, extra=128, seed=0):
    c = kvtile.PagedCache(len(lengths), max(lengths) + extra, H, D, q_heads=q_heads, sink=sink,
                          max_q_tokens=max_q_tokens)
    k, v = make_tokens(lengths, seed)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device="cuda")
    c.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
    kvtile.prefill(c, k, v, cu)
    return c


def cu_of(n_new):
    return [0] + torch.tensor(n_new).cumsum(0).tolist()


def reference(q, kv_rows, lengths, n_new, hq, window=-1, cap=0.0):
    """fp64 attention of q [sum(n_new), hq, D]: row s's new token i sits at position
    lengths[s] - n_new[s] + i and attends keys <= its position (>= position - window with a window).
    kv_rows[s] = (K, V) [H, L, D]. Returns out [rows, hq, D], lse [rows, hq] (float64)."""
    outs, lses = [], []
    row = 0
    g = hq // H
    for s, (L, n) in enumerate(zip(lengths, n_new)):
        if n == 0:
            continue
        k, v = kv_rows[s]
        k, v = k.double(), v.double()
        qs = q[row:row + n].double().view(n, H, g, D)
        sc = torch.einsum("nhgd,hld->nhgl", qs, k) * SCALE
        if cap > 0:
            sc = cap * torch.tanh(sc / cap)
        pos = torch.arange(L - n, L, device=q.device)[:, None]
        key = torch.arange(L, device=q.device)[None, :]
        mask = key <= pos
        if window >= 0:
            mask &= key >= pos - window
        sc = sc.masked_fill(~mask[:, None, None, :], float("-inf"))
        lse = torch.logsumexp(sc, -1)
        outs.append(torch.einsum("nhgl,hld->nhgd", torch.softmax(sc, -1), v).reshape(n, hq, D))
        lses.append(lse.reshape(n, hq))
        row += n
    return torch.cat(outs), torch.cat(lses)


def check(out, lse, ref_out, ref_lse, what):
    err = (out.double() - ref_out).abs().max().item()
    lerr = (lse.double() - ref_lse).abs().max().item()
    assert err < 2e-2, "%s: max |out - ref| = %g" % (what, err)
    assert lerr < 2e-2, "%s: max |lse - ref| = %g" % (what, lerr)


LENGTHS = [700, 1, 129, 256, 0, 40, 300, 128]
N_NEW = [3, 1, 8, 0, 0, 5, 2, 7]  # ragged, 0 for a live row and for an empty one


@pytest.mark.parametrize("path", ["one_call", "plan"])
@pytest.mark.parametrize("q_heads", [4, 16])
@pytest.mark.parametrize("sink", [False, True])
@pytest.mark.parametrize("qdtype", [torch.float16, torch.bfloat16])
def test_multi_query_matches_reference(path, q_heads, sink, qdtype):
    c = filled(LENGTHS, q_heads=q_heads, sink=sink)
    total = sum(N_NEW)
    q = torch.randn(total, q_heads, D, device="cuda").to(qdtype)
    lse = torch.empty(total, q_heads, device="cuda")
    cu = cu_of(N_NEW)
    if path == "one_call":
        out = kvtile.decode(c, q, lse=lse, cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device="cuda"))
    else:
        plan = kvtile.DecodePlan(c, dtype=qdtype, max_q_tokens=8)
        out = plan.plan(LENGTHS, cu).run(q, lse=lse)
    torch.cuda.synchronize()
    ref_out, ref_lse = reference(q, kv_of(c, LENGTHS), LENGTHS, N_NEW, q_heads)
    check(out, lse, ref_out, ref_lse, "%s q_heads %d sink %s %s" % (path, q_heads, sink, qdtype))


def kv_of(c, lengths):
    live = [s for s, L in enumerate(lengths) if L]
    return dict(zip(live, reference_kv(c, lengths, live)))


@pytest.mark.parametrize("window,cap", [(-1, 2.0), (0, 0.0), (5, 0.0), (64, 0.0), (200, 0.0), (130, 5.0),
                                        (5000, 0.0)])
@pytest.mark.parametrize("path", ["one_call", "plan"])
@pytest.mark.parametrize("multi", [False, True])
def test_window_and_softcap_match_reference(window, cap, path, multi):
    c = filled(LENGTHS, sink=True)
    n_new = N_NEW if multi else [1 if L else 0 for L in LENGTHS]
    rows = sum(n_new) if multi else len(LENGTHS)
    q = (torch.randn(rows, 4, D, device="cuda") * 3).half()  # larger scores: the cap matters
    lse = torch.empty(rows, 4, device="cuda")
    cu = cu_of(n_new)
    kw = dict(window_left=window, logit_softcap=cap)
    if path == "one_call":
        extra = dict(cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device="cuda"), max_q_tokens=8) if multi else {}
        out = kvtile.decode(c, q, lse=lse, **kw, **extra)
    else:
        plan = kvtile.DecodePlan(c, max_q_tokens=8 if multi else 1, **kw)
        out = plan.plan(LENGTHS, cu if multi else None).run(q, lse=lse)
    torch.cuda.synchronize()
    ref_out, ref_lse = reference(q if multi else q[[s for s, n in enumerate(n_new) if n]], kv_of(c, LENGTHS),
                                 LENGTHS, n_new, 4, window, cap)
    if not multi:  # empty rows: output 0, lse -inf
        live = [s for s, n in enumerate(n_new) if n]
        assert torch.all(out[4] == 0) and torch.isinf(lse[4]).all()
        out, lse = out[live], lse[live]
    check(out, lse, ref_out, ref_lse, "window %d cap %g %s multi %s" % (window, cap, path, multi))


@pytest.mark.parametrize("window,cap", [(-1, 0.0), (50, 0.0), (-1, 3.0)])
@pytest.mark.parametrize("path", ["one_call", "plan"])
def test_fp16_baseline_window_softcap(window, cap, path):
    lengths = [300, 64, 1, 0]
    f = kvtile.Fp16PagedCache(4, 400, H, D, q_heads=4)
    k, v = make_tokens(lengths)
    f.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
    start, kv = 0, {}
    for s, L in enumerate(lengths):
        if L:
            f.write(k[start:start + L], v[start:start + L], torch.arange(L, device="cuda"),
                    torch.full((L,), s, device="cuda", dtype=torch.long))
            kv[s] = (k[start:start + L].float().transpose(0, 1), v[start:start + L].float().transpose(0, 1))
        start += L
    q = (torch.randn(4, 4, D, device="cuda") * 3).half()
    lse = torch.empty(4, 4, device="cuda")
    if path == "one_call":
        out = kvtile.fp16_decode(f, q, lse=lse, window_left=window, logit_softcap=cap)
    else:
        out = kvtile.DecodePlan(f, window_left=window, logit_softcap=cap).plan(lengths).run(q, lse=lse)
    torch.cuda.synchronize()
    ref_out, ref_lse = reference(q[:3], kv, lengths, [1, 1, 1, 0], 4, window, cap)
    check(out[:3], lse[:3], ref_out, ref_lse, "fp16 window %d cap %g %s" % (window, cap, path))
    assert torch.all(out[3] == 0)


@pytest.mark.parametrize("max_q,window,cap", [(1, -1, 0.0), (4, 100, 3.0)])
def test_plan_run_cuda_graph_replay_with_changing_lengths(max_q, window, cap):
    """A graph of run() captured once, replayed after plan() with new ragged lengths (rows growing by
    prefill chunks across tile boundaries, a row joining late), against the fp64 reference and
    bit-equal to an eager run of the same plan."""
    lengths = [300, 50, 129, 0, 5]
    rows = len(lengths)
    c = kvtile.PagedCache(rows, 700, H, D, q_heads=4, max_q_tokens=max_q)
    k, v = make_tokens(lengths)
    c.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
    kvtile.prefill(c, k, v, torch.tensor(cu_of(lengths), dtype=torch.int32, device="cuda"))
    plan = kvtile.DecodePlan(c, max_q_tokens=max_q, window_left=window, logit_softcap=cap)
    q_rows = rows * max_q
    q = torch.randn(q_rows, 4, D, device="cuda", dtype=torch.float16)
    out = torch.empty_like(q)
    lse = torch.empty(q_rows, 4, device="cuda")

    def n_new_of(it, lens):
        if max_q == 1:
            return [1 if L else 0 for L in lens]
        return [min(L, (it + s) % (max_q + 1)) for s, L in enumerate(lens)]

    lens = list(lengths)
    plan.plan(lens, cu_of(n_new_of(0, lens)) if max_q > 1 else None)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (kernel attributes)
        plan.run(q, out=out, lse=lse)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pytest.raises(RuntimeError, match="CUDA-graph capture"):
            plan.plan(lens)
        plan.run(q, out=out, lse=lse)
    gen = torch.Generator(device="cuda").manual_seed(7)
    for it in range(1, 31):
        grow = [((it * 7 + 3 * r) % 9) if (lens[r] or it >= 10) else 0 for r in range(rows)]
        if sum(grow):
            kc = torch.randn(sum(grow), H, D, device="cuda", generator=gen).half()
            lens = [L + n for L, n in zip(lens, grow)]
            c.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
            kvtile.prefill(c, kc, kc * 0.5 + 0.1, torch.tensor(cu_of(grow), dtype=torch.int32, device="cuda"),
                           max_tokens_per_seq=max(grow))
        n_new = n_new_of(it, lens)
        plan.plan(lens, cu_of(n_new) if max_q > 1 else None)
        q.copy_(torch.randn(q_rows, 4, D, device="cuda", generator=gen).half())
        g.replay()
        got, got_lse = out.clone(), lse.clone()
        eager = plan.run(q, lse=lse)
        nq = sum(n_new)
        live = [r for r, n in enumerate(n_new) if n]
        # rows written: the nq new tokens (multi-query; rows past them are not outputs), or every row
        assert torch.equal(got[:nq], eager[:nq]) if max_q > 1 else torch.equal(got, eager), it
        qq = q[:nq] if max_q > 1 else q[live]
        ref_out, ref_lse = reference(qq, kv_of(c, lens), lens, n_new, 4, window, cap)
        sel = slice(0, nq) if max_q > 1 else live
        check(got[sel], got_lse[sel], ref_out, ref_lse, "replay %d lengths %s new %s" % (it, lens, n_new))
    assert lens[3] > 0 and max(lens) > 400  # a row joined; rows crossed tile boundaries


def test_plan_info_and_balance():
    c = filled([4000, 10, 10, 10], extra=128, max_q_tokens=1)
    plan = kvtile.DecodePlan(c).plan([4000, 10, 10, 10])
    info = plan.info()
    assert info["ctas"] == torch.cuda.get_device_properties(0).multi_processor_count
    assert info["chunks"] > 8  # 8 units (4 rows x 2 KV heads): the long row's are cut into several chunks


@pytest.fixture(scope="module")
def planned():
    c = filled([300, 20, 0], q_heads=4, max_q_tokens=4)
    plan = kvtile.DecodePlan(c, max_q_tokens=4).plan([300, 20, 0], [0, 3, 4, 4])
    q = torch.randn(12, 4, D, device="cuda", dtype=torch.float16)
    return c, plan, q


def _run_op(plan, c, q, rows=3, workspace=None, handle=None, **kw):
    a = dict(qo_indptr=plan.qo_indptr, max_q_tokens=4, window_left=-1, logit_softcap=0.0)
    a.update(kw)
    if rows != 3 and a["qo_indptr"] is not None:
        a["qo_indptr"] = torch.zeros(rows + 1, dtype=torch.int32, device="cuda")
    torch.ops.kvtile.decode_run(plan._handle if handle is None else handle, *c._cache_args(rows), q,
                                torch.empty_like(q), None, plan.workspace if workspace is None else workspace,
                                SCALE, c.preset_id, 0, a["qo_indptr"], a["max_q_tokens"], a["window_left"],
                                a["logit_softcap"])


def _plan_op(plan, c, host_cu):
    torch.ops.kvtile.decode_plan(plan._handle, *c._cache_args(3), torch.tensor([300, 20, 0], dtype=torch.int32),
                                 torch.tensor(host_cu, dtype=torch.int32), plan.workspace, 4, torch.float16, SCALE,
                                 c.preset_id, 0, plan.qo_indptr, 4, -1, 0.0)


BAD_PLAN_RUN = [
    ("lens_on_device", ValueError, "seq_lens must be on the host",
     lambda c, p, q: p.plan(torch.tensor([300, 20, 0], dtype=torch.int32, device="cuda"), [0, 3, 4, 4])),
    ("lens_count", ValueError, "seq_lens must have 3 entries", lambda c, p, q: p.plan([300, 20], [0, 3, 4, 4])),
    ("lens_capacity", ValueError, r"host_seq_lens\[0\] = 9999 is outside",
     lambda c, p, q: p.plan([9999, 20, 0], [0, 3, 4, 4])),
    ("cu_too_many", ValueError, "more than max_q_tokens = 4", lambda c, p, q: p.plan([300, 20, 0], [0, 5, 6, 6])),
    ("cu_longer_than_seq", ValueError, r"seq_lens\[2\] = 0 is shorter than its 1 new tokens",
     lambda c, p, q: p.plan([300, 20, 0], [0, 3, 4, 5])),
    ("host_counts_rule", ValueError, "kvtile_ops_decode_plan_build: host_qo_indptr 5 has a count",
     lambda c, p, q: _plan_op(p, c, [0, 5, 6, 6])),
    ("host_counts_shape", ValueError, "host_qo_indptr must have shape", lambda c, p, q: _plan_op(p, c, [0, 3, 4])),
    ("q_rows", ValueError, r"q must have shape \[>= 4, 4, 128\]", lambda c, p, q: p.run(q[:3].contiguous())),
    ("q_dtype", TypeError, "the plan was made for", lambda c, p, q: p.run(q.bfloat16())),
    ("lse_shape", ValueError, r"lse must have shape \[12, 4\]",
     lambda c, p, q: p.run(q, lse=torch.empty(3, 4, device="cuda"))),
    ("other_num_seqs", ValueError, "num_seqs 2 differs from the planned 3",
     lambda c, p, q: _run_op(p, c, q, rows=2)),
    ("other_q_heads", ValueError, "q_heads 8 differs from the planned 4",
     lambda c, p, q: _run_op(p, c, torch.randn(12, 8, D, device="cuda", dtype=torch.float16))),
    ("other_window", ValueError, "window_left 10 differs from the planned -1",
     lambda c, p, q: _run_op(p, c, q, window_left=10)),
    ("other_max_q", ValueError, "max_q_tokens 2 differs from the planned 4",
     lambda c, p, q: _run_op(p, c, q, max_q_tokens=2)),
    ("other_qo_indptr", ValueError, "is not the planned",
     lambda c, p, q: _run_op(p, c, q, qo_indptr=p.qo_indptr.clone())),
    ("other_workspace", ValueError, "workspace .* is not the planned",
     lambda c, p, q: _run_op(p, c, q, workspace=c.workspace)),
    ("bad_softcap_at_run", ValueError, "logit_softcap",
     lambda c, p, q: _run_op(p, c, q, logit_softcap=float("nan"))),
    ("dead_handle", ValueError, "is not a live plan handle", lambda c, p, q: _run_op(p, c, q, handle=12345)),
    ("fp16_run_with_quantized_pages", ValueError, "k_pages must have shape",
     lambda c, p, q: torch.ops.kvtile.fp16_decode_run(p._handle, c.pages, c.pages, c.page_table, c.seq_lens, q,
                                                      torch.empty_like(q), None, p.workspace, SCALE, 0)),
]


@pytest.mark.parametrize("name,exc,msg,call", BAD_PLAN_RUN, ids=[b[0] for b in BAD_PLAN_RUN])
def test_plan_run_bad_arguments(planned, name, exc, msg, call):
    c, plan, q = planned
    with pytest.raises(exc, match=msg):
        call(c, plan, q)
    # the plan still works after the rejected call (a rejected plan() needs a new plan())
    plan.plan([300, 20, 0], [0, 3, 4, 4])
    out = plan.run(q)
    torch.cuda.synchronize()
    assert torch.isfinite(out[:4].float()).all()


def test_plan_run_mismatched_kind_and_lifetime():
    c = filled([200, 10], max_q_tokens=1)
    plan = kvtile.DecodePlan(c).plan([200, 10])
    f = kvtile.Fp16PagedCache(2, 256, H, D, q_heads=4)
    q = torch.randn(2, 4, D, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="the plan was made for a quantized cache"):
        torch.ops.kvtile.fp16_decode_run(plan._handle, f.k, f.v, f.page_table, f.seq_lens, q, torch.empty_like(q),
                                         None, plan.workspace, SCALE, 0)
    handle = plan._handle
    plan.close()
    with pytest.raises(RuntimeError, match="call plan"):
        plan.run(q)
    with pytest.raises(ValueError, match="is not a live plan handle"):
        torch.ops.kvtile.decode_plan_info(handle)


def test_concurrent_destroy_frees_a_plan_once():
    # torch releases the GIL around an op call: the threads race inside decode_plan_destroy, which checks
    # and removes the handle in one locked section (two sections let two threads both free the plan)
    import threading

    threads_per_plan = 8
    for _ in range(200):
        handle = torch.ops.kvtile.decode_plan_create()
        start = threading.Barrier(threads_per_plan)
        freed, refused = [], []

        def destroy():
            start.wait()
            try:
                torch.ops.kvtile.decode_plan_destroy(handle)
                freed.append(handle)
            except ValueError as e:
                refused.append(str(e))

        threads = [threading.Thread(target=destroy) for _ in range(threads_per_plan)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(freed) == 1 and len(refused) == threads_per_plan - 1
        assert all("is not a live plan handle" in m for m in refused)


def test_decode_options_through_torch_compile():
    if not hasattr(torch, "compile") or not hasattr(torch.library, "register_fake"):
        pytest.skip("torch.compile / torch.library.register_fake not in this torch")
    c = filled([300, 20], max_q_tokens=4)
    plan = kvtile.DecodePlan(c, max_q_tokens=4, window_left=64).plan([300, 20], [0, 4, 5])
    q = torch.randn(8, 4, D, device="cuda", dtype=torch.float16)
    cu = torch.tensor([0, 4, 5], dtype=torch.int32, device="cuda")

    def f(q, out, out2):
        kvtile.decode(c, q * 1.0, out=out, cu_seqlens_q=cu, max_q_tokens=4, window_left=64)
        plan.run(q * 1.0, out=out2)
        return out * 2.0, out2 * 2.0

    out, out2 = torch.empty_like(q), torch.empty_like(q)
    got, got2 = torch.compile(f, fullgraph=True)(q, out, out2)
    ref = kvtile.decode(c, q, cu_seqlens_q=cu, max_q_tokens=4, window_left=64)
    assert torch.equal(got[:5], ref[:5] * 2.0)
    assert torch.equal(got2[:5], plan.run(q)[:5] * 2.0)



def _fp16_filled(lengths, seed):
    f = kvtile.Fp16PagedCache(len(lengths), 512, H, D, q_heads=4)
    k, v = make_tokens(lengths, seed)
    f.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
    start = 0
    for s, L in enumerate(lengths):
        f.write(k[start:start + L], v[start:start + L], torch.arange(L, device="cuda"),
                torch.full((L,), s, device="cuda", dtype=torch.long))
        start += L
    return f


@pytest.mark.parametrize("fp16", [False, True])
def test_one_plan_runs_over_every_layer_cache(fp16):
    """One plan run over two caches of the planned shape (an engine's layers: the same lengths, other
    contents) equals the one-call decode of each; a cache of another shape or kind is refused."""
    lengths = [300, 20, 129]
    if fp16:
        caches = [_fp16_filled(lengths, seed) for seed in (1, 2)]
    else:
        caches = [filled(lengths, max_q_tokens=1, extra=212, seed=seed) for seed in (1, 2)]
    plan = kvtile.DecodePlan(caches[0]).plan(lengths)
    q = torch.randn(3, 4, D, device="cuda", dtype=torch.float16)
    got = [plan.run(q, cache=c) for c in caches]
    want = [(kvtile.fp16_decode if fp16 else kvtile.decode)(c, q) for c in caches]
    torch.cuda.synchronize()
    for g, w in zip(got, want):
        assert (g.float() - w.float()).abs().max().item() < 2e-3
    assert (got[0].float() - got[1].float()).abs().max().item() > 1e-2  # the second cache's contents were read
    assert torch.equal(plan.run(q), got[0])  # no cache: the planned one
    other = (kvtile.Fp16PagedCache(3, 1024, H, D, q_heads=4) if fp16
             else kvtile.PagedCache(3, 1024, H, D, q_heads=4, max_q_tokens=1))
    with pytest.raises(ValueError, match="max_pages_per_seq"):
        plan.run(q, cache=other)
    few_rows = (kvtile.Fp16PagedCache(2, 512, H, D, q_heads=4) if fp16
                else kvtile.PagedCache(2, 512, H, D, q_heads=4, max_q_tokens=1))
    with pytest.raises(ValueError, match="fewer than the planned 3"):
        plan.run(q, cache=few_rows)
    wrong_kind = (kvtile.PagedCache(3, 512, H, D, q_heads=4) if fp16
                  else kvtile.Fp16PagedCache(3, 512, H, D, q_heads=4))
    with pytest.raises(TypeError, match="like the planned one"):
        plan.run(q, cache=wrong_kind)
