#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention decode timings (cuDNN and flash backends,
enable_gqa=True) on the shapes of a kvtile attention benchmark run, for comparison.

The shapes are those of bench/device/attention.cu's JSON (--shapes): its uniform
rows of the default kernel and of the variants `_bf16q` (bf16 q/K/V here) and
`_mq2` / `_mq4` / `_mq8` (2 / 4 / 8 query tokens per sequence, causal with the new
tokens last: `causal_lower_right`; the efficient backend is tried too, since not
every backend takes that bias). K/V fp16 [B, Hkv, L, D] dense (no paging). L2 is
flushed (512 MB zero fill) before every timed call; median of N CUDA-event timings.
Usage: python3 bench/device/sdpa_bench.py --shapes attention.json [--json FILE] [--iters N]
Exit 77 (CTest: skipped) without PyTorch, a CUDA device or the shapes file.
"""
import argparse
import json
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
except ImportError as e:  # CTest bench/sdpa: 77 = skipped
    print(f"SKIPPED: PyTorch with torch.nn.attention not importable ({e})")
    sys.exit(77)

from attention_report import sdpa_runs  # bench/device: the shapes of a kvtile run, torch-free


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", help="bench/device/attention.cu's --json output: the shapes to run")
    ap.add_argument("--json")
    ap.add_argument("--iters", type=int, default=60)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device for PyTorch")
        sys.exit(77)
    try:
        runs = sdpa_runs(args.shapes)
    except (TypeError, OSError, ValueError, KeyError) as e:
        print(f"SKIPPED: no kvtile attention results to take the shapes from (--shapes: {e})")
        sys.exit(77)
    dev = torch.device("cuda")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    results = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'backend':8} {'B':>4} {'Hq':>4} {'Hkv':>4} {'D':>4} {'tokens':>7} {'us':>10} {'GB/s':>8}")
    for (B, Hq, Hkv, D, L), variant, nq in runs:
        dt = torch.bfloat16 if variant == "bf16" else torch.float16
        q = torch.randn(B, Hq, nq, D, device=dev, dtype=dt)
        k = torch.randn(B, Hkv, L, D, device=dev, dtype=dt)
        v = torch.randn(B, Hkv, L, D, device=dev, dtype=dt)
        mask = causal_lower_right(nq, L) if nq > 1 else None
        nbytes = 2 * k.numel() * 2
        backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
        if nq > 1:
            backends.append(("efficient", SDPBackend.EFFICIENT_ATTENTION))
        tag = f" {variant}" if variant else ""
        for name, backend in backends:
            try:
                with sdpa_kernel(backend):
                    call = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
                    for _ in range(3):
                        call()
                    torch.cuda.synchronize()
                    times = []
                    for _ in range(max(50, args.iters)):
                        flush.zero_()
                        a = torch.cuda.Event(enable_timing=True)
                        b = torch.cuda.Event(enable_timing=True)
                        a.record()
                        call()
                        b.record()
                        b.synchronize()
                        times.append(a.elapsed_time(b) * 1000.0)
                us = statistics.median(times)
                gbs = nbytes / us / 1e3
                print(f"{name:8} {B:4d} {Hq:4d} {Hkv:4d} {D:4d} {L:7d} {us:10.2f} {gbs:8.0f}{tag}")
                results.append(dict(backend=name, batch=B, q_heads=Hq, kv_heads=Hkv, head_dim=D, tokens=L, us=us,
                                    bytes=nbytes, gbs=gbs, variant=variant, q_tokens=nq))
            except Exception as e:  # backend unavailable for this shape
                msg = str(e).splitlines()[0][:100] if str(e) else type(e).__name__
                print(f"{name:8} {B:4d} {Hq:4d} {Hkv:4d} {D:4d} {L:7d}  unavailable{tag}: {msg}")
                results.append(dict(backend=name, batch=B, q_heads=Hq, kv_heads=Hkv, head_dim=D, tokens=L,
                                    error=msg, variant=variant, q_tokens=nq))
        del q, k, v
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, device=torch.cuda.get_device_name(), results=results), f, indent=1)


if __name__ == "__main__":
    main()
