# kvtile.hf.Cache inside transformers' generate on the small Llama checkpoint
# (KVTILE_TINYLM or ../shared/data/tinylm-model). Skips without a GPU,
# transformers or the model.
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
def models():
    kvtile.hf.register()
    return load("kvtile"), load("sdpa")


def prompts(n=4, length=200):
    import numpy as np

    val = np.load(os.path.join(MODEL, "val_bytes.npy"))
    return torch.tensor(np.stack([val[i * 5000:i * 5000 + length] for i in range(n)]).astype("int64"), device="cuda")


@torch.no_grad()
def test_generate_with_kvtile_cache(models):
    fused, plain = models
    ids = prompts()
    new = 64
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
              attention_mask=torch.ones_like(ids))
    ref = fused.generate(ids, **kw)[:, ids.shape[1]:]
    cache = kvtile.hf.Cache(fused.config, preset="k4v4_g128", max_cache_len=ids.shape[1] + new)
    assert cache.fused
    out = fused.generate(ids, past_key_values=cache, **kw)[:, ids.shape[1]:]
    assert out.shape == ref.shape
    assert cache.get_seq_length() == ids.shape[1] + new - 1
    assert 0 < cache.nbytes
    # a 4-bit cache keeps most greedy tokens of the fp16 cache on this model
    assert (out == ref).float().mean().item() > 0.5
    # the dequantizing path (any attention implementation) gives the same kind of result
    cache2 = kvtile.hf.Cache(plain.config, preset="k4v4_g128", max_cache_len=ids.shape[1] + new)
    assert not cache2.fused
    out2 = plain.generate(ids, past_key_values=cache2, **kw)[:, ids.shape[1]:]
    assert (out2 == ref).float().mean().item() > 0.5


@torch.no_grad()
def test_fused_and_dequantized_attention_agree(models):
    fused, plain = models
    ids = prompts(2, 300)
    c1 = kvtile.hf.Cache(fused.config, preset="k4v2_g128", max_cache_len=400)
    c2 = kvtile.hf.Cache(plain.config, preset="k4v2_g128", max_cache_len=400)
    fused(ids[:, :-1], past_key_values=c1, use_cache=True)
    plain(ids[:, :-1], past_key_values=c2, use_cache=True)
    a = fused(ids[:, -1:], past_key_values=c1, use_cache=True).logits.float()
    b = plain(ids[:, -1:], past_key_values=c2, use_cache=True).logits.float()
    # same records, two attention paths (fused kernel vs dequantize + sdpa): logits agree to fp16 rounding
    assert (a - b).abs().max().item() < 5e-2
    assert torch.equal(c1.layers[0].paged.pages, c2.layers[0].paged.pages)


def test_cache_rejects_overflow(models):
    fused, _ = models
    ids = prompts(1, 100)
    cache = kvtile.hf.Cache(fused.config, max_cache_len=50)
    with pytest.raises(ValueError, match="exceed max_cache_len"):
        fused(ids, past_key_values=cache, use_cache=True)
