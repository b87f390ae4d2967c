"""A minimal continuous-batching engine over a Hugging Face Llama model, with
kvtile's paged quantized cache or kvtile's fp16 paged cache (the baseline).

It shows what an engine does with kvtile: one PagedCache per layer (rows =
batch slots, shared seq_lens), an eager prefill per request as it joins
(kvtile.prefill), and a decode step for all rows (kvtile.append, then
kvtile.decode) captured once in a CUDA graph and replayed every step with new
lengths. Requests join and leave between steps; an empty row has length 0
(append skips it, decode returns 0 for it).

The model's own modules supply the weights (projections, norms, MLP, rotary
embedding); the forward pass is written out here so that it is graph-safe.

Speculative decoding (Engine(..., spec_k=k), quantized caches; run_workload_spec):
every step verifies, for each row, its pending token plus up to k <= 7
prompt-lookup drafts (ragged per row; at most 8 new tokens per row, the
multi-query kernel's bound): kvtile.append_drafts + kvtile.decode(cu_seqlens_q)
for all rows under one CUDA graph, then the host compares the drafts with the
greedy predictions and kvtile.commit_drafts keeps the accepted prefix of each
row (a second, small graph); rejected tokens leave no trace in the cache.
Requests that share a prompt prefix start by fork: the prefix is prefilled
once into a donor row, each request's row is forked from it (complete pages
shared by id, the fp16 tail copied; Engine.fork_row) and gets its own suffix
(Engine.extend, attending the shared prefix through the quantized cache).
The donor row is kept (its pages referenced) until its last request leaves.

PlannedEngine (examples/torch/capacity_bench.py) is the step an engine runs at scale: the decode step of the
first n rows (n: the step's concurrency) with attention through kvtile.DecodePlan, planned from host lengths
before each step and run under one CUDA graph per n; an optional page pool shared by all rows (requests
admitted when the pages of their length are free); chunked prefill that reads the earlier chunks back from the
cache; synthetic fills through the caches' own writers; and timings of a step's attention and cache writes.
"""
import itertools
import math
import time

import torch
import torch.nn.functional as F

import kvtile


def _rope(model):
    """The model's rotary embedding module and the function that applies it to q and k: a model that brings its own
    (attribute kvtile_apply_rope, e.g. capacity_bench.py's) or transformers' Llama function."""
    apply = getattr(model, "kvtile_apply_rope", None)
    if apply is None:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as apply
    return model.model.rotary_emb, apply


