#!/usr/bin/env bash
# tests/fuzz/run.sh TARGET|all [SECONDS] [extra libFuzzer args...]
#
# Builds tests/fuzz/TARGET.cpp with clang++ -fsanitize=fuzzer,address,undefined
# (into build/fuzz/, rebuilt only when a source or header is newer) and runs it
# for SECONDS (default 60; with `all`, each target gets SECONDS) on the corpus
# build/fuzz-corpus/TARGET (seeds from tests/fuzz/corpus/TARGET/, read only).
# Inputs in tests/fuzz/regressions/TARGET/ (past crashes) are replayed first.
# Crashes are written to build/fuzz/artifacts/TARGET/. Prints one summary line
# per target: target, seconds, executions, corpus files, result.
#   env: CXX (default clang++), KVTILE_FUZZ_JOBS (targets built and run at once, default 2),
#        KVTILE_FUZZ_BUILD_ONLY=1 (build, don't run), KVTILE_FUZZ_NICE (default 0),
#        KVTILE_FUZZ_OPT (default -O1; CI's 10-s smoke uses -O0, which builds faster
#        and runs fewer inputs: docs/reliability.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

target=${1:?usage: tests/fuzz/run.sh TARGET|all [SECONDS] [libFuzzer args...]}
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
extra=("$@")
cxx=${CXX:-clang++}
[[ $cxx == *clang* ]] || cxx=clang++
bindir=build/fuzz
mkdir -p "$bindir"
flags=(-std=c++17 "${KVTILE_FUZZ_OPT:--O1}" -g -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -Wall -Wextra -Werror -Iinclude -Itools)

targets() {  # largest source first: the longest builds start first
  local f
  for f in $(ls -S tests/fuzz/*.cpp); do
    basename "$f" .cpp
  done
}

build() {  # build TARGET: rebuild when any input is newer than the binary or the flags changed
  local t=$1 bin="$bindir/$1"
  local src="tests/fuzz/$t.cpp"
  [[ -f $src ]] || { echo "run.sh: no such target: $t (have: $(targets | tr '\n' ' '))" >&2; return 2; }
  if [[ -x $bin && $(cat "$bin.flags" 2>/dev/null) == "${flags[*]}" ]] &&
     [[ -z $(find "$src" tests/fuzz/*.hpp include tools/kvtile-eval -newer "$bin" \
        \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' \) -print -quit 2>/dev/null) ]]; then
    return 0
  fi
  echo "run.sh: building $bin (${flags[1]})"
  "$cxx" "${flags[@]}" "$src" -o "$bin.tmp"
  mv "$bin.tmp" "$bin"
  printf '%s\n' "${flags[*]}" > "$bin.flags"
}

run() {  # run TARGET SECONDS
  local t=$1 s=$2
  local corpus="build/fuzz-corpus/$t" art="$bindir/artifacts/$t/" log="$bindir/$t.log"
  mkdir -p "$corpus" "$art"
  local seeds=()
  [[ -d tests/fuzz/corpus/$t ]] && seeds=("tests/fuzz/corpus/$t")
  local rc=0
  # Inputs that once crashed (tests/fuzz/regressions/TARGET/) are replayed first.
  if [[ -d tests/fuzz/regressions/$t ]] && compgen -G "tests/fuzz/regressions/$t/*" >/dev/null; then
    if ! "$bindir/$t" tests/fuzz/regressions/"$t"/* >"$bindir/$t.regressions.log" 2>&1; then
      grep -m5 -E 'FUZZ_CHECK|ERROR:|runtime error|SUMMARY' "$bindir/$t.regressions.log" >&2 || true
      printf 'fuzz: %-18s regression inputs FAILED (see %s)\n' "$t" "$bindir/$t.regressions.log"
      return 1
    fi
  fi
  nice -n "${KVTILE_FUZZ_NICE:-0}" "$bindir/$t" -max_total_time="$s" -max_len=8192 -timeout=60 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$art" \
    ${extra[@]+"${extra[@]}"} "$corpus" ${seeds[@]+"${seeds[@]}"} >"$log" 2>&1 || rc=$?
  local execs files result=ok
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  files=$(find "$corpus" -type f | wc -l)
  if [[ $rc -ne 0 ]]; then
    result="FAILED (rc=$rc, see $log and $art)"
    grep -m5 -E 'FUZZ_CHECK|ERROR:|runtime error|SUMMARY' "$log" >&2 || tail -20 "$log" >&2
  fi
  printf 'fuzz: %-18s %5ss  execs=%-9s corpus=%-6s %s\n' "$t" "$s" "${execs:-?}" "$files" "$result"
  return "$rc"
}

if [[ $target == all ]]; then
  mapfile -t list < <(targets)
else
  list=("$target")
fi
# Each target is built, then run, KVTILE_FUZZ_JOBS at a time (the builds
# dominate a short smoke: one target runs while the next one builds). One
# summary line per target, in the order they finish.
steps='build "$1"'
[[ ${KVTILE_FUZZ_BUILD_ONLY:-0} == 1 ]] || steps='build "$1" && run "$1" "$seconds"'
status=0
printf '%s\n' "${list[@]}" | xargs -P "${KVTILE_FUZZ_JOBS:-2}" -I{} bash -c \
  "set -euo pipefail; $(declare -f build run targets); $(declare -p extra flags); cxx='$cxx' bindir='$bindir' seconds='$seconds'; $steps" \
  _ {} || status=1
exit $status
