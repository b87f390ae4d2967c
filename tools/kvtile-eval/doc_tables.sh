#!/usr/bin/env bash
# tools/kvtile-eval/doc_tables.sh: the accuracy tables of docs/kvtile-eval.md,
# in one command.
#
#   tools/kvtile-eval/doc_tables.sh KVTILE_EVAL [--update-docs]
#
# Runs KVTILE_EVAL (a built kvtile-eval) on the embedded generator (defaults)
# and on both windows of the tinylm-kv dumps (with their queries), writes the
# text tables, JSON and a README.md to $OUT_DIR (default
# bench/results/kvtile-eval/), and prints a Markdown summary (per method: bits,
# attention error and KL on each input). --update-docs also replaces the
# summary and the full generator and tinylm w0 tables in docs/kvtile-eval.md
# (the blocks between the "doc_tables.sh" markers) and redraws
# docs/img/kvtile-eval-default.png (with gnuplot). Environment: TINYLM_KV (the
# dumps, default ../shared/data/tinylm-kv next to the repository, else
# /work/shared/data/tinylm-kv), THREADS (-j, default 2; results do not depend
# on it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=$(realpath "$1")
update=${2:-}
out=${OUT_DIR:-bench/results/kvtile-eval}
data=${TINYLM_KV:-}
if [ -z "$data" ]; then
  if [ -d ../shared/data/tinylm-kv ]; then data=../shared/data/tinylm-kv; else data=/work/shared/data/tinylm-kv; fi
fi
j=${THREADS:-2}
mkdir -p "$out"
plot=(--no-plot)  # the plot goes to docs/img/ with --update-docs (gnuplot needed)
if [ "$update" = --update-docs ] && command -v gnuplot >/dev/null; then plot=(--plot docs/img/kvtile-eval-default.png); fi

run() {  # name, args...
  local name=$1
  shift
  echo "+ kvtile-eval $* -j $j" >&2
  "$bin" "$@" -j "$j" --no-progress --json "$out/$name.json" >"$out/$name.txt"
}
run generator "${plot[@]}"
for w in w0 w1; do
  run "tinylm_$w" --no-plot -k "$data/${w}_k.npy" -v "$data/${w}_v.npy" -q "$data/${w}_q.npy"
done
{
  echo "# kvtile-eval accuracy tables"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(uname -m), $(nproc) cores, CPU only (the host codec)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "- command: \`tools/kvtile-eval/doc_tables.sh $1 $update\` (TINYLM_KV=$data, THREADS=$j)"
  echo "- files: generator.{txt,json} (embedded default), tinylm_w0 / tinylm_w1.{txt,json}, summary.md"
  echo
  echo "Per method: attention-output relative error (mean) / softmax KL; **best**: best preset for an error budget."
  echo
} >"$out/README.md"

python3 - "$out" "$update" <<'EOF'
import json, re, sys
out, update = sys.argv[1], sys.argv[2]
runs = [("generator", "generator (8192 tokens x 8 KV heads, GQA 4)"),
        ("tinylm_w0", "tinylm w0 (3 layers x 1024 x 2 KV heads, GQA 2)"),
        ("tinylm_w1", "tinylm w1")]
res = {n: json.load(open(f"{out}/{n}.json")) for n, _ in runs}
names = [m["name"] for m in res["generator"]["methods"]]
def cell(n, name):
    for m in res[n]["methods"]:
        if m["name"] == name:
            if not m["ok"]:
                return "failed"
            a = m["overall"]["attention"]
            best = " **best**" if m.get("best_for_budgets") else ""
            return f'{100 * a["rel_err_mean"]:.2f}% / {a["kl_mean"]:.2e}{best}'
    return "-"
lines = ["| method | bits | " + " | ".join(t for _, t in runs) + " |",
         "|---|---:|" + "---:|" * len(runs)]
for name in names:
    m = next(x for x in res["generator"]["methods"] if x["name"] == name)
    bits = f'{m["bits_per_element"]:.3f}' if m["ok"] else "-"
    lines.append(f"| {name} | {bits} | " + " | ".join(cell(n, name) for n, _ in runs) + " |")
summary = "\n".join(lines) + "\n"
print(summary)
open(f"{out}/summary.md", "w").write(summary)
open(f"{out}/README.md", "a").write(summary)
if update == "--update-docs":
    doc = "docs/kvtile-eval.md"
    s = open(doc).read()
    def put(tag, body):
        global s
        pat = re.compile(r"(<!-- doc_tables.sh: %s -->\n).*?(<!-- /doc_tables.sh -->)" % tag, re.S)
        if not pat.search(s):
            sys.exit(f"{doc}: no '<!-- doc_tables.sh: {tag} -->' block")
        s = pat.sub(lambda m: m.group(1) + body + m.group(2), s)
    put("summary", summary)
    put("generator", "```\n" + open(f"{out}/generator.txt").read() + "```\n")
    put("tinylm_w0", "```\n" + open(f"{out}/tinylm_w0.txt").read() + "```\n")
    open(doc, "w").write(s)
    print(f"updated {doc}", file=sys.stderr)
EOF