class Engine:
    def __init__(self, model, backend="k4v2_g128", max_batch=16, max_len=1024, use_graph=True, spec_k=0):
        cfg = model.config
        self.spec_k = int(spec_k)
        if self.spec_k and backend == "fp16":
            raise ValueError("speculative decoding needs a quantized cache (the fp16 baseline decodes one token per row)")
        if not 0 <= self.spec_k < kvtile.MAX_Q_TOKENS:
            raise ValueError("spec_k must be in [0, %d] (pending token + drafts <= %d)"
                             % (kvtile.MAX_Q_TOKENS - 1, kvtile.MAX_Q_TOKENS))
        self.model = model
        self.backend = backend
        self.max_batch = max_batch
        self.max_len = max_len
        self.layers = model.model.layers
        self.hq = cfg.num_attention_heads
        self.hkv = cfg.num_key_value_heads
        self.d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = 1.0 / math.sqrt(self.d)
        dev = next(model.parameters()).device
        self.device = dev
        self.seq_lens = torch.zeros(max_batch, dtype=torch.int32, device=dev)
        self.caches = []
        for _ in self.layers:
            c = self._new_cache()
            c.seq_lens = self.seq_lens  # one length per row for every layer
            self.caches.append(c)
        self.rotary, self.apply_rope = _rope(model)
        # step inputs / outputs (static for the graph)
        self.tokens = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.active = torch.zeros(max_batch, dtype=torch.int32, device=dev)
        self.next_tokens = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.use_graph = use_graph
        self.graph = None
        self.zero_cu = torch.zeros(max_batch + 1, dtype=torch.int32, device=dev)
        if self.spec_k:  # verify step buffers (static for its graph): max_batch x 8 token slots
            slots = max_batch * kvtile.MAX_Q_TOKENS
            self.v_tokens = torch.zeros(slots, dtype=torch.long, device=dev)
            self.v_pos = torch.zeros(slots, dtype=torch.long, device=dev)
            self.v_cu = torch.zeros(max_batch + 1, dtype=torch.int32, device=dev)
            self.v_n = torch.zeros(max_batch, dtype=torch.int32, device=dev)
            self.v_pred = torch.zeros(slots, dtype=torch.long, device=dev)
            self.v_acc = torch.zeros(max_batch, dtype=torch.int32, device=dev)
            self.v_graph = self.c_graph = None

    def _new_cache(self):
        """One layer's cache: max_batch rows of max_len tokens, each row owning its pages."""
        if self.backend == "fp16":
            return kvtile.Fp16PagedCache(self.max_batch, self.max_len, self.hkv, self.d, q_heads=self.hq,
                                         device=self.device)
        c = kvtile.PagedCache(self.max_batch, self.max_len, self.hkv, self.d, q_heads=self.hq, preset=self.backend,
                              device=self.device, max_q_tokens=kvtile.MAX_Q_TOKENS if self.spec_k else 1)
        if self.spec_k:
            c.enable_drafts()
        return c

    def cache_bytes(self):
        return sum(c.nbytes for c in self.caches)

    def bytes_per_token(self):
        return sum(c.bytes_per_token() for c in self.caches)

    # ------------------------------------------------------------ prefill (eager, one request)
    def qkv(self, layer, x, cos, sin):
        """Attention inputs of `layer` for hidden states x [B, T, hidden]: q [B, hq, T, d], k, v [B, hkv, T, d],
        rotary applied."""
        b, t = x.shape[0], x.shape[1]
        h = layer.input_layernorm(x)
        a = layer.self_attn
        q = a.q_proj(h).view(b, t, self.hq, self.d).transpose(1, 2)
        k = a.k_proj(h).view(b, t, self.hkv, self.d).transpose(1, 2)
        v = a.v_proj(h).view(b, t, self.hkv, self.d).transpose(1, 2)
        q, k = self.apply_rope(q, k, cos, sin)
        return q, k, v

    @torch.no_grad()
    def prefill(self, row, prompt):
        """Writes prompt (1-D long tensor) into row; returns the first generated token (greedy)."""
        t = prompt.numel()
        if t > self.max_len:
            raise ValueError("prompt longer than max_len")
        x = self.model.model.embed_tokens(prompt[None])
        pos = torch.arange(t, device=self.device)[None]
        cos, sin = self.rotary(x, pos)
        self.seq_lens[row] = t
        cu = torch.zeros(self.max_batch + 1, dtype=torch.int32, device=self.device)
        cu[row + 1:] = t
        for layer, cache in zip(self.layers, self.caches):
            a = layer.self_attn
            q, k, v = self.qkv(layer, x, cos, sin)
            rep = self.hq // self.hkv
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                               is_causal=True, scale=self.scale)
            x = x + a.o_proj(o.transpose(1, 2).reshape(1, t, self.hq * self.d))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            kt = k[0].transpose(0, 1).contiguous()  # [t, hkv, d]
            vt = v[0].transpose(0, 1).contiguous()
            if self.backend == "fp16":
                rows = torch.full((t,), row, device=self.device, dtype=torch.long)
                cache.write(kt, vt, torch.arange(t, device=self.device), rows)
            else:
                kvtile.prefill(cache, kt, vt, cu, max_tokens_per_seq=t)
        logits = self.model.lm_head(self.model.model.norm(x[:, -1]))
        return int(logits.argmax(-1))

    # ------------------------------------------------------------ decode step over rows [0, n)
    def _attend(self, i, cache, q, n):
        """Attention of layer i's rows [0, n) (the one-call ops; PlannedEngine runs its plans)."""
        if self.backend == "fp16":
            return kvtile.fp16_decode(cache, q, softmax_scale=self.scale, rows=n)
        return kvtile.decode(cache, q, softmax_scale=self.scale, rows=n)

    @torch.no_grad()
    def _decode_rows(self, n):
        self.seq_lens[:n].add_(self.active[:n])
        pos = (self.seq_lens[:n].long() - 1).clamp_(min=0)
        x = self.model.model.embed_tokens(self.tokens[:n])[:, None]  # [n, 1, hidden]
        cos, sin = self.rotary(x, pos[:, None])
        for i, (layer, cache) in enumerate(zip(self.layers, self.caches)):
            a = layer.self_attn
            q, k, v = self.qkv(layer, x, cos, sin)
            q = q[:, :, 0].contiguous()  # [n, hq, d]
            k = k[:, :, 0].contiguous()
            v = v[:, :, 0].contiguous()
            if self.backend == "fp16":
                cache.write(k, v, pos)
            else:
                kvtile.append(cache, k, v, rows=n)
            o = self._attend(i, cache, q, n)
            x = x + a.o_proj(o.reshape(n, 1, self.hq * self.d))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.model.lm_head(self.model.model.norm(x[:, 0]))
        self.next_tokens[:n].copy_(logits.argmax(-1))

    def _capture(self, fn):
        """fn run once eagerly on a side stream (kernel attributes, allocator), then captured in a CUDA graph;
        the device lengths are as before (fn may add to them)."""
        saved = self.seq_lens.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        self.seq_lens.copy_(saved)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # capture records the work, runs none of it
            fn()
        self.seq_lens.copy_(saved)
        return g

    def step(self):
        """One decode step of every row (captured in a CUDA graph on the first call unless use_graph is off)."""
        if not self.use_graph:
            self._decode_rows(self.max_batch)
            return
        if self.graph is None:
            self.graph = self._capture(lambda: self._decode_rows(self.max_batch))
        self.graph.replay()

    def own_pages(self, row):
        return torch.arange(self.caches[0].max_pages_per_seq, dtype=torch.int32, device=self.device) + \
            row * self.caches[0].max_pages_per_seq

    def release_row(self, row):
        """A row leaves: length 0, and its page-table row back to its own pages (a forked row listed a donor's)."""
        self.seq_lens[row] = 0
        if self.backend != "fp16":
            for c in self.caches:
                c.page_table[row].copy_(self.own_pages(row))

    def fork_row(self, src, dst):
        """Row dst (free) starts from row src's state in every layer: fp16 tail and sink copied into dst's slot,
        complete tiles shared by page id (what kvtile.fork does, with the one seq_lens of all layers)."""
        length = int(self.seq_lens[src])
        full = length // self.caches[0].tile_tokens
        kvtile.validate_fork(self.caches[0], [src], [dst])  # slot = row in this engine
        st = torch.tensor([src], dtype=torch.int32, device=self.device)
        dt = torch.tensor([dst], dtype=torch.int32, device=self.device)
        for c in self.caches:
            kvtile.fork_slots(c, st, dt)
            c.page_table[dst].copy_(self.own_pages(dst))
            c.page_table[dst, :full] = c.page_table[src, :full]
        self.seq_lens[dst] = length

    @torch.no_grad()
    def extend(self, row, tokens):
        """Appends tokens (1-D long) to a live row in chunks of up to 8, each attending the whole row through the
        quantized cache (kvtile.prefill + multi-query kvtile.decode); returns the next token (greedy)."""
        b = self.max_batch
        for c0 in range(0, tokens.numel(), kvtile.MAX_Q_TOKENS):
            chunk = tokens[c0:c0 + kvtile.MAX_Q_TOKENS]
            t = chunk.numel()
            start = int(self.seq_lens[row])
            x = self.model.model.embed_tokens(chunk[None])
            cos, sin = self.rotary(x, torch.arange(start, start + t, device=self.device)[None])
            cu = torch.zeros(b + 1, dtype=torch.int32, device=self.device)
            cu[row + 1:] = t
            self.seq_lens[row] = start + t
            for layer, cache in zip(self.layers, self.caches):
                a = layer.self_attn
                q, k, v = self.qkv(layer, x, cos, sin)
                kvtile.prefill(cache, k[0].transpose(0, 1).contiguous(), v[0].transpose(0, 1).contiguous(), cu,
                               max_tokens_per_seq=t)
                o = kvtile.decode(cache, q[0].transpose(0, 1).contiguous(), softmax_scale=self.scale,
                                  cu_seqlens_q=cu, max_q_tokens=kvtile.MAX_Q_TOKENS)
                x = x + a.o_proj(o.reshape(1, t, self.hq * self.d))
                x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.model.lm_head(self.model.model.norm(x[:, -1]))
        return int(logits.argmax(-1))

    @torch.no_grad()
    def _verify(self):
        """All rows: seq_lens += v_n, the v_n[s] tokens of row s (flat at v_cu[s]..) appended as drafts and
        attended (causal among them); v_pred = the greedy prediction after every token slot."""
        n = self.v_tokens.numel()
        self.seq_lens.add_(self.v_n)
        x = self.model.model.embed_tokens(self.v_tokens)[None]  # [1, slots, hidden]
        cos, sin = self.rotary(x, self.v_pos[None])
        for layer, cache in zip(self.layers, self.caches):
            a = layer.self_attn
            q, k, v = self.qkv(layer, x, cos, sin)
            kvtile.append_drafts(cache, k[0].transpose(0, 1).contiguous(), v[0].transpose(0, 1).contiguous(),
                                 self.v_cu)
            o = kvtile.decode(cache, q[0].transpose(0, 1).contiguous(), softmax_scale=self.scale,
                              cu_seqlens_q=self.v_cu, max_q_tokens=kvtile.MAX_Q_TOKENS)
            # slots past v_cu[-1] carry garbage (decode leaves them unwritten): row-local, never read
            x = x + a.o_proj(o.reshape(1, n, self.hq * self.d))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        self.v_pred.copy_(self.model.lm_head(self.model.model.norm(x[0])).argmax(-1))

    def _commit(self):
        for c in self.caches:  # every layer writes the same committed lengths into the shared seq_lens
            kvtile.commit_drafts(c, self.v_acc)

    def verify(self):
        if not self.use_graph or self.v_graph is None:
            self._verify()  # the first step runs eagerly (sets the kernels up); commit() then captures both
            return
        self.v_graph.replay()

    def commit(self):
        if not self.use_graph:
            self._commit()
            return
        if self.c_graph is None:
            self._commit()
            torch.cuda.synchronize()
            self.v_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.v_graph):  # capture records the work, runs none of it
                self._verify()
            self.c_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.c_graph):
                self._commit()
            return
        self.c_graph.replay()


