#!/bin/bash
# kvtile-eval: the issue-14 targets on the tinylm dumps (and the generator, four seeds): the defaults (fp8 and fp16
# scales) against kvarn-0.1 (kvtile 0.1's codec with fp16 scales), 4096 sampled (position, KV head) pairs per layer;
# every complete tile quantized (files <input>.json), and with decode semantics, the sink tile and the query's own
# tile in fp16 (--fp16-sink-tile --fp16-own-tile: <input>_decode.json). Prints both tables.
#   bench/results/2026-12-04-kvtile-eval-targets/run.sh KVTILE_EVAL [TINYLM_KV]
set -euo pipefail
here=$(dirname "$0")
bin=$(realpath "$1"); data=$(realpath "${2:-$(git -C "$here" rev-parse --show-toplevel)/../shared/data/tinylm-kv}")
cd "$here"
M="kvarn-0.1,kvarn+k4v2_g128,kvarn+k4v4_g128,kvarn+k2v2_g128"
for mode in all decode; do
  A=(-m "$M" --queries-per-layer 4096 -j 2 --no-progress --no-plot)
  sfx=""
  [ $mode = decode ] && { A+=(--fp16-sink-tile --fp16-own-tile); sfx=_decode; }
  for w in w0 w1; do
    "$bin" "${A[@]}" -k $data/${w}_k.npy -v $data/${w}_v.npy -q $data/${w}_q.npy --json tinylm_$w$sfx.json > tinylm_$w$sfx.txt
  done
  for seed in 20260501 1 2 3; do "$bin" "${A[@]}" --seed $seed --json gen_$seed$sfx.json > gen_$seed$sfx.txt; done
done
python3 - <<'PY'
import json
for sfx, title in (("", "every complete tile quantized"), ("_decode", "decode semantics: sink tile and own tile fp16")):
    print(f"\n### {title}\n")
    print("| input | preset | KL default (fp8) | KL fp16 scales, same rounding | KL kvarn-0.1 | default vs kvarn-0.1 | fp8 vs fp16 | attn err default / kvarn-0.1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    runs = [("tinylm_w0", "tinylm w0"), ("tinylm_w1", "tinylm w1")] + [(f"gen_{s}", f"generator seed {s}") for s in (20260501, 1, 2, 3)]
    for f, name in runs:
        d = {m["name"]: m["overall"]["attention"] for m in json.load(open(f + sfx + ".json"))["methods"]}
        for sh in ("k2v2", "k4v2", "k4v4"):
            a, h, b = d[f"{sh}_g128/fp8"], d[f"{sh}_g128/fp16"], d[f"kvarn-0.1 {sh}_g128/fp16"]
            print(f"| {name} | {sh}_g128 | {a['kl_mean']:.3e} | {h['kl_mean']:.3e} | {b['kl_mean']:.3e} | "
                  f"{a['kl_mean'] / b['kl_mean'] - 1:+.1%} | {a['kl_mean'] / h['kl_mean'] - 1:+.1%} | "
                  f"{100 * a['rel_err_mean']:.2f}% / {100 * b['rel_err_mean']:.2f}% ({a['rel_err_mean'] / b['rel_err_mean'] - 1:+.1%}) |")
PY
