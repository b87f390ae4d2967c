"""The small Llama-style byte-level LM of ../../data/tinylm-model (RoPE, GQA,
RMSNorm, SwiGLU) as plain PyTorch modules, so that the fidelity check can
replace the attention's K/V with quantized ones.

Usage on the GPU machine:
  python3 harness/tinylm.py train --seconds 240 --out $OUT       # writes weights + dumps
  python3 harness/tinylm.py dump  --weights DIR --out $OUT
"""
import argparse, glob, json, math, os, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = dict(vocab=256, d=512, layers=6, q_heads=4, kv_heads=2, head_dim=128, mlp=1408, rope_base=10000.0, ctx=1024)


def corpus(limit_bytes=96 << 20, reverse=False):
    roots = sorted(set(p for p in sys.path if p.endswith("site-packages")))
    files = []
    for r in roots:
        files += glob.glob(os.path.join(r, "**", "*.py"), recursive=True)
    files.sort(reverse=reverse)
    buf, n = [], 0
    for f in files:
        try:
            b = open(f, "rb").read()
        except OSError:
            continue
        buf.append(b); n += len(b)
        if n >= limit_bytes:
            break
    data = np.frombuffer(b"".join(buf), dtype=np.uint8)
    split = int(len(data) * 0.98)
    return data[:split], data[split:]


class RMSNorm(nn.Module):
    """nn.RMSNorm (PyTorch >= 2.4) for older PyTorch (Debian's 1.13): eps = finfo(float32).eps, as its default."""
    def __init__(s, d):
        super().__init__()
        s.weight = nn.Parameter(torch.ones(d))

    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps) * s.weight


def causal_attention(q, k, v):
    """causal_attention(q, k, v), also for PyTorch < 2.5."""
    if hasattr(F, "scaled_dot_product_attention") and tuple(int(t) for t in torch.__version__.split(".")[:2]) >= (2, 5):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


