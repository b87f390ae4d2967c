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
"""
import math
import time

import torch
import torch.nn.functional as F

import kvtile


def _rope(model):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return model.model.rotary_emb, apply_rotary_pos_emb


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
            if backend == "fp16":
                c = kvtile.Fp16PagedCache(max_batch, max_len, self.hkv, self.d, q_heads=self.hq, device=dev)
            else:
                c = kvtile.PagedCache(max_batch, max_len, self.hkv, self.d, q_heads=self.hq, preset=backend,
                                      device=dev, max_q_tokens=kvtile.MAX_Q_TOKENS if self.spec_k else 1)
                if self.spec_k:
                    c.enable_drafts()
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

    # ------------------------------------------------------------ decode step (all rows)
    @torch.no_grad()
    def _step(self):
        b = self.max_batch
        self.seq_lens.add_(self.active)
        pos = (self.seq_lens.long() - 1).clamp_(min=0)
        x = self.model.model.embed_tokens(self.tokens)[:, None]  # [b, 1, hidden]
        cos, sin = self.rotary(x, pos[:, None])
        for layer, cache in zip(self.layers, self.caches):
            a = layer.self_attn
            q, k, v = self.qkv(layer, x, cos, sin)
            q = q[:, :, 0].contiguous()  # [b, hq, d]
            k = k[:, :, 0].contiguous()
            v = v[:, :, 0].contiguous()
            if self.backend == "fp16":
                cache.write(k, v, pos)
                o = kvtile.fp16_decode(cache, q, softmax_scale=self.scale)
            else:
                kvtile.append(cache, k, v)
                o = kvtile.decode(cache, q, softmax_scale=self.scale)
            x = x + a.o_proj(o.reshape(b, 1, self.hq * self.d))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.model.lm_head(self.model.model.norm(x[:, 0]))
        self.next_tokens.copy_(logits.argmax(-1))

    def step(self):
        if not self.use_graph:
            self._step()
            return
        if self.graph is None:
            # warm up on a side stream (sets the kernels' attributes), then capture
            saved = self.seq_lens.clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self._step()
            torch.cuda.current_stream().wait_stream(s)
            self.seq_lens.copy_(saved)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step()
            self.seq_lens.copy_(saved)  # capture does not run the work: replay below does
        self.graph.replay()


    # ------------------------------------------------------------ speculative decoding
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
