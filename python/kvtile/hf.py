"""kvtile as a transformers (5.x) KV cache.

    import kvtile.hf
    kvtile.hf.register()                                   # adds attn_implementation="kvtile"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float16, attn_implementation="kvtile").cuda()
    cache = kvtile.hf.Cache(model.config, preset="k4v2_g128", max_cache_len=4096)
    out = model.generate(ids, past_key_values=cache, max_new_tokens=64, do_sample=False)

Like transformers' QuantizedCache, the first update of a layer (the prompt)
returns the prompt's own keys and values, so the prompt attends in full
precision, and stores them quantized; every later token is appended to the
quantized cache. How later steps attend:

* attn_implementation="kvtile" (after register()): one-token steps and
  verify steps of up to 8 tokens run kvtile's fused decode attention over
  the quantized pages (kvtile.decode, multi-query and causal among the new
  tokens); longer steps take the dequantized path below.
* any other attn_implementation (sdpa, eager): each update returns the whole
  cache dequantized to fp16 (pages by kvtile.dequantize_pages, the fp16 tail
  and sink rotated back by the library's inverse rotation, torch.ops.kvtile.rotate),
  which that attention then reads.

Speculative decoding (assisted generation: prompt_lookup_num_tokens, an
assistant model): a step of 2..8 tokens after the prompt is stored as drafts
(kvtile.append_drafts) and crop() commits the kept prefix exactly
(kvtile.commit_drafts): the cache is then byte for byte the cache of the kept
tokens alone. A step of t > 8 tokens stores its first t - 8 tokens as
committed and the last 8 as drafts. crop(max_length) is exact down to the
start of the fp16 tail tile of the committed tokens (the tail holds them in
fp16); cropping further back, into a tile already quantized, raises
ValueError. So keep prompt_lookup_num_tokens (num_assistant_tokens) <= 7:
every verify step (the last token + the candidates) is then all drafts.

Limits: every row of the batch has the same length (no left padding: the
fused kernel has no mask; pass equal-length prompts); no beam search or
reordering of the HF cache (kvtile's own PagedCache supports reordering rows
through tail_slots; this wrapper does not expose it).
"""
import math

import torch

import kvtile
from kvtile._codec import _rotate

try:  # transformers is optional for the rest of the package
    from transformers.cache_utils import Cache as _HFCache
    from transformers.cache_utils import DynamicLayer as _HFLayer
except ImportError as e:  # pragma: no cover - exercised only without transformers
    raise ImportError("kvtile.hf needs transformers >= 5 (transformers.cache_utils.Cache, DynamicLayer)") from e

__all__ = ["Cache", "Layer", "register", "attention"]


def _unrotate(x, preset_id, dtype):
    """Rows of an fp16 tail or sink (the cache keeps them rotated) in the original frame, as dtype: the
    preset's inverse rotation by the library (equal, bit for bit, to the codec's original frame)."""
    out = dtype if dtype in (torch.float16, torch.bfloat16, torch.float32) else torch.float32
    return _rotate(x, preset_id, inverse=True, dtype=out).to(dtype)


