# kvtile's device ops on a GPU: the ops against the header-only kernels'
# contracts (records byte-identical to the host codec's paged records,
# dequantize_pages bit-identical to the host decode, decode attention against
# an fp32 reference), tail_slots reordering, bad arguments raising clear
# errors, memory accounting, CUDA-graph capture and replay. Skips without a GPU.
import math

import pytest
import torch

import kvtile
from conftest import requires_gpu

pytestmark = requires_gpu

D, H, HQ = 128, 2, 4


def hadamard(d, device="cuda"):
    h = torch.ones(1, 1, device=device)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(d)


def make_tokens(lengths, seed=0, dtype=torch.float16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(lengths)
    k = torch.randn(total, H, D, device="cuda", generator=g)
    k[:, :, 5] += 6.0
    v = torch.randn(total, H, D, device="cuda", generator=g) * 0.7 + 0.3
    return k.to(dtype), v.to(dtype)


def filled_cache(lengths, preset="k4v2_g128", sink=False, seed=0, dtype=torch.float16):
    G = kvtile.preset_info(preset, D)["tile_tokens"]
    c = kvtile.PagedCache(len(lengths), max(lengths) + G, H, D, q_heads=HQ, preset=preset, sink=sink)
    k, v = make_tokens(lengths, seed, dtype)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device="cuda")
    c.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
    kvtile.prefill(c, k, v, cu)
    return c, k, v, cu


def reference_kv(c, lengths, rows=None):
    """For each row in rows (default: all): K, V [H, L, D] fp32 in the original frame, read back through the ops."""
    G = c.tile_tokens
    rot = hadamard(D)
    out = []
    for s in (rows if rows is not None else range(len(lengths))):
        L = lengths[s]
        n_full, rem = divmod(L, G)
        ks, vs = [], []
        first = 0
        if c.sink_k is not None and n_full > 0:
            ks.append(c.sink_k[s].float() @ rot)
            vs.append(c.sink_v[s].float() @ rot)
            first = 1
        if n_full > first:
            ids = c.page_table[s, first:n_full].contiguous()
            pk, pv = kvtile.dequantize_pages(c, ids)
            ks += [pk[i].float() for i in range(pk.shape[0])]
            vs += [pv[i].float() for i in range(pv.shape[0])]
        if rem:
            ks.append(c.tail_k[s, :, :rem].float() @ rot)
            vs.append(c.tail_v[s, :, :rem].float() @ rot)
        out.append((torch.cat(ks, 1), torch.cat(vs, 1)))  # [H, L, D]
    return out


