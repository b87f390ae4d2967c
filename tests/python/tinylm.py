# The small trained Llama checkpoint of the transformers tests (KVTILE_TINYLM
# or ../shared/data/tinylm-model) and how they load it.
import os

import pytest
import torch

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.environ.get("KVTILE_TINYLM", os.path.join(_root, "..", "shared", "data", "tinylm-model"))


def require_model():
    """Skips the calling test module when the checkpoint is missing."""
    if not os.path.isfile(os.path.join(MODEL, "config.json")):
        pytest.skip("the tinylm checkpoint is not at %s (set KVTILE_TINYLM)" % MODEL, allow_module_level=True)


def load(attn):
    """The checkpoint in fp16 on the GPU with attention implementation attn."""
    from transformers import LlamaForCausalLM

    try:
        m = LlamaForCausalLM.from_pretrained(MODEL, dtype=torch.float16, attn_implementation=attn)
    except TypeError:
        m = LlamaForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float16, attn_implementation=attn)
    return m.cuda().eval()
