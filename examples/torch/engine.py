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
    def __init__(self, model, backend="k4v2_g128", max_batch=16, max_len=1024, use_graph=True):
        cfg = model.config
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
                                      device=dev)
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

    def cache_bytes(self):
        return sum(c.nbytes for c in self.caches)

    def bytes_per_token(self):
        return sum(c.bytes_per_token() for c in self.caches)

    # ------------------------------------------------------------ prefill (eager, one request)
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
            h = layer.input_layernorm(x)
            a = layer.self_attn
            q = a.q_proj(h).view(1, t, self.hq, self.d).transpose(1, 2)
            k = a.k_proj(h).view(1, t, self.hkv, self.d).transpose(1, 2)
            v = a.v_proj(h).view(1, t, self.hkv, self.d).transpose(1, 2)
            q, k = self.apply_rope(q, k, cos, sin)
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
            h = layer.input_layernorm(x)
            a = layer.self_attn
            q = a.q_proj(h).view(b, 1, self.hq, self.d).transpose(1, 2)
            k = a.k_proj(h).view(b, 1, self.hkv, self.d).transpose(1, 2)
            v = a.v_proj(h).view(b, 1, self.hkv, self.d).transpose(1, 2)
            q, k = self.apply_rope(q, k, cos, sin)
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