def attention_ref(q, kv, scale):
    outs = []
    for s, (k, v) in enumerate(kv):
        qs = q[s].float().view(H, HQ // H, D)
        w = torch.einsum("hgd,hld->hgl", qs, k) * scale
        outs.append(torch.einsum("hgl,hld->hgd", w.softmax(-1), v).reshape(HQ, D))
    return torch.stack(outs)


@pytest.mark.parametrize("preset", ["k4v2_g128", "k4v4_g128", "k2v2_g128"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_prefill_records_match_host_codec(preset, dtype):
    lengths = [300, 128, 5]
    c, k, v, cu = filled_cache(lengths, preset, dtype=dtype)
    G = c.tile_tokens
    for s, L in enumerate(lengths):
        rows = slice(int(cu[s]), int(cu[s + 1]))
        for t in range(L // G):
            kt = k[rows][t * G:(t + 1) * G].transpose(0, 1).contiguous().cpu()  # [H, G, D]
            vt = v[rows][t * G:(t + 1) * G].transpose(0, 1).contiguous().cpu()
            host = kvtile.encode_tiles(kt, vt, preset, paged=True)
            page = int(c.page_table[s, t])
            assert torch.equal(c.pages[page].cpu(), host), (s, t)
            # dequantize_pages is bit-identical to the host decode of the record
            dk, dv = kvtile.dequantize_pages(c, c.page_table[s, t:t + 1].contiguous())
            hk, hv = kvtile.decode_tiles(host, preset, D, dtype=torch.float16)
            assert torch.equal(dk[0].cpu(), hk) and torch.equal(dv[0].cpu(), hv)


def test_append_builds_the_same_pages_as_prefill():
    lengths = [260, 131]
    c, k, v, cu = filled_cache(lengths)
    a = kvtile.PagedCache(2, 400, H, D, q_heads=HQ)
    steps = max(lengths)
    for t in range(steps):
        lens = torch.tensor([min(t + 1, L) if t < L else 0 for L in lengths], dtype=torch.int32)
        a.seq_lens.copy_(lens)
        kn = torch.zeros(2, H, D, dtype=torch.float16, device="cuda")
        vn = torch.zeros_like(kn)
        for s, L in enumerate(lengths):
            if t < L:
                kn[s] = k[int(cu[s]) + t]
                vn[s] = v[int(cu[s]) + t]
        kvtile.append(a, kn, vn)
    for s, L in enumerate(lengths):
        for t in range(L // 128):
            assert torch.equal(a.pages[int(a.page_table[s, t])], c.pages[int(c.page_table[s, t])])
        rem = L % 128
        assert torch.equal(a.tail_k[s, :, :rem], c.tail_k[s, :, :rem])


@pytest.mark.parametrize("sink", [False, True])
@pytest.mark.parametrize("qdtype", [torch.float16, torch.bfloat16])
def test_decode_matches_reference(sink, qdtype):
    lengths = [700, 1, 129, 256, 0, 40]
    c, k, v, cu = filled_cache(lengths, sink=sink)
    q = torch.randn(len(lengths), HQ, D, device="cuda").to(qdtype)
    scale = 1.0 / math.sqrt(D)
    lse = torch.empty(len(lengths), HQ, device="cuda")
    out = kvtile.decode(c, q, lse=lse)
    torch.cuda.synchronize()
    live = [i for i, L in enumerate(lengths) if L > 0]
    ref = attention_ref(q[live], reference_kv(c, lengths, live), scale)
    err = (out[live].float() - ref).abs().amax(dim=(1, 2)).tolist()
    assert max(err) < 2e-2, "max |out - ref| per live row %s: %s" % ([lengths[i] for i in live], err)
    assert torch.all(out[4] == 0), "empty row output %s" % out[4].abs().max().item()
    assert torch.isinf(lse[4]).all(), "empty row lse %s" % lse[4].tolist()


def test_tail_slots_reorder_rows_without_moving_data():
    lengths = [300, 77, 128, 5]
    c, k, v, cu = filled_cache(lengths)
    q = torch.randn(4, HQ, D, device="cuda", dtype=torch.float16)
    out = kvtile.decode(c, q, num_splits=1)
    perm = torch.tensor([2, 0, 3, 1], device="cuda")
    tail_k = c.tail_k.clone()
    c.page_table.copy_(c.page_table[perm].clone())
    c.seq_lens.copy_(c.seq_lens[perm].clone())
    c.tail_slots.copy_(perm.to(torch.int32))
    out2 = kvtile.decode(c, q[perm].contiguous(), num_splits=1)
    assert torch.equal(out2, out[perm])
    assert torch.equal(c.tail_k, tail_k)  # no fp16 data moved
    # a retired row (length 0) needs no slot; appends go to the slot of each row
    c.seq_lens[1] = 0
    c.seq_lens[0] += 1
    kn = torch.randn(4, H, D, device="cuda", dtype=torch.float16)
    kvtile.append(c, kn, kn)
    slot = int(c.tail_slots[0])
    pos = int(c.seq_lens[0]) - 1
    rot = hadamard(D)
    assert torch.allclose(c.tail_k[slot, :, pos % 128].float() @ rot, kn[0].float(), atol=2e-2)


def test_memory_accounting():
    args = dict(max_seqs=5, max_tokens_per_seq=3000, kv_heads=H, head_dim=D, q_heads=HQ, sink=True)
    c = kvtile.PagedCache(**args)
    assert c.nbytes == kvtile.PagedCache.bytes_needed(**args)
    assert c.workspace.numel() > 0
    f = kvtile.Fp16PagedCache(5, 3000, H, D, q_heads=HQ)
    assert c.bytes_per_token() < f.bytes_per_token() / 4.5


@pytest.fixture(scope="module")
def small():
    c, k, v, cu = filled_cache([200, 10])
    q = torch.randn(2, HQ, D, device="cuda", dtype=torch.float16)
    return c, q


def _f16(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


# (name, expected exception, message regex, call(c, q))
BAD = [
    ("q_dtype", TypeError, r"kvtile.decode: q must have dtype", lambda c, q: kvtile.decode(c, q.float())),
    ("q_shape", ValueError, r"kvtile.decode: q must have shape \[2, \*, 128\]",
     lambda c, q: kvtile.decode(c, q[:1].contiguous())),
    ("q_contiguous", ValueError, "q must be contiguous", lambda c, q: kvtile.decode(c, _f16(2, D, HQ).transpose(1, 2))),
    ("q_device", ValueError, "q must be a CUDA tensor", lambda c, q: kvtile.decode(c, q.cpu())),
    ("workspace_size", ValueError, "workspace has", lambda c, q: torch.ops.kvtile.decode(
        *c._cache_args(), q, torch.empty_like(q), None, c.workspace[:16], 0.1, 0, 0)),
    ("workspace_align", ValueError, "16-byte aligned", lambda c, q: torch.ops.kvtile.decode(
        *c._cache_args(), q, torch.empty_like(q), None, c.workspace[1:], 0.1, 0, 0)),
    ("seq_lens_dtype", TypeError, "seq_lens must have dtype", lambda c, q: torch.ops.kvtile.append(
        c.pages, c.page_table, c.seq_lens.long(), c.tail_k, c.tail_v, None, None, None, q[:, :H].contiguous(),
        q[:, :H].contiguous(), 0, None)),
    ("k_new_shape", ValueError, r"k_new must have shape \[2, 2, 128\]", lambda c, q: kvtile.append(c, q, q)),
    ("preset_name", ValueError, "unknown preset", lambda c, q: kvtile.PagedCache(1, 10, H, D, preset="k9v9")),
    ("pages_shape", ValueError, "pages must have shape", lambda c, q: torch.ops.kvtile.decode(
        c.pages[:, :, :16], c.page_table, c.seq_lens, c.tail_k, c.tail_v, None, None, None, q, torch.empty_like(q),
        None, c.workspace, 0.1, 0, 0)),
    ("not_instantiated", ValueError, "no device instantiation for head_dim 64",
     lambda c, q: kvtile.PagedCache(1, 10, H, 64, preset="k2v2_g128")),
    ("sink_pair", ValueError, "sink_k and sink_v must both", lambda c, q: torch.ops.kvtile.decode(
        c.pages, c.page_table, c.seq_lens, c.tail_k, c.tail_v, c.tail_k, None, None, q, torch.empty_like(q), None,
        c.workspace, 0.1, 0, 0)),
    ("q_heads", ValueError, "must be a positive multiple of kv_heads", lambda c, q: kvtile.decode(c, _f16(2, 3, D))),
    # last: the H200 run of 2026-12-01 crashed (SIGSEGV) in this check reached through the op itself
    ("q_heads_op", ValueError, "must be a positive multiple of kv_heads", lambda c, q: torch.ops.kvtile.decode(
        *c._cache_args(), _f16(2, 3, D), _f16(2, 3, D), None, c.workspace, 0.1, 0, 0)),
]


@pytest.mark.parametrize("name,exc,msg,call", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_raise_clear_errors(small, name, exc, msg, call):
    c, q = small
    with pytest.raises(exc, match=msg):
        call(c, q)
    # the cache still works after the rejected call
    out = kvtile.decode(c, q)
    torch.cuda.synchronize()
    assert torch.isfinite(out.float()).all()


def test_cuda_graph_capture_and_replay():
    lengths = [300, 50, 129]
    c, k, v, cu = filled_cache(lengths)
    q = torch.randn(3, HQ, D, device="cuda", dtype=torch.float16)
    kn = torch.randn(3, H, D, device="cuda", dtype=torch.float16)
    out = torch.empty_like(q)
    active = torch.ones(3, dtype=torch.int32, device="cuda")

    def step():
        c.seq_lens.add_(active)
        kvtile.append(c, kn, kn)
        kvtile.decode(c, q, out=out)

    # eager twin on a copy of the cache
    e = kvtile.PagedCache(3, max(lengths) + 128, H, D, q_heads=HQ)
    for name in ("pages", "page_table", "seq_lens", "tail_k", "tail_v", "tail_slots"):
        getattr(e, name).copy_(getattr(c, name))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (kernel attributes), on a scratch cache for append
        kvtile.decode(c, q, out=out)
        w = kvtile.PagedCache(1, 128, H, D, q_heads=HQ)
        w.seq_lens.fill_(1)
        kvtile.append(w, kn[:1].contiguous(), kn[:1].contiguous())
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for it in range(130):  # crosses a tile boundary of every row: append quantizes inside the graph
        kn.copy_(torch.randn_like(kn))
        q.copy_(torch.randn_like(q))
        g.replay()
        e.seq_lens.add_(1)
        kvtile.append(e, kn, kn)
        ref = kvtile.decode(e, q)
        assert torch.equal(out, ref), it
    assert torch.equal(c.pages, e.pages)
    assert torch.equal(c.seq_lens, e.seq_lens)


def test_fp16_baseline_matches_reference():
    lengths = [300, 64, 1]
    f = kvtile.Fp16PagedCache(3, 400, H, D, q_heads=HQ)
    k, v = make_tokens(lengths)
    f.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
    start = 0
    kv = []
    for s, L in enumerate(lengths):
        f.write(k[start:start + L], v[start:start + L], torch.arange(L, device="cuda"),
                torch.full((L,), s, device="cuda", dtype=torch.long))
        kv.append((k[start:start + L].float().transpose(0, 1), v[start:start + L].float().transpose(0, 1)))
        start += L
    q = torch.randn(3, HQ, D, device="cuda", dtype=torch.float16)
    out = kvtile.fp16_decode(f, q)
    ref = attention_ref(q, kv, 1.0 / math.sqrt(D))
    assert (out.float() - ref).abs().max().item() < 1e-2


def test_torch_compile_sees_the_ops():
    if not hasattr(torch, "compile") or not hasattr(torch.library, "register_fake"):
        pytest.skip("torch.compile / torch.library.register_fake not in this torch")
    c, k, v, cu = filled_cache([300, 20])
    q = torch.randn(2, HQ, D, device="cuda", dtype=torch.float16)

    def f(q, out):
        torch.ops.kvtile.decode(c.pages, c.page_table, c.seq_lens, c.tail_k, c.tail_v, None, None, c.tail_slots,
                                q * 1.0, out, None, c.workspace, 1.0 / math.sqrt(D), 0, 0)
        return out * 2.0

    out = torch.empty_like(q)
    got = torch.compile(f, fullgraph=True)(q, out)
    assert torch.equal(got, kvtile.decode(c, q) * 2.0)
