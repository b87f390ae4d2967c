#!/usr/bin/env bash
# call D1 (2026-12-07): the warp-specialized wgmma prototype wg_ws.cu (../2026-12-07-h100-wgmma-mq/wg_proto.cu
#   patched with wg_ws.diff of this folder), built as build_carry/ws/wg_ws with
#   nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -o build_carry/ws/wg_ws wg_ws.cu
# and main's device binaries (19c6760) in build_carry/w6. On an H200 it would also have run main's suites and standard set (it came on an H100).
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
timeout 240 $C/ws/wg_ws > $O/wg_ws.txt 2>&1; echo "wg_ws rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
cat $O/wg_ws.txt
row() { $C/w6/kvtile_bench_attention --shape "$1" --kernel "$2" --iters 50 2>/dev/null |
        awk -v k="$2" '/^summary/{s=1} s && $1==k {printf "%s us (%s chunks)", $9, $8}'; }
for k in k4v2_g128 k4v2_g128_mq4 k4v2_g128_mq8; do
  echo "main 16,32,8,128,65536 $k: $(row 16,32,8,128,65536 $k)" | tee -a $O/call.txt; done
echo "main 8,128,8,128,32768 k4v2_g128: $(row 8,128,8,128,32768 k4v2_g128)" | tee -a $O/call.txt
timeout 120 compute-sanitizer --tool memcheck $C/ws/wg_ws 2 8 1 > $O/ws_memcheck.log 2>&1; echo "memcheck rc=$? $(grep SUMMARY $O/ws_memcheck.log)" | tee -a $O/call.txt
timeout 120 compute-sanitizer --tool racecheck $C/ws/wg_ws 2 8 1 > $O/ws_racecheck.log 2>&1; echo "racecheck rc=$? $(grep SUMMARY $O/ws_racecheck.log)" | tee -a $O/call.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  # on an H200: main's landed device code (19c6760 = b23498d) has not run there yet: suites, sanitizers on --small, standard set
  S="compute-sanitizer --error-exitcode 1"
  run() { local n=$1; shift; timeout 200 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
    echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/suites.txt; }
  for t in synccheck racecheck memcheck; do
    run ${t}_att $S --tool $t $C/w6/kvtile_device_attention --small &
    run ${t}_pol $S --tool $t $C/w6/kvtile_device_attention_policies --small &
  done
  run rs $C/w6/kvtile_device_ring_sync &
  run att $C/w6/kvtile_device_attention &
  run pol $C/w6/kvtile_device_attention_policies &
  wait
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a $O/call.txt
  timeout 200 $C/w6/kvtile_bench_attention --policies --json $O/attention.json --iters 50 > $O/bench.log 2>&1
  echo "bench rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
  timeout 100 python3 bench/device/sdpa_bench.py --shapes $O/attention.json --json $O/sdpa.json --iters 50 > $O/sdpa.log 2>&1
  echo "sdpa rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
fi
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
