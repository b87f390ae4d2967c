# Speculative decoding and forks in the Python package: append_drafts /
# commit_drafts (exact rollback against a cache that appended only the
# accepted tokens), the verify step's attention, fork with shared pages, CUDA
# graph replay; and the argument checks, which run without a GPU.
import pytest
import torch

import kvtile
from conftest import requires_gpu

D, H, HQ = 128, 2, 4


# ---------------------------------------------------------------- no GPU needed


def test_draft_bytes_formula():
    for preset in ("k4v2_g128", "k2v2_g128"):
        G = kvtile.preset_info(preset, D)["tile_tokens"]
        assert kvtile.draft_bytes(4, H, D, preset) == 4 * H * (2 * (G + kvtile.MAX_DRAFT_TOKENS) * D * 2 + 8)
    assert kvtile.draft_bytes(0, H, D) == 0
    with pytest.raises(ValueError, match="kv_heads"):
        kvtile.draft_bytes(4, 0, D)


def test_enable_drafts_allocates_the_staging_area():
    c = kvtile.PagedCache(3, 300, H, D, device="cpu")
    before = c.nbytes
    assert c.enable_drafts() is c
    G = c.tile_tokens
    assert c.draft_k.shape == (3, H, G + 8, D) and c.draft_k.dtype == torch.float16
    assert c.draft_state.shape == (3, H, 2) and c.draft_state.dtype == torch.int32
    assert int(c.draft_state.abs().sum()) == 0  # zero: no drafts pending
    assert c.nbytes - before == kvtile.draft_bytes(3, H, D)
    c.enable_drafts()  # idempotent
    assert c.nbytes - before == kvtile.draft_bytes(3, H, D)


def test_drafts_need_the_staging_area():
    c = kvtile.PagedCache(2, 300, H, D, device="cpu")
    with pytest.raises(RuntimeError, match="enable_drafts"):
        kvtile.append_drafts(c, None, None, None)
    with pytest.raises(RuntimeError, match="enable_drafts"):
        kvtile.commit_drafts(c, None)


def test_validate_fork_rejects_bad_pairs():
    c = kvtile.PagedCache(4, 300, H, D, device="cpu")
    c.seq_lens[0] = 40
    c.seq_lens[2] = 7
    kvtile.validate_fork(c, [0, 0], [1, 3])  # free slots: fine
    for src, dst in (([0], [2]),          # a live row's slot
                     ([0], [0]),          # onto itself
                     ([0, 2], [1, 1]),    # one destination twice
                     ([0, 1], [1, 3]),    # a destination that is also a source
                     ([0], [4]), ([-1], [1])):  # out of range
        with pytest.raises(ValueError, match="fork only into free slots"):
            kvtile.validate_fork(c, src, dst)
    with pytest.raises(ValueError, match="must be on the host"):
        kvtile.validate_fork(c, [0], [1], seq_lens=torch.zeros(4, dtype=torch.int32, device="meta"))


def test_fork_argument_checks_before_any_device_work():
    c = kvtile.PagedCache(3, 300, H, D, device="cpu")
    c.seq_lens[0] = 10
    c.seq_lens[1] = 3
    with pytest.raises(ValueError, match="same row"):
        kvtile.fork(c, 0, 0)
    with pytest.raises(ValueError, match="dst_row"):
        kvtile.fork(c, 0, 3)
    with pytest.raises(ValueError, match="is live"):
        kvtile.fork(c, 0, 1)
    with pytest.raises(ValueError, match="fork only into free slots"):
        kvtile.fork(c, 0, 2, dst_slot=1)  # row 2 free, but slot 1 belongs to live row 1


# ---------------------------------------------------------------- GPU


