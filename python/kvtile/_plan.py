"""Decode attention as a host plan and a capturable launch (DecodePlan)."""
import weakref

import torch

from . import _C
from ._cache import PagedCache
from ._fp16 import Fp16PagedCache
from ._registry import _ops, has_cuda
from ._validate import (_check_cu_seqlens_q, _check_options, _host_int32, _int, _max_q, _scale, _softcap, _splits,
                        _window)


class DecodePlan:
    """Decode attention split into a host plan and a launch (kvtile::attention::decode_plan).

        plan = kvtile.DecodePlan(cache, max_q_tokens=1, window_left=None, logit_softcap=None)
        plan.plan(host_seq_lens)        # each step, outside any CUDA-graph capture
        out = plan.run(q)               # capturable: capture once, then plan() + replay per step

    plan() reads a HOST copy of the lengths (a list or CPU tensor of `rows` ints: the values
    cache.seq_lens will hold when run executes), balances the work of the batch over all SMs
    (ragged lengths cost what their tiles cost) and copies a small work list into the plan's own
    workspace on the current stream. run() launches with a grid fixed by the plan, so a CUDA
    graph of run() (captured after a first plan) replays correctly after each new plan() for the
    same cache rows, q_heads, dtype and options (keep the plan alive while its graph is replayed:
    the graph reads its workspace). The device lengths must equal the planned ones (otherwise
    the result is wrong, though every read stays inside the cache).

    Multi-query (max_q_tokens 2..8; quantized cache only): plan(seq_lens, cu_seqlens_q) also
    takes the host cu_seqlens_q [rows + 1] of the new tokens (0..max_q_tokens per row, included
    in seq_lens) and copies it into plan.qo_indptr on the device; run(q) then takes
    q [>= cu_seqlens_q[-1], q_heads, D]. For graph replay allocate q with rows x max_q_tokens rows.
    Each row is planned for its own new tokens (a ragged speculative batch costs its rows, not
    rows x max_q_tokens); plan(seq_lens) without cu_seqlens_q plans every row at max_q_tokens
    (right for any counts plan.qo_indptr holds, e.g. written on the device).

    cache: a PagedCache or an Fp16PagedCache (one token per row); rows: the first rows of the cache
    (default all); dtype: the query dtype (float16 or bfloat16).

    One plan serves every layer: run(q, cache=layer_cache) launches the planned work over another
    cache of the planned shape (kind, preset, head_dim, kv_heads, max_pages_per_seq, at least `rows`
    rows) whose first rows hold the planned lengths, as an engine's layers do; a cache of another
    shape is refused (ValueError naming the field, the C ABI's kvtile_ops_decode_plan_run rule).
    """

    def __init__(self, cache, q_heads=None, dtype=torch.float16, max_q_tokens=1, window_left=None,
                 logit_softcap=None, softmax_scale=None, rows=None, num_splits=0):
        op = "kvtile.DecodePlan"
        if not isinstance(cache, (PagedCache, Fp16PagedCache)):
            raise TypeError("%s: cache must be a kvtile.PagedCache or kvtile.Fp16PagedCache (got %s)"
                            % (op, type(cache).__name__))
        self.cache = cache
        self.fp16 = isinstance(cache, Fp16PagedCache)
        self.rows = cache.max_seqs if rows is None else _int(op, "rows", rows, 1, cache.max_seqs)
        self.q_heads = cache.q_heads if q_heads is None else _int(op, "q_heads", q_heads, 1)
        if self.q_heads % cache.kv_heads:
            raise ValueError("%s: q_heads (%d) must be a positive multiple of kv_heads (%d)"
                             % (op, self.q_heads, cache.kv_heads))
        if dtype not in (torch.float16, torch.bfloat16):
            raise TypeError("%s: dtype must be torch.float16 or torch.bfloat16 (got %s)" % (op, dtype))
        self.dtype = dtype
        self.max_q_tokens = _max_q(op, max_q_tokens)
        if self.fp16 and self.max_q_tokens != 1:
            raise ValueError("%s: the fp16 baseline decodes one token per row (max_q_tokens must be 1)" % op)
        self.window_left = _window(op, window_left)
        self.logit_softcap = _softcap(op, logit_softcap)
        self.softmax_scale = _scale(op, softmax_scale, cache.head_dim)
        self.num_splits = _splits(op, num_splits)
        _check_options(op, q_heads=self.q_heads, max_q_tokens=self.max_q_tokens, has_qo_indptr=self.max_q_tokens > 1,
                       window_left=self.window_left, logit_softcap=self.logit_softcap, num_splits=self.num_splits,
                       softmax_scale=self.softmax_scale)
        self._q_rows = None  # rows of q the last plan needs (multi-query)
        self._planned = False
        self._handle = None
        if not has_cuda():
            raise RuntimeError("%s: %s" % (op, _C.no_cuda_reason))
        device = cache.device
        self.qo_indptr = (torch.zeros(self.rows + 1, dtype=torch.int32, device=device)
                          if self.max_q_tokens > 1 else None)
        if self.fp16:
            ws = _ops.fp16_decode_workspace_bytes(cache.head_dim, cache.kv_heads, self.rows, cache.max_pages_per_seq,
                                                  self.q_heads, self.num_splits)
        else:
            ws = _ops.decode_workspace_bytes(cache.preset_id, cache.head_dim, cache.kv_heads, self.rows,
                                             cache.max_pages_per_seq, self.q_heads, self.num_splits,
                                             self.max_q_tokens)
        self.workspace = torch.empty(ws, dtype=torch.uint8, device=device)  # the plan's own (work list inside)
        self._handle = _ops.decode_plan_create()
        self._finalizer = weakref.finalize(self, _ops.decode_plan_destroy, self._handle)

    def plan(self, seq_lens, cu_seqlens_q=None):
        """Plans the next run from host lengths (and, multi-query, the host cu_seqlens_q, copied into
        plan.qo_indptr, each row planned for its own tokens; None after a first one: plan.qo_indptr is
        used as it is, every row planned at max_q_tokens). Returns self."""
        op = "kvtile.DecodePlan.plan"
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("%s: cannot run under CUDA-graph capture (it copies host data): capture run() only "
                               "and call plan() before each replay" % op)
        lens = _host_int32(op, "seq_lens", seq_lens, self.rows)
        cu = None  # host counts: each row planned for its own tokens; None: every row at max_q_tokens
        if cu_seqlens_q is not None:
            if self.max_q_tokens == 1:
                raise ValueError("%s: cu_seqlens_q needs a multi-query plan (DecodePlan(..., max_q_tokens > 1))" % op)
            cu = _host_int32(op, "cu_seqlens_q", cu_seqlens_q, self.rows + 1)
            _check_cu_seqlens_q(op, cu, self.max_q_tokens, lens)
            self.qo_indptr.copy_(cu)
            self._q_rows = int(cu[-1])
        elif self.max_q_tokens > 1 and self._q_rows is None:
            raise ValueError("%s: a multi-query plan needs cu_seqlens_q (the new tokens of each row)" % op)
        c = self.cache
        self._planned = False
        if self.fp16:
            _ops.fp16_decode_plan(self._handle, *c._cache_args(self.rows), lens, self.workspace, self.q_heads,
                                  self.dtype, self.softmax_scale, self.num_splits, self.window_left,
                                  self.logit_softcap)
        else:
            _ops.decode_plan(self._handle, *c._cache_args(self.rows), lens, cu, self.workspace, self.q_heads,
                             self.dtype, self.softmax_scale, c.preset_id, self.num_splits, self.qo_indptr,
                             self.max_q_tokens, self.window_left, self.logit_softcap)
        self._planned = True
        return self

    def run(self, q, out=None, lse=None, cache=None):
        """Decode attention of q ([rows, q_heads, D], multi-query [>= cu_seqlens_q[-1], q_heads, D]) as planned,
        over the planned cache or `cache` (another cache of the planned shape: the next layer's)."""
        op = "kvtile.DecodePlan.run"
        if not self._planned:
            raise RuntimeError("%s: call plan() first (a failed plan() also needs a new one)" % op)
        c = self.cache if cache is None else cache
        if not isinstance(c, Fp16PagedCache if self.fp16 else PagedCache):
            raise TypeError("%s: cache must be a kvtile.%s like the planned one (got %s)"
                            % (op, "Fp16PagedCache" if self.fp16 else "PagedCache", type(c).__name__))
        if c.max_seqs < self.rows:
            raise ValueError("%s: cache has %d rows, fewer than the planned %d" % (op, c.max_seqs, self.rows))
        if not isinstance(q, torch.Tensor):
            raise TypeError("%s: q must be a tensor" % op)
        if q.dtype != self.dtype:
            raise TypeError("%s: q has dtype %s, the plan was made for %s" % (op, q.dtype, self.dtype))
        if self._q_rows is not None and (q.dim() != 3 or q.shape[0] < self._q_rows):
            raise ValueError("%s: q must have shape [>= %d, %d, %d] for the planned cu_seqlens_q (got %s)"
                             % (op, self._q_rows, self.q_heads, self.cache.head_dim, list(q.shape)))
        if out is None:
            out = torch.empty_like(q)
        if self.fp16:
            _ops.fp16_decode_run(self._handle, *c._cache_args(self.rows), q, out, lse, self.workspace,
                                 self.softmax_scale, self.num_splits, self.window_left, self.logit_softcap)
        else:
            _ops.decode_run(self._handle, *c._cache_args(self.rows), q, out, lse, self.workspace, self.softmax_scale,
                            c.preset_id, self.num_splits, self.qo_indptr, self.max_q_tokens, self.window_left,
                            self.logit_softcap)
        return out

    def info(self):
        """{'ctas': the grid of run, 'chunks': partial results} of the last successful plan."""
        ctas, chunks = _ops.decode_plan_info(self._handle)
        return {"ctas": ctas, "chunks": chunks}

    def close(self):
        """Frees the plan now (otherwise when the object is collected)."""
        if self._handle is not None:
            self._finalizer()
            self._handle = None
            self._planned = False