def lookup_drafts(history, k, ngram_max=3):
    """Prompt-lookup drafts: the up to k tokens that followed the latest earlier occurrence of the history's last
    n-gram (n = ngram_max .. 1)."""
    for n in range(min(ngram_max, len(history) - 1), 0, -1):
        tail = history[-n:]
        for i in range(len(history) - n - 1, -1, -1):
            if history[i:i + n] == tail:
                return history[i + n:i + n + k]
    return []


def run_workload_spec(engine, requests, max_batch):
    """Continuous batching with speculative decoding (engine.spec_k drafts per row and step, prompt lookup).
    requests: list of (prompt tensor, n_new) or (prompt tensor, n_new, prefix_len): requests whose
    prompt[:prefix_len] is the same start from one donor row by fork. Returns tokens per request and stats."""
    k = engine.spec_k
    B = max_batch
    queue = list(enumerate(requests))
    rows = {}  # row -> [request id, remaining, generated, history (prompt + generated), length in cache, donor]
    donors = {}  # prefix tuple -> [row, live requests]
    out = [None] * len(requests)
    generated = drafted = accepted = verify_steps = 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step_time = 0.0

    def free_row():
        busy = set(rows) | {d[0] for d in donors.values()}
        return next((r for r in range(B) if r not in busy), None)

    def leave(r):
        st = rows.pop(r)
        out[st[0]] = st[2]
        engine.release_row(r)
        if st[5] is not None:
            d = donors[st[5]]
            d[1] -= 1
            if d[1] == 0 and not any(len(q[1]) > 2 and tuple(q[1][0][:q[1][2]].tolist()) == st[5] for q in queue):
                engine.release_row(d[0])
                del donors[st[5]]

    while queue or rows:
        while queue:  # join
            r = free_row()
            if r is None:
                break
            rid, req = queue[0]
            prompt, n_new = req[0], req[1]
            plen = req[2] if len(req) > 2 else 0
            key = tuple(prompt[:plen].tolist()) if 0 < plen < prompt.numel() else None
            if key is not None and key not in donors:
                engine.prefill(r, prompt[:plen])  # the donor: the shared prefix once
                donors[key] = [r, 0]
                continue
            queue.pop(0)
            if key is not None:
                engine.fork_row(donors[key][0], r)
                donors[key][1] += 1
                first = engine.extend(r, prompt[plen:])
            else:
                first = engine.prefill(r, prompt)
            hist = prompt.tolist() + [first]
            rows[r] = [rid, n_new - 1, [first], hist, prompt.numel(), key]
            generated += 1
            if n_new - 1 <= 0:
                leave(r)
        if not rows:
            continue
        # the verify batch: per row its pending token + drafts; donors take part with no tokens (commit 0)
        toks, pos, cu, n = [], [], [0], [0] * B
        drafts = {}
        for r in range(B):
            if r in rows:
                st = rows[r]
                d = lookup_drafts(st[3], min(k, st[1] - 1)) if st[1] > 1 else []
                drafts[r] = d
                seq = [st[2][-1]] + d
                n[r] = len(seq)
                toks += seq
                pos += range(st[4], st[4] + len(seq))
            cu.append(cu[-1] + n[r])
        pad = engine.v_tokens.numel() - len(toks)
        torch.cuda.synchronize()
        ts = time.perf_counter()
        engine.v_tokens.copy_(torch.tensor(toks + [0] * pad))
        engine.v_pos.copy_(torch.tensor(pos + [0] * pad))
        engine.v_cu.copy_(torch.tensor(cu, dtype=torch.int32))
        engine.v_n.copy_(torch.tensor(n, dtype=torch.int32))
        engine.verify()
        pred = engine.v_pred[:cu[-1]].tolist()  # synchronizes
        acc = [-1] * B
        for d in donors.values():
            acc[d[0]] = 0  # live, no drafts: commit 0 of 0
        for r, st in rows.items():
            p, d = pred[cu[r]:cu[r + 1]], drafts[r]
            a = 0
            while a < len(d) and d[a] == p[a]:
                a += 1
            new = (d[:a] + [p[a]])[:st[1]]
            acc[r] = 1 + a  # the pending token and the accepted drafts enter the cache
            st[2] += new
            st[3] += new
            st[4] += 1 + a
            st[1] -= len(new)
            generated += len(new)
            drafted += len(d)
            accepted += a
        engine.v_acc.copy_(torch.tensor(acc, dtype=torch.int32))
        engine.commit()
        torch.cuda.synchronize()
        step_time += time.perf_counter() - ts
        verify_steps += 1
        for r in [r for r, st in rows.items() if st[1] <= 0]:
            leave(r)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return out, {"wall_s": wall, "generated_tokens": generated, "tokens_per_s": generated / wall,
                 "verify_steps": verify_steps, "verify_step_ms": 1e3 * step_time / max(verify_steps, 1),
                 "drafted": drafted, "accepted": accepted, "acceptance": accepted / max(drafted, 1),
                 "tokens_per_step": (generated - len(requests)) / max(verify_steps, 1)}