def rope(x, pos, base):
    # x [B, H, T, D]; rotate-half convention (as Llama in HF)
    D = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D))
    ang = pos[:, None].float() * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Block(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c = c
        d, hd = c["d"], c["head_dim"]
        s.n1 = RMSNorm(d); s.n2 = RMSNorm(d)
        s.wq = nn.Linear(d, c["q_heads"] * hd, bias=False)
        s.wk = nn.Linear(d, c["kv_heads"] * hd, bias=False)
        s.wv = nn.Linear(d, c["kv_heads"] * hd, bias=False)
        s.wo = nn.Linear(c["q_heads"] * hd, d, bias=False)
        s.w1 = nn.Linear(d, c["mlp"], bias=False); s.w3 = nn.Linear(d, c["mlp"], bias=False)
        s.w2 = nn.Linear(c["mlp"], d, bias=False)

    def qkv(s, x, pos):
        B, T, _ = x.shape
        c = s.c; hd = c["head_dim"]
        h = s.n1(x)
        q = s.wq(h).view(B, T, c["q_heads"], hd).transpose(1, 2)
        k = s.wk(h).view(B, T, c["kv_heads"], hd).transpose(1, 2)
        v = s.wv(h).view(B, T, c["kv_heads"], hd).transpose(1, 2)
        return rope(q, pos, c["rope_base"]), rope(k, pos, c["rope_base"]), v

    def finish(s, x, att):
        B, H, T, hd = att.shape
        x = x + s.wo(att.transpose(1, 2).reshape(B, T, H * hd))
        h = s.n2(x)
        return x + s.w2(F.silu(s.w1(h)) * s.w3(h))

    def forward(s, x, pos):
        q, k, v = s.qkv(x, pos)
        att = causal_attention(q, k, v)
        return s.finish(x, att)


class TinyLM(nn.Module):
    def __init__(s, c=CFG):
        super().__init__()
        s.c = c
        s.emb = nn.Embedding(c["vocab"], c["d"])
        s.blocks = nn.ModuleList([Block(c) for _ in range(c["layers"])])
        s.nf = RMSNorm(c["d"])
        s.head = nn.Linear(c["d"], c["vocab"], bias=False)

    def forward(s, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = s.emb(idx)
        for b in s.blocks:
            x = b(x, pos)
        return s.head(s.nf(x))


def batches(data, B, T, dev, gen):
    ix = torch.randint(0, len(data) - T - 1, (B,), generator=gen)
    x = torch.stack([torch.from_numpy(data[i : i + T + 1].astype(np.int64)) for i in ix.tolist()])
    x = x.to(dev, non_blocking=True)
    return x[:, :-1], x[:, 1:]


def save_weights(model, out):
    sd = {k: v.detach().to(torch.float16).cpu().numpy() for k, v in model.state_dict().items()}
    names = sorted(sd)
    chunk, size, part = {}, 0, 0
    for n in names:
        chunk[n] = sd[n]; size += sd[n].nbytes
        if size > 12 << 20:
            np.savez(os.path.join(out, f"tinylm_w{part}.npz"), **chunk); chunk, size, part = {}, 0, part + 1
    if chunk:
        np.savez(os.path.join(out, f"tinylm_w{part}.npz"), **chunk)


def load_weights(model, wdir):
    sd = {}
    for f in sorted(glob.glob(os.path.join(wdir, "tinylm_w*.npz"))):
        z = np.load(f)
        sd.update({k: torch.from_numpy(z[k].astype(np.float32)) for k in z.files})
    model.load_state_dict(sd)


def train(a):
    torch.manual_seed(a.seed)
    dev = "cuda"
    tr, va = corpus(reverse=a.reverse)
    print(f"corpus: train {len(tr)/1e6:.1f} MB, val {len(va)/1e6:.1f} MB", flush=True)
    m = TinyLM().to(dev)
    print("params", sum(p.numel() for p in m.parameters()) / 1e6, "M", flush=True)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    gen = torch.Generator().manual_seed(a.seed + 1)
    B, T = 64, CFG["ctx"]
    t0, step = time.time(), 0
    while time.time() - t0 < a.seconds:
        frac = min(1.0, (time.time() - t0) / a.seconds)
        lr = 1e-3 * min(1.0, step / 200) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batches(tr, B, T, dev, gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(m(x).float().view(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True); loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step()
        if step % 200 == 0:
            print(f"step {step} t={time.time()-t0:.0f}s loss {loss.item():.3f}", flush=True)
        step += 1
    m.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        g2 = torch.Generator().manual_seed(2)
        vl = [F.cross_entropy(m(x).float().view(-1, 256), y.reshape(-1)).item() for x, y in (batches(va, 16, T, dev, g2) for _ in range(20))]
    info = dict(cfg=CFG, seed=a.seed, reverse_corpus=a.reverse, steps=step, seconds=a.seconds, val_nats_per_byte=float(np.mean(vl)), train_bytes=int(len(tr)))
    print(json.dumps(info), flush=True)
    os.makedirs(a.out, exist_ok=True)
    save_weights(m, a.out)
    json.dump(info, open(os.path.join(a.out, "tinylm_info.json"), "w"), indent=1)
    np.save(os.path.join(a.out, "heldout_bytes.npy"), va[: 1 << 20])


def dump(a):
    """Post-RoPE q, k and v of every layer for held-out windows: [layers][tokens][heads][D] fp16 .npy."""
    dev = "cuda"
    m = TinyLM().to(dev); load_weights(m, a.weights); m.eval()
    data = np.load(os.path.join(a.weights, "heldout_bytes.npy"))
    rng = np.random.default_rng(a.seed)
    layers = [int(x) for x in a.layers.split(",")]
    for w in range(a.windows):
        s0 = int(rng.integers(0, len(data) - a.T))
        idx = torch.tensor(data[s0:s0 + a.T].astype(np.int64), device=dev)[None]
        pos = torch.arange(a.T, device=dev)
        got = {"q": [], "k": [], "v": []}
        with torch.no_grad():
            x = m.emb(idx)
            for li, blk in enumerate(m.blocks):
                q, k, v = blk.qkv(x, pos)
                if li in layers:
                    for n, t in (("q", q), ("k", k), ("v", v)):
                        got[n].append(t[0].transpose(0, 1).half().cpu().numpy())   # [T, H, D]
                x = blk.finish(x, causal_attention(q, k, v))
        for n in got:
            np.save(os.path.join(a.out, f"{a.prefix}w{w}_{n}.npy"), np.stack(got[n]))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    sp = p.add_subparsers(dest="cmd", required=True)
    t = sp.add_parser("train"); t.add_argument("--seconds", type=float, default=240); t.add_argument("--out", required=True)
    t.add_argument("--seed", type=int, default=0); t.add_argument("--reverse", action="store_true")
    d = sp.add_parser("dump"); d.add_argument("--weights", required=True); d.add_argument("--out", required=True)
    d.add_argument("--windows", type=int, default=2); d.add_argument("--T", type=int, default=1024)
    d.add_argument("--layers", default="0,2,5"); d.add_argument("--seed", type=int, default=5); d.add_argument("--prefix", default="")
    a = p.parse_args()
    {"train": train, "dump": dump}[a.cmd](a)
