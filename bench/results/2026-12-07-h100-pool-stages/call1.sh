#!/usr/bin/env bash
# Call 1 of 2026-12-07-h100-pool-stages.md (prepared on branch poolws; build here first, no GPU needed):
#   cmake --preset default -DKVTILE_CUDA_ARCHITECTURES=90a-real && ninja -C build/default kvtile_bench_attention \
#     kvtile_device_attention_fp8_d64 kvtile_device_attention_fp8_d128 kvtile_device_attention_fp8_d256 \
#     kvtile_device_attention_fp16s_d64 kvtile_device_attention_fp16s_d128 kvtile_device_attention_fp16s_d256 \
#     kvtile_device_speculative
#   ninja -C build/gpu-jit80 kvtile_device_attention kvtile_device_attention_policies
#   mkdir -p build_carry/pw build_carry/dv build_carry/jit80m
#   cp build/default/bench/kvtile_bench_attention build_carry/pw/
#   cp build/default/tests/kvtile_device_attention_fp{8,16s}_d{64,128,256} build/default/tests/kvtile_device_speculative build_carry/dv/
#   cp build/gpu-jit80/tests/kvtile_device_attention{,_policies} build_carry/jit80m/
# then one device call with carry ["build_carry/pw", "build_carry/dv", "build_carry/jit80m", "bench/results/next-poolws/call.sh"]
# (about 4 minutes; best on an H100 and again on an H200):
#  A. 16 x 64K: every kernel of the --policies run at that shape, with the Hopper policy's stage pool at other
#     warp / stage counts (pool_ws<W, S> in bench/device/attention.cu on this branch); Nsight Compute (clocks as they
#     are) of the one-token packed kernel and of 2 new tokens (8-query layout).
#  B. sm_90a: the six fp64 sweeps and speculative on main's device code (not run since 19c6760).
#  C. from compute_80 PTX JIT-compiled: mbar_wait's pre-sm_90 branch as a loop over mbar_test (main, 2026-12-07).
set -u
O=$OUT; t0=$SECONDS; B=build_carry/pw/kvtile_bench_attention; SH=16,32,8,128,65536
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $O/call.txt
timeout 90 $B --policies --shape $SH --iters 50 > $O/row_all.log 2>&1; echo "all kernels at $SH rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
awk '/^summary/{s=1} s' $O/row_all.log | tee -a $O/call.txt
S="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats"
for k in k4v2_g128 k4v2_g128_mq2 k4v2_g128_sm80_bulk; do
  timeout 60 ncu --clock-control none --kernel-name regex:quant_decode_kernel --launch-skip 5 --launch-count 1 $S \
    --metrics smsp__inst_executed.sum,dram__bytes_read.sum $B --policies --iters 8 --shape $SH --kernel $k > $O/ncu_$k.log 2>&1
  echo "ncu $k rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
done
run2() { local n=$1; shift; timeout 120 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
for t in build_carry/dv/*; do run2 sm90a_$(basename $t) $t & done
C=build_carry/jit80m
CUDA_FORCE_PTX_JIT=1 run2 jit80_att_small $C/kvtile_device_attention --small &
CUDA_FORCE_PTX_JIT=1 run2 jit80_pol $C/kvtile_device_attention_policies &
CUDA_FORCE_PTX_JIT=1 run2 jit80_synccheck_att compute-sanitizer --error-exitcode 1 --tool synccheck $C/kvtile_device_attention --small &
wait
(cd $O && tar czf logs.tgz jit80_*.log sm90a_*.log row_all.log && rm -f jit80_*.log sm90a_*.log row_all.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