def run_workload(engine, requests, max_batch):
    """requests: list of (prompt tensor, n_new). Returns tokens per request and timings."""
    queue = list(enumerate(requests))
    rows = {}  # row -> [request id, remaining, generated list]
    out = [None] * len(requests)
    generated = 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step_time = 0.0
    steps = 0
    while queue or rows:
        # join: fill free rows
        for r in range(max_batch):
            if r not in rows and queue:
                rid, (prompt, n_new) = queue.pop(0)
                first = engine.prefill(r, prompt)
                rows[r] = [rid, n_new - 1, [first]]
                engine.tokens[r] = first
                engine.active[r] = 1
                generated += 1
        # finished after prefill only
        for r in [r for r, st in rows.items() if st[1] <= 0]:
            out[rows[r][0]] = rows[r][2]
            engine.active[r] = 0
            engine.seq_lens[r] = 0
            del rows[r]
        if not rows:
            continue
        torch.cuda.synchronize()
        ts = time.perf_counter()
        engine.step()
        nxt = engine.next_tokens.tolist()  # synchronizes
        step_time += time.perf_counter() - ts
        steps += 1
        engine.tokens.copy_(engine.next_tokens)
        for r in list(rows):
            st = rows[r]
            st[2].append(nxt[r])
            st[1] -= 1
            generated += 1
            if st[1] <= 0:  # leave
                out[st[0]] = st[2]
                engine.active[r] = 0
                engine.seq_lens[r] = 0
                del rows[r]
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return out, {"wall_s": wall, "generated_tokens": generated, "tokens_per_s": generated / wall,
                 "decode_steps": steps, "decode_step_ms": 1e3 * step_time / max(steps, 1)}


