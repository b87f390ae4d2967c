#!/usr/bin/env bash
# tools/kvtile-eval/check_cli.sh: kvtile-eval's command line on hostile values
# (CTest tool/kvtile-eval-cli). Each case checks the exit code and that stderr
# is one short, readable line. The sizes must be refused before anything is
# allocated, so the runs are capped at 1 GiB of virtual memory (not with a
# sanitizer runtime, which reserves far more): an allocation on the way to the
# error would end in "out of memory" or a crash, not in the expected message.
#
#   check_cli.sh KVTILE_EVAL [SANITIZE]   (SANITIZE: KVTILE_SANITIZE's value, may be empty)
set -u
bin=$1
sanitize=${2:-}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cap() {
  if [ -z "$sanitize" ]; then ulimit -v 1048576; fi
  "$@"
}

# expect RC PATTERN ARGS...: exit code RC, stderr one line of < 300 bytes matching PATTERN.
expect() {
  local want=$1 pat=$2
  shift 2
  (cap "$bin" --no-plot --no-progress "$@" >"$tmp/out" 2>"$tmp/err")
  local rc=$? n bytes
  n=$(wc -l <"$tmp/err")
  bytes=$(wc -c <"$tmp/err")
  if [ "$rc" != "$want" ] || [ "$n" != 1 ] || [ "$bytes" -ge 300 ] || ! grep -Eq -- "$pat" "$tmp/err"; then
    echo "FAIL: kvtile-eval $*: exit $rc (want $want), $n line(s), $bytes bytes of stderr (want 1 line matching '$pat'):"
    head -c 600 "$tmp/err"
    echo
    fail=1
  else
    echo "ok:   kvtile-eval $* -> $rc: $(cat "$tmp/err")"
  fi
}

expect 2 'threads: Value 100000 not in range 0 to 1024' -j 100000
expect 2 'threads: Value -1 not in range 0 to 1024' -j -1
expect 2 'gen-tokens: Value 16777216 not in range 1 to 4194304' --gen-tokens 16777216
expect 2 'gen-q-heads: Value 2147483647 not in range 1 to 4096' --gen-q-heads 2147483647
expect 2 'queries-per-layer: Value 2000000000 not in range 0 to 1048576' --queries-per-layer 2000000000
expect 2 'context-queries: Value -5 not in range' --context-queries -5
expect 2 'max-tokens: Value -1 not in range' --max-tokens -1
expect 2 'gen-head-dim' --gen-head-dim 96
expect 2 'not a multiple of --gen-kv-heads' --gen-kv-heads 3 --gen-q-heads 4
expect 2 'max-memory must be in' --max-memory 0
expect 2 'above the --max-memory budget of 16 GiB' --gen-layers 1024 --gen-tokens 4194304 --max-memory 16
expect 2 'seed: must be a decimal integer' --seed -1
expect 2 'seed: must be at most 18446744073709551615' --seed 18446744073709551616
expect 2 'sample-seed: must be a decimal integer' --sample-seed -1
expect 2 '--json needs a file name' --json ''
expect 2 '--csv needs a file name' --csv ''
# --plot's format comes from its extension: out.txt is refused, not written as a PNG.
(cap "$bin" --no-progress --plot "$tmp/out.txt" >"$tmp/out" 2>"$tmp/err")
rc=$?
if [ $rc != 2 ] || ! grep -q 'must end in .png or .svg' "$tmp/err" || [ -e "$tmp/out.txt" ]; then
  echo "FAIL: --plot out.txt: exit $rc"; cat "$tmp/err"; fail=1
else
  echo "ok:   --plot out.txt -> 2: $(cat "$tmp/err")"
fi
# --queries-per-layer above the (position, KV head) pairs is capped (before: 1M queries on 256 tokens ran 412 s).
(cap timeout 120 "$bin" --no-plot --no-progress --gen-tokens 256 --gen-kv-heads 1 --gen-q-heads 2 --gen-layers 1 \
  -m k4v2_g128 --queries-per-layer 1048576 >"$tmp/out" 2>"$tmp/err")
rc=$?
if [ $rc != 0 ] || ! grep -q 'using 256' "$tmp/err" || ! grep -q 'per layer 256 sampled' "$tmp/out"; then
  echo "FAIL: --queries-per-layer 1048576 on 256 tokens: exit $rc"; cat "$tmp/err"; fail=1
else
  echo "ok:   --queries-per-layer 1048576 on 256 tokens x 1 KV head -> capped at 256"
fi
expect 2 'above the --max-memory budget of 1.0 GiB' --gen-tokens 1048576 --max-memory 1
expect 2 'not expected: --bogus' --bogus
expect 2 'unknown method selection' -m k5v5
expect 2 'sinkhorn-iterations: 3 not in \{0,1,2,4,8,16\}' --sinkhorn-iterations 0,3
expect 2 'sinkhorn-iterations needs a selected kvarn method' --sinkhorn-iterations 2 -m kivi,k4v2_g64
expect 2 'gen-outlier-scale: Value 1000 not in range' --gen-outlier-scale 1000
expect 2 'gen-outlier-scale: Value -1 not in range' --gen-outlier-scale -1
expect 1 'cannot open' -k "$tmp/none.npy" -v "$tmp/none.npy"
# A run without queries: exit 0, the table says so (stderr: the plot note only).
"$bin" --no-plot --no-progress --gen-tokens 256 --gen-kv-heads 1 --gen-q-heads 2 -m k4v2_g128 \
  --queries-per-layer 0 --context-queries 0 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc != 0 ] || ! grep -q 'no queries sampled' "$tmp/out"; then
  echo "FAIL: --queries-per-layer 0 --context-queries 0: exit $rc"; cat "$tmp/out" "$tmp/err"; fail=1
else
  echo "ok:   --queries-per-layer 0 --context-queries 0 -> 0, 'no queries sampled'"
fi
# --sinkhorn-iterations: the preset, then one row per other count (the preset's 2 and repeats are not added again).
"$bin" --no-plot --no-progress --gen-tokens 256 --gen-kv-heads 1 --gen-q-heads 2 -m kvarn+k2v2_g128+fp8 \
  --sinkhorn-iterations 0,2,16,0 >"$tmp/out" 2>"$tmp/err"
rc=$?
rows=$(grep -Ec '^[* ] k2v2_g128/fp8( it0| it16)? +2\.254 ' "$tmp/out")  # main table only
if [ $rc != 0 ] || [ "$rows" != 3 ] || grep -q ' it2 ' "$tmp/out"; then
  echo "FAIL: --sinkhorn-iterations 0,2,16,0: exit $rc, $rows rows (want 3)"; cat "$tmp/out" "$tmp/err"; fail=1
else
  echo "ok:   --sinkhorn-iterations 0,2,16,0 -> 0, rows k2v2_g128/fp8, it0, it16"
fi
# Worker threads that cannot start (1000 threads' stacks exceed the 1 GiB cap):
# an error and exit 1, not std::terminate (exit 134).
if [ -z "$sanitize" ]; then
  expect 1 'cannot start worker thread|out of memory' -j 1000 --gen-tokens 4096 -m k4v2_g128
fi
# --help documents the exit codes and exits 0.
if "$bin" --help >"$tmp/out" 2>&1 && grep -q 'Exit codes: 0' "$tmp/out"; then
  echo "ok:   --help lists the exit codes"
else
  echo "FAIL: --help"; fail=1
fi
exit $fail