class Layer(_HFLayer):
    """One attention layer's kvtile cache (a kvtile.PagedCache with one row per batch row)."""

    is_compileable = False
    is_sliding = False

    def __init__(self, preset="k4v2_g128", max_cache_len=4096, q_heads=None, sink=False, fused=False):
        super().__init__()
        self.preset = preset
        self.max_cache_len = int(max_cache_len)
        self.q_heads = q_heads
        self.sink = sink
        self.fused = fused
        self.cumulative_length = 0
        self.paged = None
        self.pending = None  # (committed length, drafts) of a verify step not yet cropped

    def lazy_initialization(self, key_states, *args, **kwargs):
        b, h, _, d = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = torch.tensor([], dtype=self.dtype, device=self.device)
        self.values = torch.tensor([], dtype=self.dtype, device=self.device)
        self.max_batch_size = b
        self.paged = kvtile.PagedCache(b, self.max_cache_len, h, d, q_heads=self.q_heads or h, preset=self.preset,
                                       sink=self.sink, device=key_states.device,
                                       max_q_tokens=kvtile.MAX_Q_TOKENS).enable_drafts()
        self._cu = {}
        self._accepted = torch.zeros(b, dtype=torch.int32, device=key_states.device)
        self.is_initialized = True

    def update(self, key_states, value_states, cache_kwargs=None, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states)
        b, h, t, d = key_states.shape
        if b != self.paged.max_seqs:
            raise ValueError("kvtile.hf.Layer: batch size changed from %d to %d" % (self.paged.max_seqs, b))
        first = self.cumulative_length == 0
        new_len = self.cumulative_length + t
        if new_len > self.max_cache_len:
            raise ValueError("kvtile.hf.Cache: %d tokens exceed max_cache_len=%d" % (new_len, self.max_cache_len))
        if self.pending is not None:  # a verify step that was not cropped: all its drafts stay
            self._commit(self.pending[1])
        tok_k = key_states.transpose(1, 2).reshape(b * t, h, d).contiguous()
        tok_v = value_states.transpose(1, 2).reshape(b * t, h, d).contiguous()
        if tok_k.dtype not in (torch.float16, torch.bfloat16):
            tok_k, tok_v = tok_k.half(), tok_v.half()
        drafts = 0 if first or t == 1 else min(t, kvtile.MAX_DRAFT_TOKENS)
        plain = t - drafts  # tokens stored as committed (the prompt, a one-token step, or a long step's head)
        if plain:
            src_k = tok_k.view(b, t, h, d)[:, :plain].reshape(b * plain, h, d).contiguous() if drafts else tok_k
            src_v = tok_v.view(b, t, h, d)[:, :plain].reshape(b * plain, h, d).contiguous() if drafts else tok_v
            self.paged.seq_lens.fill_(self.cumulative_length + plain)
            if plain == 1:
                kvtile.append(self.paged, src_k, src_v)
            else:
                kvtile.prefill(self.paged, src_k, src_v, self._cu_of(plain), max_tokens_per_seq=plain)
        if drafts:
            l0 = self.cumulative_length + plain
            self.paged.seq_lens.fill_(new_len)
            dk = tok_k.view(b, t, h, d)[:, plain:].reshape(b * drafts, h, d).contiguous()
            dv = tok_v.view(b, t, h, d)[:, plain:].reshape(b * drafts, h, d).contiguous()
            kvtile.append_drafts(self.paged, dk, dv, self._cu_of(drafts))
            self.pending = (l0, drafts)
        self.cumulative_length = new_len
        if first:
            return key_states, value_states
        if self.fused and (t == 1 or drafts == t):
            key_states._kvtile_layer = self  # read by kvtile.hf.attention
            return key_states, value_states
        return self.dequantize_all(key_states.dtype)

    def _cu_of(self, t):
        cu = self._cu.get(t)
        if cu is None:
            b = self.paged.max_seqs
            cu = self._cu[t] = torch.arange(0, (b + 1) * t, t, dtype=torch.int32, device=self.device)
        return cu

    def _commit(self, n):
        """Keeps the first n drafts of the pending verify step (every row), drops the rest."""
        l0, _ = self.pending
        self._accepted.fill_(n)
        kvtile.commit_drafts(self.paged, self._accepted)  # writes seq_lens = l0 + n on the device
        self.pending = None
        self.cumulative_length = l0 + n

    def crop(self, max_length):
        """As DynamicLayer.crop of transformers 5.17: a negative max_length drops -max_length tokens, 0 drops
        none (assisted generation's crop(-0) after a verify step that kept every draft), a positive one keeps
        the first max_length tokens (the earlier meaning, which 5.17 still accepts).
        Exact: drafts of the last verify step are committed or rolled back (kvtile.commit_drafts),
        committed tokens in the fp16 tail tile are dropped by shortening the length. Raises
        ValueError for a crop into a tile that is already quantized."""
        if self.paged is None:
            return
        max_length = int(max_length)
        if max_length <= 0:  # tokens to drop; 0: none (pending drafts stay, the next update commits them)
            max_length += self.cumulative_length
        if max_length >= self.cumulative_length:
            return
        if max_length < 0:
            raise ValueError("kvtile.hf.Layer.crop: cannot crop %d tokens to a negative length" % self.cumulative_length)
        if self.pending is not None:
            l0, _ = self.pending
            self._commit(max_length - l0 if max_length >= l0 else 0)
            if max_length >= l0:
                return
        start = self.cumulative_length // self.paged.tile_tokens * self.paged.tile_tokens
        if max_length < start:
            raise ValueError(
                "kvtile.hf.Layer.crop: cannot crop to %d tokens: tokens below %d are already quantized (only the "
                "drafts of the last step and the fp16 tail tile can be cropped exactly; keep "
                "prompt_lookup_num_tokens / num_assistant_tokens <= 7)" % (max_length, start))
        self.paged.seq_lens.fill_(max_length)
        self.cumulative_length = max_length

    def dequantize_all(self, dtype=torch.float16):
        """The whole cache as [B, H, L, D] in the original frame."""
        p = self.paged
        b, G, L = p.max_seqs, p.tile_tokens, self.cumulative_length
        n_full, rem = divmod(L, G)
        parts_k, parts_v = [], []
        first_quant = 0
        if p.sink_k is not None and n_full > 0:
            slots = p.tail_slots.long()
            parts_k.append(_unrotate(p.sink_k[slots], p.preset_id, dtype))
            parts_v.append(_unrotate(p.sink_v[slots], p.preset_id, dtype))
            first_quant = 1
        if n_full > first_quant:
            ids = p.page_table[:, first_quant:n_full].reshape(-1).contiguous()
            k, v = kvtile.dequantize_pages(p, ids)
            n = n_full - first_quant
            parts_k.append(k.view(b, n, p.kv_heads, G, p.head_dim).permute(0, 2, 1, 3, 4)
                           .reshape(b, p.kv_heads, n * G, p.head_dim).to(dtype))
            parts_v.append(v.view(b, n, p.kv_heads, G, p.head_dim).permute(0, 2, 1, 3, 4)
                           .reshape(b, p.kv_heads, n * G, p.head_dim).to(dtype))
        if rem:
            slots = p.tail_slots.long()
            parts_k.append(_unrotate(p.tail_k[slots, :, :rem], p.preset_id, dtype))
            parts_v.append(_unrotate(p.tail_v[slots, :, :rem], p.preset_id, dtype))
        return torch.cat(parts_k, dim=2), torch.cat(parts_v, dim=2)

    def get_seq_length(self, *args, **kwargs):
        return self.cumulative_length

    def get_mask_sizes(self, cache_position=None, *args, **kwargs):
        q = cache_position.shape[0] if isinstance(cache_position, torch.Tensor) else int(cache_position or 0)
        return self.cumulative_length + q, 0

    def get_max_cache_shape(self, *args, **kwargs):
        return self.max_cache_len

    def reset(self):
        self.cumulative_length = 0
        self.pending = None
        if self.paged is not None:
            self.paged.seq_lens.zero_()
            self.paged.draft_state.zero_()

    def nbytes(self):
        return self.paged.nbytes if self.paged is not None else 0

    def _unsupported(self, *args, **kwargs):
        raise NotImplementedError("kvtile.hf.Cache does not support beam search or batch reordering")

    reorder_cache = batch_repeat_interleave = batch_select_indices = _unsupported


