#!/usr/bin/env bash
# Device call D1 (2026-12-08): the mma.sync wide-unit prototype (checks, timings) and main's rows on the same
# shapes; then the owed verification of main (tail pieces, 71fe9f8 + claim_piece): sm_90a attention (full),
# attention_policies (full), memcheck / initcheck / synccheck on attention --small.
# build_carry/d1: ms_proto (sm_90a), kvtile_device_attention, kvtile_device_attention_policies, kvtile_bench_attention (90a-real).
set -u
O=$OUT; t0=$SECONDS; C=build_carry/d1; B=$C/kvtile_bench_attention
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
timeout 200 $C/ms_proto > $O/ms_proto.txt 2>&1; echo "ms_proto rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
cat $O/ms_proto.txt
row() { timeout 60 $B --shape "$1" --kernel "$2" --iters 50 2>/dev/null |
        awk -v k="$2" '/^summary/{s=1} s && $1==k {printf "%s us (%s chunks, %s of ceiling)", $9, $8, $11}'; }
for k in k4v2_g128 k4v2_g128_mq2 k4v2_g128_mq4 k4v2_g128_mq8; do
  echo "main 16,32,8,128,65536 $k: $(row 16,32,8,128,65536 $k)" | tee -a $O/call.txt; done
for sh in 8,128,8,128,32768 2,8,1,128,32768 2,16,1,128,65536 1,32,8,128,16384; do
  echo "main $sh k4v2_g128: $(row $sh k4v2_g128)" | tee -a $O/call.txt; done
echo "rows done $((SECONDS-t0)) s" | tee -a $O/call.txt
S="compute-sanitizer --error-exitcode 1"
run2() { local n=$1; local to=$2; shift 2; timeout $to stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
run2 att 200 $C/kvtile_device_attention &
run2 pol 200 $C/kvtile_device_attention_policies &
for t in memcheck initcheck synccheck; do run2 ${t}_att 240 $S --tool $t $C/kvtile_device_attention --small & done
run2 ms_racecheck 240 $S --tool racecheck $C/ms_proto small &
wait
grep -iE "tail pieces" $O/att.log | head -4 | tee -a $O/call.txt
for f in $O/*.log; do grep -q "FAIL\|Race reported\|========= Error\|Barrier error\|Uninitialized" $f && { echo "== $f"; grep -n -B2 "FAIL\|Race reported\|========= Error\|Barrier error\|Uninitialized" $f | cut -c1-200 | head -8; }; done | tee -a $O/call.txt
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
if [ $((SECONDS-t0)) -lt 420 ]; then
  SEC="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy"
  timeout 100 ncu --clock-control none --kernel-name regex:ms_kernel --launch-skip 3 --launch-count 1 $SEC $C/ms_proto prof > $O/ncu_r32.txt 2>&1
  echo "ncu r32 rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
fi
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
