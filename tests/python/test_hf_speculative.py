# kvtile.hf.Cache in transformers' assisted generation on the small Llama
# checkpoint (KVTILE_TINYLM or ../shared/data/tinylm-model): crop() is exact
# (the cache after a verify step and a crop equals, byte for byte, the cache
# fed only the kept tokens), a crop into a quantized tile raises, and
# generate(..., prompt_lookup_num_tokens=k) runs with verify steps through the
# fused multi-query kernel. Skips without a GPU, transformers or the model.
import os

import pytest
import torch

from conftest import requires_gpu

pytestmark = requires_gpu
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import kvtile  # noqa: E402
import kvtile.hf  # noqa: E402

from tinylm import MODEL, load, require_model  # noqa: E402

require_model()


@pytest.fixture(scope="module")
def model():
    kvtile.hf.register()
    return load("kvtile")


def prompt(length, offset=0):
    import numpy as np

    val = np.load(os.path.join(MODEL, "val_bytes.npy"))
    return torch.tensor(val[offset:offset + length].astype("int64"), device="cuda")[None]


def same_cache(a, b):
    """Every layer: lengths, records of complete tiles, live tail slots."""
    for la, lb in zip(a.layers, b.layers):
        if la.get_seq_length() != lb.get_seq_length():
            return False
        pa, pb = la.paged, lb.paged
        torch.cuda.synchronize()
        if not torch.equal(pa.seq_lens, pb.seq_lens):
            return False
        L, G = la.get_seq_length(), pa.tile_tokens
        if not torch.equal(pa.pages[pa.page_table[0, :L // G].long()], pb.pages[pb.page_table[0, :L // G].long()]):
            return False
        if not (torch.equal(pa.tail_k[0, :, :L % G], pb.tail_k[0, :, :L % G])
                and torch.equal(pa.tail_v[0, :, :L % G], pb.tail_v[0, :, :L % G])):
            return False
    return True


@torch.no_grad()
@pytest.mark.parametrize("length, step, keep", [(120, 6, 2), (125, 6, 1), (125, 6, 6), (200, 8, 0),
                                                (200, 9, 3), (120, 12, 6), (120, 12, 2)])
def test_crop_equals_feeding_only_the_kept_tokens(model, length, step, keep):
    ids = prompt(length + step)
    a = kvtile.hf.Cache(model.config, preset="k4v2_g128", max_cache_len=512)
    b = kvtile.hf.Cache(model.config, preset="k4v2_g128", max_cache_len=512)
    model(ids[:, :length], past_key_values=a, use_cache=True)
    model(ids[:, :length], past_key_values=b, use_cache=True)
    # a verify step on a (of a step longer than 8 tokens, the head is committed and the last 8 are drafts),
    # its keys and values recorded per layer
    seen, update = {}, a.update

    def recording(key_states, value_states, layer_idx, *args, **kwargs):
        seen[layer_idx] = (key_states.clone(), value_states.clone())
        return update(key_states, value_states, layer_idx, *args, **kwargs)

    a.update = recording
    model(ids[:, length:length + step], past_key_values=a, use_cache=True)
    del a.update
    assert a.get_seq_length() == length + step and len(seen) == len(a.layers)
    a.crop(length + keep)
    assert a.get_seq_length() == length + keep
    # b: the same keys and values of the kept tokens, one token per update (a model's multi-token forward
    # computes them in another summation order than one-token forwards, so b takes a's)
    for i in range(keep):
        for layer_idx, (k, v) in sorted(seen.items()):
            b.update(k[:, :, i:i + 1], v[:, :, i:i + 1], layer_idx)
    assert b.get_seq_length() == length + keep
    assert same_cache(a, b)
    # both continue identically
    nxt = ids[:, length + keep:length + keep + 1] if keep < step else ids[:, :1]
    la = model(nxt, past_key_values=a, use_cache=True).logits
    lb = model(nxt, past_key_values=b, use_cache=True).logits
    assert torch.equal(la, lb)


@torch.no_grad()
def test_crop_into_a_quantized_tile_raises(model):
    ids = prompt(300)
    c = kvtile.hf.Cache(model.config, preset="k4v2_g128", max_cache_len=512)
    model(ids[:, :260], past_key_values=c, use_cache=True)
    c.crop(258)  # inside the fp16 tail tile [256, 260): exact
    assert c.get_seq_length() == 258
    with pytest.raises(ValueError, match="already quantized"):
        c.crop(250)
    c.crop(-2)
    assert c.get_seq_length() == 256


@torch.no_grad()
def test_generate_with_prompt_lookup(model, monkeypatch):
    ids = prompt(200, 20000)
    new = 48
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
              attention_mask=torch.ones_like(ids))
    plain_cache = kvtile.hf.Cache(model.config, preset="k4v4_g128", max_cache_len=400)
    ref = model.generate(ids, past_key_values=plain_cache, **kw)[:, ids.shape[1]:]
    calls = {"drafts": 0, "commits": 0}
    append_drafts, commit_drafts = kvtile.append_drafts, kvtile.commit_drafts

    def counted_append(*a, **k):
        calls["drafts"] += 1
        return append_drafts(*a, **k)

    def counted_commit(*a, **k):
        calls["commits"] += 1
        return commit_drafts(*a, **k)

    monkeypatch.setattr(kvtile, "append_drafts", counted_append)
    monkeypatch.setattr(kvtile, "commit_drafts", counted_commit)
    spec_cache = kvtile.hf.Cache(model.config, preset="k4v4_g128", max_cache_len=400)
    out = model.generate(ids, past_key_values=spec_cache, prompt_lookup_num_tokens=5, **kw)[:, ids.shape[1]:]
    assert out.shape == ref.shape
    assert spec_cache.get_seq_length() == ids.shape[1] + new - 1
    assert calls["drafts"] > 0 and calls["commits"] > 0  # verify steps ran as drafts and were cropped
    # greedy speculative decoding over the same cache keeps almost every greedy token: the verify logits
    # differ from one-by-one decoding in summation order and where a draft completes a tile (docs/api.md)
    assert (out == ref).float().mean().item() > 0.8
