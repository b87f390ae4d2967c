#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention decode timings (cuDNN and flash backends,
enable_gqa=True) on the shapes of bench/device/attention.cu, for comparison.

One query token per sequence; K/V fp16 [B, Hkv, L, D] dense (no paging). L2 is
flushed (512 MB zero fill) before every timed call; median of N CUDA-event timings.
Variants at (16, 32, 8, 128, 64K), for the kvtile rows of the same names: `bf16`
(bf16 q/K/V) and `mq4` / `mq8` (4 / 8 query tokens per sequence, causal with the
new tokens last: `causal_lower_right`; the efficient backend is tried too, since
not every backend takes that bias).
Usage: python3 bench/device/sdpa_bench.py [--json FILE] [--iters N]
Exit 77 (CTest: skipped) without PyTorch or a CUDA device.
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

SHAPES = [(1, 32, 8, 128, 16384), (1, 32, 8, 128, 65536), (1, 32, 8, 128, 262144), (2, 32, 8, 128, 32768),
          (4, 32, 8, 128, 16384), (2, 8, 1, 128, 32768), (16, 32, 8, 128, 65536), (8, 128, 8, 128, 32768),
          (2, 16, 1, 128, 65536), (8, 8, 8, 128, 32768), (64, 32, 8, 128, 8192), (128, 32, 8, 128, 4096), (16, 16, 8, 256, 32768),
          (8, 32, 8, 64, 32768)]  # the uniform shapes of bench/device/attention.cu
VARIANTS = [("bf16", 1), ("mq2", 2), ("mq4", 4), ("mq8", 8)]  # at (16, 32, 8, 128, 64K)
MQ_SHAPES = [(1, 32, 8, 128, 65536), (64, 32, 8, 128, 8192)]  # mq4 / mq8 there too (bench/device/attention.cu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--iters", type=int, default=60)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device for PyTorch")
        sys.exit(77)
    dev = torch.device("cuda")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    results = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'backend':8} {'B':>4} {'Hq':>4} {'Hkv':>4} {'D':>4} {'tokens':>7} {'us':>10} {'GB/s':>8}")
    runs = [(shape, "", 1) for shape in SHAPES] + [((16, 32, 8, 128, 65536), v, n) for v, n in VARIANTS]
    runs += [(shape, v, n) for shape in MQ_SHAPES for v, n in VARIANTS if v in ("mq4", "mq8")]
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