# ---------------------------------------------------------------- plan / run over the first n rows, a page pool
# (examples/torch/capacity_bench.py: capacity and tokens/s at a fixed memory budget)


def pooled_cache(backend, rows, max_len, kv_heads, head_dim, q_heads, num_pages, device):
    """One layer's cache whose rows take their pages from one pool of num_pages pages, assigned by the engine (a
    row's table entries start unassigned). Quantized: PagedCache(num_pages=...), whose table then starts at -1 and
    whose append skips empty rows. fp16: Fp16PagedCache has no pool argument, so the pool is the pages of a one-row
    cache of num_pages + 1 pages, given a [rows, pages per row] table and the workspace of a rows x max_len cache;
    the extra page (cache.scratch_page) is where unassigned entries point, because the fp16 cache's Python writer
    stores a token for every row of a step, empty rows included. device="meta" allocates nothing (for .nbytes)."""
    if backend != "fp16":
        return kvtile.PagedCache(rows, max_len, kv_heads, head_dim, q_heads=q_heads, preset=backend,
                                 num_pages=num_pages, device=device)
    pt = kvtile.Fp16PagedCache.page_tokens
    like = kvtile.Fp16PagedCache(rows, max_len, kv_heads, head_dim, q_heads=q_heads, device="meta")
    c = kvtile.Fp16PagedCache(1, (num_pages + 1) * pt, kv_heads, head_dim, q_heads=q_heads, device=device)
    c.max_seqs, c.max_pages_per_seq, c.num_pages = rows, like.max_pages_per_seq, num_pages + 1
    c.scratch_page = num_pages
    c.page_table = torch.full((rows, like.max_pages_per_seq), num_pages, dtype=torch.int32, device=device)
    c.seq_lens = torch.zeros(rows, dtype=torch.int32, device=device)
    c.workspace = torch.empty(like.workspace.numel(), dtype=torch.uint8, device=device)
    return c