class Cache(_HFCache):
    """A transformers Cache whose layers store keys and values with kvtile (preset, e.g. "k4v2_g128").

    config: the model's config (num_hidden_layers, num_attention_heads and
    _attn_implementation are read from it); max_cache_len: tokens per row the
    cache can hold (allocated at the first update); sink: keep the first tile of
    each row in fp16.
    """

    def __init__(self, config, preset="k4v2_g128", max_cache_len=4096, sink=False):
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        n = text.num_hidden_layers
        q_heads = text.num_attention_heads
        fused = getattr(text, "_attn_implementation", None) == "kvtile"
        layers = [Layer(preset, max_cache_len, q_heads=q_heads, sink=sink, fused=fused) for _ in range(n)]
        super().__init__(layers=layers)
        self.preset = preset
        self.fused = fused

    @property
    def nbytes(self):
        """Device bytes of every layer's kvtile cache (pages, tables, tails, sinks, workspace)."""
        return sum(layer.nbytes() for layer in self.layers)

    def bytes_per_token(self):
        """Quantized record bytes per token over all layers."""
        return sum(layer.paged.bytes_per_token() for layer in self.layers if layer.paged is not None)


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """attn_implementation="kvtile": fused kvtile decode for one-token and verify steps over a kvtile cache,
    sdpa otherwise."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    layer = getattr(key, "_kvtile_layer", None)
    if layer is None or query.shape[2] > kvtile.MAX_Q_TOKENS:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    b, hq, t, d = query.shape
    q = query.transpose(1, 2).reshape(b * t, hq, d)
    if q.dtype not in (torch.float16, torch.bfloat16):
        q = q.half()
    q = q.contiguous()
    scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
    if t == 1:
        out = kvtile.decode(layer.paged, q, softmax_scale=scale)
    else:  # a verify step: its t tokens are the drafts just appended (causal among them)
        out = kvtile.decode(layer.paged, q, softmax_scale=scale, cu_seqlens_q=layer._cu_of(t), max_q_tokens=t)
    return out.view(b, t, hq, d).to(query.dtype), None


def register(name="kvtile"):
    """Registers kvtile.hf.attention as attn_implementation=name (and sdpa's mask for it)."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, attention)
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

        ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    except (ImportError, AttributeError):  # older layouts: the default mask is used
        pass