def tokens(n, seed, dtype=torch.float16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.randn(n, H, D, device="cuda", generator=g)
    k[:, :, 3] += 5.0
    v = torch.randn(n, H, D, device="cuda", generator=g) * 0.5 + 0.2
    return k.to(dtype), v.to(dtype)


def cache(lengths, sink, preset="k4v2_g128", drafts=True, extra_tokens=200):
    c = kvtile.PagedCache(len(lengths), max(lengths) + extra_tokens, H, D, q_heads=HQ, preset=preset, sink=sink,
                          max_q_tokens=8)
    if drafts:
        c.enable_drafts()
    return c


def prefill_same(caches, lengths, seed):
    k, v = tokens(sum(lengths), seed)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    for c in caches:
        c.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        kvtile.prefill(c, k, v, cu)


def readable_equal(a, b, rows=None):
    """Everything a reader reads of each row: lengths, records of complete tiles, sink, live tail slots."""
    torch.cuda.synchronize()
    la, lb = a.seq_lens.cpu(), b.seq_lens.cpu()
    G = a.tile_tokens
    for s in (rows if rows is not None else range(a.max_seqs)):
        if int(la[s]) != int(lb[s]):
            return "row %d: lengths %d != %d" % (s, int(la[s]), int(lb[s]))
        L = int(la[s])
        full = L // G
        first = 1 if a.sink_k is not None and full > 0 else 0
        if first and not (torch.equal(a.sink_k[a.tail_slots[s]], b.sink_k[b.tail_slots[s]])
                          and torch.equal(a.sink_v[a.tail_slots[s]], b.sink_v[b.tail_slots[s]])):
            return "row %d: sink" % s
        for t in range(first, full):
            if not torch.equal(a.pages[a.page_table[s, t]], b.pages[b.page_table[s, t]]):
                return "row %d: record of tile %d" % (s, t)
        r = L % G
        sa, sb = int(a.tail_slots[s]), int(b.tail_slots[s])
        if not (torch.equal(a.tail_k[sa, :, :r], b.tail_k[sb, :, :r])
                and torch.equal(a.tail_v[sa, :, :r], b.tail_v[sb, :, :r])):
            return "row %d: tail" % s
    return ""


def append_one_by_one(c, k, v, counts, cu):
    """Plain appends (the reference): row s gets its first counts[s] tokens, k/v rows cu[s] + i."""
    for i in range(max(counts)):
        rows = [s for s in range(c.max_seqs) if i < counts[s]]
        kk = torch.zeros(c.max_seqs, H, D, dtype=k.dtype, device="cuda")
        vv = torch.zeros_like(kk)
        lens = c.seq_lens.cpu()
        step = torch.zeros_like(lens)  # rows without a token in this step: length 0 (skipped)
        for s in rows:
            kk[s], vv[s] = k[cu[s] + i], v[cu[s] + i]
            lens[s] += 1
            step[s] = lens[s]
        c.seq_lens.copy_(step)
        kvtile.append(c, kk, vv)
        c.seq_lens.copy_(lens)


@requires_gpu
@pytest.mark.parametrize("sink", [False, True])
def test_commit_equals_appending_only_the_accepted_tokens(sink):
    lengths = [125, 3, 130, 60]
    spec, ref = cache(lengths, sink), cache(lengths, sink, drafts=False)
    prefill_same([spec, ref], lengths, 1)
    plans = [([5, 3, 0, 8], [0, 3, 0, 8]),   # row 0: a draft completes tile 0 and is rolled back
             ([5, 3, 2, 8], [1, 0, 2, 4]),
             ([8, 8, 8, 8], [8, 1, 5, 0]),   # row 0 completes the tile with accepted drafts
             ([2, 7, 1, 6], [2, 7, 1, 6])]
    flags = torch.zeros(len(lengths), dtype=torch.int32, device="cuda")
    for step, (n, a) in enumerate(plans):
        cu = [0]
        for x in n:
            cu.append(cu[-1] + x)
        k, v = tokens(cu[-1], 100 + step)
        cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
        spec.seq_lens += torch.tensor(n, dtype=torch.int32, device="cuda")
        kvtile.append_drafts(spec, k, v, cu_t, flags=flags)
        # the verify state reads as a plain append of every draft
        everything = cache(lengths, sink, drafts=False)
        everything.pages.copy_(ref.pages)
        everything.tail_k.copy_(ref.tail_k)
        everything.tail_v.copy_(ref.tail_v)
        if sink:
            everything.sink_k.copy_(ref.sink_k)
            everything.sink_v.copy_(ref.sink_v)
        everything.seq_lens.copy_(ref.seq_lens)
        append_one_by_one(everything, k, v, n, cu)
        assert readable_equal(spec, everything) == ""
        q = torch.randn(cu[-1], HQ, D, device="cuda").half()
        assert torch.equal(kvtile.decode(spec, q, cu_seqlens_q=cu_t, max_q_tokens=8),
                           kvtile.decode(everything, q, cu_seqlens_q=cu_t, max_q_tokens=8))
        kvtile.commit_drafts(spec, torch.tensor(a, dtype=torch.int32, device="cuda"), flags=flags)
        append_one_by_one(ref, k, v, a, cu)
        assert readable_equal(spec, ref) == "", "step %d" % step
    assert int(flags.abs().sum()) == 0
    assert int(spec.draft_state.abs().sum()) == 0


@requires_gpu
def test_bad_drafts_are_flagged_and_change_nothing():
    lengths = [20, 0]
    c = cache(lengths, False)
    prefill_same([c], lengths, 2)
    flags = torch.zeros(2, dtype=torch.int32, device="cuda")
    before = (c.tail_k.clone(), c.seq_lens.clone())
    kvtile.commit_drafts(c, torch.tensor([0, -1], dtype=torch.int32, device="cuda"), flags=flags)  # nothing pending
    assert int(flags[0]) & kvtile.FLAG_BAD_DRAFTS and int(flags[1]) == 0
    assert torch.equal(c.tail_k, before[0]) and torch.equal(c.seq_lens, before[1])
    k, v = tokens(3, 3)
    c.seq_lens[0] += 3
    kvtile.append_drafts(c, k, v, torch.tensor([0, 3, 3], dtype=torch.int32, device="cuda"))
    flags.zero_()
    kvtile.commit_drafts(c, torch.tensor([4, -1], dtype=torch.int32, device="cuda"), flags=flags)  # 4 > 3
    assert int(flags[0]) & kvtile.FLAG_BAD_DRAFTS
    assert int(c.seq_lens[0]) == 23
    flags.zero_()
    kvtile.append_drafts(c, k, v, torch.tensor([0, 3, 3], dtype=torch.int32, device="cuda"), flags=flags)  # pending
    assert int(flags[0]) & kvtile.FLAG_BAD_DRAFTS
    kvtile.commit_drafts(c, torch.tensor([1, -1], dtype=torch.int32, device="cuda"))
    assert int(c.seq_lens[0]) == 21


@requires_gpu
@pytest.mark.parametrize("sink", [False, True])
def test_fork_continues_like_an_unshared_copy(sink):
    prefix = 2 * 128 + 40
    shared, plain = cache([prefix, 0, 0], sink), cache([prefix, prefix, prefix], sink, drafts=False)
    plain.enable_drafts()
    k, v = tokens(prefix, 5)
    shared.seq_lens.copy_(torch.tensor([prefix, 0, 0], dtype=torch.int32))
    kvtile.prefill(shared, k, v, torch.tensor([0, prefix, prefix, prefix], dtype=torch.int32, device="cuda"))
    plain.seq_lens.copy_(torch.tensor([prefix] * 3, dtype=torch.int32))  # the prefix appended to every row
    kvtile.prefill(plain, k.repeat(3, 1, 1), v.repeat(3, 1, 1),
                   torch.tensor([0, prefix, 2 * prefix, 3 * prefix], dtype=torch.int32, device="cuda"))
    kvtile.fork(shared, 0, 1)
    kvtile.fork(shared, 0, 2)
    assert torch.equal(shared.page_table[1, :2], shared.page_table[0, :2])
    assert readable_equal(shared, plain) == ""
    pages_before = shared.pages[shared.page_table[0, :2].long()].clone()
    for step in range(12):  # divergent continuations: every row its own tokens, drafts and acceptance
        n = [1 + (step + r) % 8 for r in range(3)]
        a = [(step * (r + 1)) % (n[r] + 1) for r in range(3)]
        cu_l = [0, n[0], n[0] + n[1], sum(n)]
        cu_t = torch.tensor(cu_l, dtype=torch.int32, device="cuda")
        dk, dv = tokens(sum(n), 50 + step)
        q = torch.randn(sum(n), HQ, D, device="cuda").half()
        for c in (shared, plain):
            c.seq_lens += torch.tensor(n, dtype=torch.int32, device="cuda")
            kvtile.append_drafts(c, dk, dv, cu_t)
        assert torch.equal(kvtile.decode(shared, q, cu_seqlens_q=cu_t, max_q_tokens=8),
                           kvtile.decode(plain, q, cu_seqlens_q=cu_t, max_q_tokens=8))
        acc = torch.tensor(a, dtype=torch.int32, device="cuda")
        kvtile.commit_drafts(shared, acc)
        kvtile.commit_drafts(plain, acc)
        assert readable_equal(shared, plain) == "", "step %d" % step
    start = 1 if sink else 0
    assert torch.equal(shared.pages[shared.page_table[0, :2].long()][start:], pages_before[start:])


@requires_gpu
def test_verify_step_under_cuda_graph_replay():
    lengths = [126, 40]
    g_cache, e_cache = cache(lengths, True), cache(lengths, True)
    prefill_same([g_cache, e_cache], lengths, 7)
    kbuf, vbuf = tokens(16, 0)
    qbuf = torch.zeros(16, HQ, D, device="cuda").half()
    cu = torch.zeros(3, dtype=torch.int32, device="cuda")
    acc = torch.zeros(2, dtype=torch.int32, device="cuda")
    lens = g_cache.seq_lens.clone()

    def step(c):
        kvtile.append_drafts(c, kbuf, vbuf, cu)
        out = kvtile.decode(c, qbuf, cu_seqlens_q=cu, max_q_tokens=8)
        kvtile.commit_drafts(c, acc)
        return out

    def load(n, a, seed):
        k, v = tokens(16, seed)
        kbuf.copy_(k)
        vbuf.copy_(v)
        qbuf.copy_(torch.randn(16, HQ, D, device="cuda").half())
        cu.copy_(torch.tensor([0, n[0], n[0] + n[1]], dtype=torch.int32))
        acc.copy_(torch.tensor(a, dtype=torch.int32))

    load([4, 2], [2, 1], 1)
    g_cache.seq_lens += torch.tensor([4, 2], dtype=torch.int32, device="cuda")
    step(g_cache)  # warm-up outside the capture (the decode's one-time setup)
    e_cache.seq_lens += torch.tensor([4, 2], dtype=torch.int32, device="cuda")
    step(e_cache)
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        lens.copy_(g_cache.seq_lens)
        g_cache.seq_lens += torch.tensor([3, 3], dtype=torch.int32, device="cuda")
        load([3, 3], [0, 3], 2)
        with torch.cuda.graph(graph, stream=s):
            out = step(g_cache)
    torch.cuda.current_stream().wait_stream(s)
    g_cache.seq_lens.copy_(lens)  # the capture ran nothing
    for i, (n, a) in enumerate([([3, 3], [0, 3]), ([8, 1], [8, 0]), ([5, 8], [1, 7]), ([2, 2], [2, 2])]):
        load(n, a, 10 + i)
        for c in (g_cache, e_cache):
            c.seq_lens += torch.tensor(n, dtype=torch.int32, device="cuda")
        graph.replay()
        ref = step(e_cache)
        total = n[0] + n[1]
        assert torch.equal(out[:total], ref[:total])
        assert readable_equal(g_cache, e_cache) == "", "replay %d" % i
