"""Next-token fidelity of a quantized KV cache on a trained LM: teacher-forced loss and KL against the fp16
cache, with decode semantics (a query reads quantized tiles that completed before its own tile; its own
tile and the first (sink) tile stay fp16). Methods: fakequant.py (reference re-implementations) and
kvtile's real host codec through kvtile_shim.cpp (see README.md).
Usage: python3 kv_fidelity.py --hf MODEL_DIR --out DIR [--kvtile libkvtshim.so] [--study]"""
import argparse, json, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(__file__))
from tinylm import TinyLM, CFG, causal_attention


def load_safetensors(path):
    """safetensors.torch.load_file without the package (header: u64 length + JSON; fp16/bf16/fp32 tensors)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    hdr = json.loads(raw[8:8 + n]); base = 8 + n
    dt = {"F16": np.float16, "F32": np.float32}
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        if v["dtype"] == "BF16":
            a = np.frombuffer(raw[base + b:base + e], np.uint16).astype(np.uint32) << 16
            t = torch.from_numpy(a.view(np.float32).reshape(v["shape"]).copy())
        else:
            t = torch.from_numpy(np.frombuffer(raw[base + b:base + e], dt[v["dtype"]]).reshape(v["shape"]).copy())
        out[k] = t
    return out


def load_hf(model, d):
    """The Llama checkpoint's tensors under TinyLM's names."""
    import glob
    sd = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        sd.update(load_safetensors(f))
    m = {"model.embed_tokens.weight": "emb.weight", "model.norm.weight": "nf.weight", "lm_head.weight": "head.weight"}
    names = {"input_layernorm": "n1", "post_attention_layernorm": "n2", "self_attn.q_proj": "wq", "self_attn.k_proj": "wk",
             "self_attn.v_proj": "wv", "self_attn.o_proj": "wo", "mlp.gate_proj": "w1", "mlp.up_proj": "w3", "mlp.down_proj": "w2"}
    out = {}
    for k, v in sd.items():
        if k in m:
            out[m[k]] = v.float(); continue
        parts = k.split(".")                    # model.layers.I.<name>.weight
        i, name = parts[2], ".".join(parts[3:-1])
        out[f"blocks.{i}.{names[name]}.weight"] = v.float()
    model.load_state_dict(out)
from fakequant import method, tiles, untile
import kvtile_methods

G = 128


def quant_attention(q, k, v, kq, vq):
    """q [B,Hq,T,D]; k,v,kq,vq [B,Hkv,T,D]. Decode semantics with tile G and sink tile 0."""
    B, Hq, T, D = q.shape
    rep = Hq // k.shape[1]
    k, v, kq, vq = (t.repeat_interleave(rep, 1) for t in (k, v, kq, vq))
    pos = torch.arange(T, device=q.device)
    tile = pos // G
    useq = (tile[None, :] < tile[:, None]) & (tile[None, :] >= 1)       # [Tq, Tk]
    causal = pos[None, :] <= pos[:, None]
    s = 1.0 / D ** 0.5
    sf = (q @ k.transpose(-1, -2)) * s
    sq = (q @ kq.transpose(-1, -2)) * s
    sc = torch.where(useq, sq, sf).masked_fill(~causal, float("-inf"))
    p = sc.softmax(-1)
    return (p * useq) @ vq + (p * ~useq) @ v


def forward(model, idx, meth):
    pos = torch.arange(idx.shape[1], device=idx.device)
    x = model.emb(idx)
    for blk in model.blocks:
        q, k, v = blk.qkv(x, pos)
        if meth == "fp16":
            att = causal_attention(q, k, v)
        elif meth[0] == "variant":
            _, kb, vb, pack, pol, kc, vc, it, voff = meth
            kt, shp = tiles(k.half().float(), G); vt, _ = tiles(v.half().float(), G)
            # voff: V per-channel mean offsets (issue 14 item 3), stored as D fp16 values per tile and added
            # back after decode (what attention would add as the probability-weighted sum, once per tile).
            mu = vt.mean(1, keepdim=True).half().float() if voff else torch.zeros_like(vt[:, :1])
            ko, vo = kvtile_methods.variant_roundtrip(kt.cpu().numpy(), (vt - mu).cpu().numpy(), kb, vb, pack, pol, kc, vc, it)
            vo = vo + mu.cpu().numpy()
            kq = untile(torch.from_numpy(ko).to(k.device), shp)
            vq = untile(torch.from_numpy(vo).to(k.device), shp)
            att = quant_attention(q.float(), k.float(), v.float(), kq, vq).to(q.dtype)
        elif meth[0] == "kvtile":
            _, kb, vb, pack, algo = meth
            kt, shp = tiles(k.half().float(), G); vt, _ = tiles(v.half().float(), G)
            ko, vo = kvtile_methods.roundtrip(kt.cpu().numpy(), vt.cpu().numpy(), kb, vb, pack, algo)
            kq = untile(torch.from_numpy(ko).to(k.device), shp)
            vq = untile(torch.from_numpy(vo).to(k.device), shp)
            att = quant_attention(q.float(), k.float(), v.float(), kq, vq).to(q.dtype)
        else:
            mk, mv = meth
            kt, shp = tiles(k.float(), G); vt, _ = tiles(v.float(), G)
            kq = untile(method(mk, kt, "k"), shp).to(q.dtype)
            vq = untile(method(mv, vt, "v"), shp).to(q.dtype)
            att = quant_attention(q.float(), k.float(), v.float(), kq.float(), vq.float()).to(q.dtype)
        x = blk.finish(x, att)
    return model.head(model.nf(x))


def main():
    a = argparse.ArgumentParser(); a.add_argument("--hf", required=True, help="Hugging Face checkpoint dir (tinylm-model)")
    a.add_argument("--out", required=True)
    a.add_argument("--windows", type=int, default=64); a.add_argument("--T", type=int, default=1024)
    a.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a.add_argument("--methods", default=None, help="comma-separated substrings: run only methods whose name contains one")
    a.add_argument("--variants", default=None, help="path to libkvtvariants.so (kvtile_variants.cpp)")
    a.add_argument("--variant", action="append", default=[],
                   help="NAME=kb,vb,fp8|fp16,cover|nearest|mm,key_clip,value_clip,iters[,voff] (clips in permille; voff: "
                        "V per-channel mean offsets); "
                        "with --variant only fp16 and the variants run")
    a.add_argument("--study", action="store_true", help="only the clip-search / iteration study methods")
    a.add_argument("--kvtile", default=None, help="path to libkvtshim.so: add kvtile's real codec as methods")
    a = a.parse_args()
    dev = a.device
    m = TinyLM().to(dev); load_hf(m, a.hf); m.eval()
    data = np.load(os.path.join(a.hf, "val_bytes.npy"))
    rng = np.random.default_rng(123)
    starts = rng.integers(0, len(data) - a.T - 1, a.windows)
    X = torch.tensor(np.stack([data[s:s + a.T + 1] for s in starts]).astype(np.int64), device=dev)
    x, y = X[:, :-1], X[:, 1:]
    methods = {"fp16": "fp16"}
    for b in (2, 4):
        for base in ("rtn_token", "kivi", "rotrtn", "kvarn"):
            methods[f"{base} k{b}v{b}"] = (f"{base}{b}", f"{base}{b}")
    for base in ("kivi", "rotrtn", "kvarn"):
        methods[f"{base} k4v2"] = (f"{base}4", f"{base}2")
    if a.study:  # what the codec could gain: clip search, Sinkhorn iterations (reference re-implementation)
        methods = {"fp16": "fp16"}
        for kb, vb in ((2, 2), (4, 2), (4, 4)):
            methods[f"kvarn k{kb}v{vb}"] = (f"kvarn{kb}", f"kvarn{vb}")
            methods[f"kvsearch k{kb}v{vb}"] = (f"kvsearch{kb}", f"kvsearch{vb}")
            methods[f"kvsearch-K-only k{kb}v{vb}"] = (f"kvsearch{kb}", f"kvarn{vb}")
        for v in ("kvf8up", "kvf8nr", "kvf8mm", "kvc97", "kvc93", "kvc85"):
            for kb, vb in ((2, 2), (4, 2)):
                methods[f"{v} k{kb}v{vb}"] = (f"{v}{kb}", f"{v}{vb}")
            methods[f"{v}-K-only k2v2"] = (f"{v}2", "kvarn2")
            methods[f"{v}-V-only k2v2"] = ("kvarn2", f"{v}2")
        for it in (0, 1, 2, 4, 16):
            methods[f"kvit{it} k2v2"] = (f"kvit{it}2", f"kvit{it}2")
            methods[f"kvit{it} k4v2"] = (f"kvit{it}4", f"kvit{it}2")
    if a.kvtile:
        kvtile_methods.load(a.kvtile)
        for kb, vb in ((2, 2), (4, 2), (4, 4)):
            for pack in ("fp8", "fp16"):
                methods[f"kvtile k{kb}v{vb} {pack}"] = ("kvtile", kb, vb, pack, "kvarn")
            for algo in ("kivi", "rotate_rtn"):
                methods[f"kvtile-{algo} k{kb}v{vb} fp8"] = ("kvtile", kb, vb, "fp8", algo)
    if a.variant:
        kvtile_methods.load_variants(a.variants)
        methods = {"fp16": "fp16"}
        for spec in a.variant:
            name, f = spec.split("=")
            f = f.split(",")
            kb, vb, pack, pol, kc, vc, it = f[:7]
            methods[name] = ("variant", int(kb), int(vb), pack, pol, int(kc), int(vc), int(it), len(f) > 7 and f[7] == "voff")
    if a.methods:
        keep = a.methods.split(",")
        methods = {n: m for n, m in methods.items() if n == "fp16" or any(k in n for k in keep)}
    res = {}
    with torch.no_grad():
        ref_logits = None
        for name, meth in methods.items():
            t0 = time.time(); nll, agree, kl = [], [], []
            for i in range(0, a.windows, 8):
                lg = forward(m, x[i:i + 8], meth).float()
                lp = lg.log_softmax(-1)
                nll.append(F.nll_loss(lp[:, G:].reshape(-1, 256), y[i:i + 8, G:].reshape(-1)).item())
                if name == "fp16":
                    ref_logits = ref_logits or {}
                    ref_logits[i] = lp
                else:
                    r = ref_logits[i]
                    agree.append((lp[:, G:].argmax(-1) == r[:, G:].argmax(-1)).float().mean().item())
                    kl.append((r[:, G:].exp() * (r[:, G:] - lp[:, G:])).sum(-1).mean().item())
            res[name] = dict(nll=float(np.mean(nll)), top1_agree=float(np.mean(agree)) if agree else 1.0,
                             kl=float(np.mean(kl)) if kl else 0.0, s=round(time.time() - t0, 1))
            print(f"{name:18s} nll {res[name]['nll']:.4f}  d {res[name]['nll']-res['fp16']['nll']:+.4f}  "
                  f"agree {res[name]['top1_agree']:.4f}  kl {res[name]['kl']:.5f}", flush=True)
    json.dump(res, open(os.path.join(a.out, "kv_fidelity.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
