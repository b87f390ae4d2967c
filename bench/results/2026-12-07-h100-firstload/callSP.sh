#!/usr/bin/env bash
# call SP (2026-12-06, session 24): a CTA's range and first chunk loaded at once (work list reordered by
# the plan's upload) and each warp's first page id loaded with the sequence's length.
# new = build_carry/sp, old = build_carry/pb (device code of 07d616f). Timings first, then the suites.
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
row() { $1/kvtile_bench_attention --shape "$2" --kernel "$3" --iters 100 ${4:-} 2>/dev/null |
        awk -v k="$3" '/^summary/{s=1} s && $1==k {printf "%s:%s", $8, $9}'; }
ab() {  # shape [kernel flags]
  local k=${2:-k4v2_g128} l="sp $1 ${2:-k4v2_g128}"
  for r in 1 2; do l="$l new=$(row $C/sp $1 $k "${3:-}") old=$(row $C/pb $1 $k "${3:-}")"; done
  echo "$l $((SECONDS-t0)) s" | tee -a $O/call.txt
}
for s in 1,8,1,128,4096 1,32,8,128,16384 1,32,8,128,65536 2,8,1,128,32768 2,16,1,128,65536 4,32,8,128,16384 \
         8,128,8,128,32768 16,32,8,128,65536 128,32,8,128,4096 ragged32; do ab $s; done
ab 16,32,8,128,65536 k4v2_g128_mq8
ab 2,8,1,128,32768 k4v2_g128_sm86 --policies
run() { local n=$1 e=$2; shift 2; env $e timeout 420 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $((SECONDS-t0)) s" | tee -a $O/suites.txt; }
S="compute-sanitizer --error-exitcode 1"
run att X=1 $C/sp/kvtile_device_attention &
run pol X=1 $C/sp/kvtile_device_attention_policies &
run race_att X=1 $S --tool racecheck $C/sp/kvtile_device_attention --small &
run race_pol X=1 $S --tool racecheck $C/sp/kvtile_device_attention_policies --small &
run mem_att X=1 $S --tool memcheck $C/sp/kvtile_device_attention --small &
[ -d $C/fin ] && { run fin_att X=1 $C/fin/kvtile_device_attention & run fin_pol X=1 $C/fin/kvtile_device_attention_policies & }
wait
# compute_80 / 86 / 89 PTX of the firstload branch (build_carry/spj), if carried
for a in 80 86 89; do
  [ -d $C/spj/jit$a ] && { run jit${a}_att CUDA_FORCE_PTX_JIT=1 $C/spj/jit$a/kvtile_device_attention &
                            run jit${a}_pol CUDA_FORCE_PTX_JIT=1 $C/spj/jit$a/kvtile_device_attention_policies & }
done
wait
sort $O/suites.txt
cd $O && tar czf logs.tgz *.log && rm -f *.log