def _causal_attention(q, k, v, scale):
    """q [1, hq, n, d] (the last n positions) over k, v [1, hq, L, d] (L >= n), causal with the queries aligned to
    the end of the keys; never the math backend (it would materialize [hq, n, L] scores)."""
    n, L = q.shape[2], k.shape[2]
    if n == L:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(n, L), scale=scale)


class PlannedEngine(Engine):
    """Engine's decode step over the first n rows of the batch (n: the concurrency of the step), with what a
    serving engine adds:

    * attention through kvtile.DecodePlan: planned on the host from the lengths before every step, run captured
      in one CUDA graph per n. plan_mode "shared": one plan per step for every layer (the layers' caches have one
      shape and the rows the same lengths: DecodePlan.run(q, cache=layer_cache)); "per_layer": one DecodePlan per layer, each planned every step;
    * host copies of the lengths (lens) and of the active flags (act), which the plans read;
    * num_pages: one page pool for all rows (pooled_cache); admit(row, tokens) takes the pages of a request,
      release(row) gives them back, so requests join as memory frees. Without it each row owns max_len tokens;
    * prefill_chunked: a prompt through the model in chunks, each chunk attending the earlier ones read back from
      the cache (dequantized pages) and written into it;
    * fill_synthetic: rows filled with synthetic keys and values by the cache's own writer (kvtile.prefill,
      Fp16PagedCache.write), for decode timings at lengths no model run could reach in a benchmark's time;
    * time_parts: the GPU time of a step's attention and of its cache writes, each replayed alone in a graph.
    """

    def __init__(self, model, backend="k4v2_g128", max_batch=16, max_len=1024, num_pages=None, plan_mode="shared"):
        if plan_mode not in ("shared", "per_layer"):
            raise ValueError("plan_mode must be 'shared' or 'per_layer' (got %r)" % (plan_mode,))
        self.num_pages = num_pages  # read by _new_cache, which Engine.__init__ calls
        super().__init__(model, backend, max_batch=max_batch, max_len=max_len, use_graph=True)
        self.plan_mode = plan_mode
        self.dtype = next(model.parameters()).dtype
        self.page_tokens = kvtile.Fp16PagedCache.page_tokens if backend == "fp16" else self.caches[0].tile_tokens
        self.lens = [0] * max_batch  # host copy of seq_lens
        self.act = [0] * max_batch  # host copy of active
        self.plans = {}  # n -> DecodePlan (shared) or [DecodePlan per layer]
        self.graphs = {}  # n -> CUDA graph of the step over rows [0, n)
        if num_pages is not None:
            self.unassigned = self.caches[0].scratch_page if backend == "fp16" else -1
            self.page_table = self.caches[0].page_table  # one table for every layer, as seq_lens
            for c in self.caches[1:]:
                c.page_table = self.page_table
            self.free_pages = list(range(num_pages - 1, -1, -1))
            self.row_pages = {}

    def _new_cache(self):
        if self.num_pages is None:
            return super()._new_cache()
        return pooled_cache(self.backend, self.max_batch, self.max_len, self.hkv, self.d, self.hq, self.num_pages,
                            self.device)

    # ------------------------------------------------------------ rows: lengths, pages
    def upload(self):
        """Device lengths and active flags = the host copies."""
        self.seq_lens.copy_(torch.tensor(self.lens, dtype=torch.int32))
        self.active.copy_(torch.tensor(self.act, dtype=torch.int32))

    def admit(self, row, tokens):
        """Pages for a request of up to `tokens` tokens in row (pool mode; otherwise the row owns max_len tokens).
        False when the pool has too few free pages."""
        if tokens > self.max_len:
            raise ValueError("a request of %d tokens exceeds max_len %d" % (tokens, self.max_len))
        if self.num_pages is None:
            return True
        if row in self.row_pages:
            raise ValueError("row %d already holds a request" % row)
        need = -(-tokens // self.page_tokens)
        if need > len(self.free_pages):
            return False
        ids = [self.free_pages.pop() for _ in range(need)]
        self.row_pages[row] = ids
        self.page_table[row, :need].copy_(torch.tensor(ids, dtype=torch.int32))
        return True

    def release(self, row):
        """The request of row leaves: length 0, inactive, its pages back to the pool (call upload() after)."""
        self.lens[row] = 0
        self.act[row] = 0
        if self.num_pages is not None and row in self.row_pages:
            self.free_pages.extend(self.row_pages.pop(row))
            self.page_table[row].fill_(self.unassigned)

    @torch.no_grad()
    def fill_synthetic(self, lengths, src_k, src_v):
        """lengths {row: tokens}: each row's tokens 0..tokens-1 in every layer are src_k/src_v rows (synthetic
        values), written by the cache's own writer in calls of at most src_k.shape[0] tokens; the rows' host and
        device lengths become `tokens` (the rows must be admitted). src_k, src_v [chunk, kv_heads, D]."""
        chunk = src_k.shape[0]
        pieces = [(r, s, min(chunk, t - s)) for r, t in sorted(lengths.items()) for s in range(0, t, chunk)]
        while pieces:  # a call: at most one piece per row, at most `chunk` tokens
            call, rest, used, total = [], [], set(), 0
            for p in pieces:
                if p[0] in used or total + p[2] > chunk:
                    rest.append(p)
                    used.add(p[0])  # a row's pieces go in order: none of its later ones in this call
                else:
                    call.append(p)
                    used.add(p[0])
                    total += p[2]
            pieces = rest
            for r, s, n in call:
                self.lens[r] = s + n  # the length includes the chunk (the kernels write the last n positions)
            self.upload()
            k, v = src_k[:total], src_v[:total]
            if self.backend == "fp16":
                k, v = k.to(torch.float16), v.to(torch.float16)  # once, not in every layer's write
                pos = torch.cat([torch.arange(s, s + n, device=self.device) for _, s, n in call])
                rows = torch.cat([torch.full((n,), r, dtype=torch.long, device=self.device) for r, _, n in call])
                for c in self.caches:
                    c.write(k, v, pos, rows)
            else:
                counts = [0] * self.max_batch
                for r, _, n in call:
                    counts[r] = n
                cu = torch.tensor([0] + list(itertools.accumulate(counts)), dtype=torch.int32, device=self.device)
                mx = max(n for _, _, n in call)
                for c in self.caches:
                    kvtile.prefill(c, k, v, cu, max_tokens_per_seq=mx)

    # ------------------------------------------------------------ chunked prefill through the model
    def _cached_kv(self, cache, row, upto):
        """Keys and values of tokens [0, upto) of row from the cache, [hkv, upto, d] in the model's dtype; upto is
        a multiple of the page size (those tokens are in complete pages)."""
        m = upto // self.page_tokens
        if self.backend == "fp16":
            ids = cache.page_table[row, :m].long()
            k, v = cache.k[ids], cache.v[ids]  # [m, hkv, 64, d]
        else:
            k, v = kvtile.dequantize_pages(cache, cache.page_table[row, :m].contiguous())  # [m, hkv, G, d]
        k = k.permute(1, 0, 2, 3).reshape(self.hkv, upto, self.d).to(self.dtype)
        v = v.permute(1, 0, 2, 3).reshape(self.hkv, upto, self.d).to(self.dtype)
        return k, v

    @torch.no_grad()
    def prefill_chunked(self, row, prompt, chunk):
        """Writes prompt (1-D long tensor) into row (admitted) in chunks of `chunk` tokens (a multiple of the page
        size): every layer attends each chunk over the earlier chunks read back from the cache (what the cache
        holds: dequantized pages for a quantized cache) and its own keys and values, causally, then writes the
        chunk into the cache. Returns the first generated token (greedy); the row stays inactive."""
        t = prompt.numel()
        if t > self.max_len:
            raise ValueError("prompt of %d tokens exceeds max_len %d" % (t, self.max_len))
        if chunk % self.page_tokens:
            raise ValueError("chunk (%d) must be a multiple of the page size %d" % (chunk, self.page_tokens))
        rep = self.hq // self.hkv
        for c0 in range(0, t, chunk):
            ids = prompt[c0:c0 + chunk]
            n = ids.numel()
            x = self.model.model.embed_tokens(ids[None])
            cos, sin = self.rotary(x, torch.arange(c0, c0 + n, device=self.device)[None])
            self.lens[row] = c0 + n
            self.upload()
            cu = None
            if self.backend != "fp16":
                counts = [0] * self.max_batch
                counts[row] = n
                cu = torch.tensor([0] + list(itertools.accumulate(counts)), dtype=torch.int32, device=self.device)
            pos = torch.arange(c0, c0 + n, device=self.device)
            rows = torch.full((n,), row, dtype=torch.long, device=self.device)
            for layer, cache in zip(self.layers, self.caches):
                a = layer.self_attn
                q, k, v = self.qkv(layer, x, cos, sin)  # q [1, hq, n, d], k, v [1, hkv, n, d]
                if c0:
                    pk, pv = self._cached_kv(cache, row, c0)
                    kk, vv = torch.cat([pk[None], k], 2), torch.cat([pv[None], v], 2)
                else:
                    kk, vv = k, v
                o = _causal_attention(q, kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1), self.scale)
                del kk, vv
                x = x + a.o_proj(o.transpose(1, 2).reshape(1, n, self.hq * self.d))
                x = x + layer.mlp(layer.post_attention_layernorm(x))
                kt = k[0].transpose(0, 1).contiguous()  # [n, hkv, d]
                vt = v[0].transpose(0, 1).contiguous()
                if self.backend == "fp16":
                    cache.write(kt, vt, pos, rows)
                else:
                    kvtile.prefill(cache, kt, vt, cu, max_tokens_per_seq=n)
        logits = self.model.lm_head(self.model.model.norm(x[:, -1]))
        return int(logits.argmax(-1))

    # ------------------------------------------------------------ the decode step over rows [0, n)
    def _plan(self, n):
        """Plans the attention of rows [0, n) for the host lengths lens[:n] (what seq_lens holds when it runs)."""
        p = self.plans.get(n)
        if p is None:
            def make(c):
                return kvtile.DecodePlan(c, dtype=self.dtype, rows=n, softmax_scale=self.scale)

            p = self.plans[n] = make(self.caches[0]) if self.plan_mode == "shared" else [make(c) for c in self.caches]
        lens = self.lens[:n]
        for x in ([p] if self.plan_mode == "shared" else p):
            x.plan(lens)

    def _attend(self, i, cache, q, n):
        if self.plan_mode == "per_layer":
            return self.plans[n][i].run(q)
        return self.plans[n].run(q, cache=cache)  # the step's one plan over layer i's cache

    def step(self, n=None, events=None):
        """One decode step of rows [0, n) (default all): active rows grow by one token; next_tokens[:n] holds
        the greedy tokens after it. events: two CUDA events recorded around the graph's replay."""
        n = self.max_batch if n is None else n
        for r in range(n):
            self.lens[r] += self.act[r]
        self._plan(n)
        g = self.graphs.get(n)
        if g is None:
            g = self.graphs[n] = self._capture(lambda: self._decode_rows(n))
        if events:
            events[0].record()
        g.replay()
        if events:
            events[1].record()

    def step_eager(self, n=None):
        """step() without the graph (for the profiler)."""
        n = self.max_batch if n is None else n
        for r in range(n):
            self.lens[r] += self.act[r]
        self._plan(n)
        self._decode_rows(n)

    @torch.no_grad()
    def check_plan(self, n):
        """Relative max difference between the plan's attention (as step() runs it) and kvtile's one-call decode
        over the last layer's cache for random queries, at the current lengths of rows [0, n)."""
        self._plan(n)
        i = len(self.caches) - 1
        q = torch.randn(n, self.hq, self.d, dtype=self.dtype, device=self.device)
        a = self._attend(i, self.caches[i], q, n).float()
        if self.backend == "fp16":
            b = kvtile.fp16_decode(self.caches[i], q, softmax_scale=self.scale, rows=n).float()
        else:
            b = kvtile.decode(self.caches[i], q, softmax_scale=self.scale, rows=n).float()
        return float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))

    @torch.no_grad()
    def time_parts(self, n, iters=5):
        """GPU milliseconds of one step's attention (every layer's planned decode over rows [0, n)) and of its
        cache writes (every layer's append / fp16 write), each captured alone in a CUDA graph and replayed
        `iters` times at the current lengths (random inputs; the lengths do not change, so the writes store the
        last token of each row again)."""
        self._plan(n)
        q = torch.randn(n, self.hq, self.d, dtype=self.dtype, device=self.device)
        k = torch.randn(n, self.hkv, self.d, dtype=self.dtype, device=self.device)
        v = torch.randn(n, self.hkv, self.d, dtype=self.dtype, device=self.device)
        pos = (self.seq_lens[:n].long() - 1).clamp_(min=0)

        def attend():
            for i, c in enumerate(self.caches):
                self._attend(i, c, q, n)

        def write():
            for c in self.caches:
                if self.backend == "fp16":
                    c.write(k, v, pos)
                else:
                    kvtile.append(c, k, v, rows=n)

        out = {}
        for name, fn in (("attention", attend), ("cache_write", write)):
            g = self._capture(fn)
            g.replay()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(iters):
                g.replay()
            e1.record()
            e1.synchronize()
            out[name + "_ms"] = e0.elapsed_time(e1) / iters
            del g
        return out

    def close_plans(self):
        """Drops the graphs (they launch the plans) and the plans."""
        self.graphs.clear()
        for p in self.plans.values():
            for x in (p if isinstance(p, list) else [p]):
                x.close()
        self.plans.clear()

    def close(self):
        """Drops the graphs, the plans (they hold the caches) and the caches, so that their memory can be freed."""
        self.close_plans()
        self.caches = []
