"""ctypes wrapper over kvtile_shim.cpp: quantize K/V tiles with kvtile's real host codec.
Tiles are [N, G, D] float32 in the original frame (what fakequant.tiles gives)."""
import ctypes, os
import numpy as np

_lib = None
ALGO = {"kvarn": 0, "kivi": 1, "rotate_rtn": 2}


def load(path=None):
    global _lib
    path = path or os.environ.get("KVT_SHIM", os.path.join(os.path.dirname(__file__), "..", ".shim", "libkvtshim.so"))
    _lib = ctypes.CDLL(path)
    _lib.kvt_roundtrip.restype = ctypes.c_int
    _lib.kvt_record_bytes.restype = ctypes.c_long
    return _lib


def record_bytes(D, G, kb, vb, pack="fp8", algo="kvarn"):
    if _lib is None: load()
    return _lib.kvt_record_bytes(D, G, kb, vb, int(pack == "fp16"), ALGO[algo])


def roundtrip(k, v, kb, vb, pack="fp8", algo="kvarn", threads=None, want_records=False):
    """k, v: numpy float32 [N, G, D]. Returns (k_hat, v_hat[, records])."""
    if _lib is None: load()
    k = np.ascontiguousarray(k, dtype=np.float32); v = np.ascontiguousarray(v, dtype=np.float32)
    N, G, D = k.shape
    ko = np.empty_like(k); vo = np.empty_like(v)
    rb = record_bytes(D, G, kb, vb, pack, algo)
    assert rb > 0, "unsupported preset"
    rec = np.empty((N, rb), np.uint8) if want_records else None
    nf = ctypes.c_long(0)
    P = ctypes.c_void_p
    r = _lib.kvt_roundtrip(k.ctypes.data_as(P), v.ctypes.data_as(P), ctypes.c_long(N), D, G, kb, vb,
                           int(pack == "fp16"), ALGO[algo], ko.ctypes.data_as(P), vo.ctypes.data_as(P),
                           rec.ctypes.data_as(P) if rec is not None else None, threads or os.cpu_count(),
                           ctypes.byref(nf))
    if r != 0:
        raise RuntimeError(f"kvtile roundtrip failed: status {r}")
    return (ko, vo, rec) if want_records else (ko, vo)


def decode(records, G, D, kb, vb, pack="fp8", algo="kvarn", rotated=False):
    """records: uint8 [N, record_bytes] -> (k, v) float32 [N, G, D]."""
    if _lib is None: load()
    records = np.ascontiguousarray(records, dtype=np.uint8)
    N = records.shape[0]
    ko = np.empty((N, G, D), np.float32); vo = np.empty_like(ko)
    P = ctypes.c_void_p
    r = _lib.kvt_decode(records.ctypes.data_as(P), ctypes.c_long(N), D, G, kb, vb, int(pack == "fp16"), ALGO[algo],
                        int(rotated), ko.ctypes.data_as(P), vo.ctypes.data_as(P))
    if r != 0:
        raise RuntimeError(f"kvtile decode failed: status {r}")
    return ko, vo


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    k = rng.standard_normal((16, 128, 128)).astype(np.float16).astype(np.float32)
    k[:, :, 3] *= 20
    v = rng.standard_t(3, (16, 128, 128)).astype(np.float16).astype(np.float32)
    for kb, vb, pack, algo in [(4, 2, "fp8", "kvarn"), (4, 2, "fp16", "kvarn"), (4, 2, "fp8", "kivi"), (2, 2, "fp8", "kvarn")]:
        ko, vo = roundtrip(k, v, kb, vb, pack, algo)
        rk = ((ko - k) ** 2).sum() / (k ** 2).sum(); rv = ((vo - v) ** 2).sum() / (v ** 2).sum()
        print(f"k{kb}v{vb} {pack} {algo}: rec {record_bytes(128,128,kb,vb,pack,algo)} B  K relMSE {rk:.4g}  V relMSE {rv:.4g}")


# ---- run-time encode knobs (kvtile_variants.cpp): rounding policy, clip ratios, Sinkhorn iterations
_var = None
POLICY = {"cover": 0, "nearest": 1, "mm": 2}


def load_variants(path):
    global _var
    _var = ctypes.CDLL(path)
    _var.kvt_variant_roundtrip.restype = ctypes.c_int
    return _var


def variant_roundtrip(k, v, kb, vb, pack, policy, kclip, vclip, iters, threads=None):
    """k, v: numpy float32 [N, 128, 128]; clips in permille. Returns (k_hat, v_hat)."""
    k = np.ascontiguousarray(k, dtype=np.float32); v = np.ascontiguousarray(v, dtype=np.float32)
    ko = np.empty_like(k); vo = np.empty_like(v)
    _var.kvt_variant_config(POLICY[policy], int(kclip), int(vclip))
    P = ctypes.c_void_p
    r = _var.kvt_variant_roundtrip(k.ctypes.data_as(P), v.ctypes.data_as(P), ctypes.c_long(k.shape[0]), kb, vb,
                                   int(pack == "fp16"), iters, ko.ctypes.data_as(P), vo.ctypes.data_as(P),
                                   threads or os.cpu_count())
    if r != 0:
        raise RuntimeError(f"kvtile variant roundtrip failed: {r}")
    return ko, vo
