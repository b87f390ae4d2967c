set -u
O=$OUT; t0=$SECONDS; B=build_carry/pw/kvtile_bench_attention; SH=16,32,8,128,65536
export CUDA_CACHE_MAXSIZE=4294967296
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
run2() { local n=$1; local to=$2; shift 2; timeout $to stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
C=build_carry/jit80m
S="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats"
for k in k4v2_g128 k4v2_g128_mq2 k4v2_g128_sm80_bulk k4v2_g128_pool10x12; do
  timeout 60 ncu --clock-control none --kernel-name regex:quant_decode_kernel --launch-skip 5 --launch-count 1 $S \
    --metrics smsp__inst_executed.sum,dram__bytes_read.sum $B --policies --iters 50 --shape $SH --kernel $k > $O/ncu_$k.log 2>&1
  echo "ncu $k rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
done
timeout 60 $B --policies --shape $SH --iters 50 > $O/row_all2.log 2>&1; echo "row2 rc=$?" | tee -a $O/call.txt
awk '/^summary/{s=1} s' $O/row_all2.log | grep -E 'k4v2_g128(_sm80_bulk|_pool|_mq2 | )' | tee -a $O/call.txt
CUDA_FORCE_PTX_JIT=1 run2 jit80_att_small 300 $C/kvtile_device_attention --small &
CUDA_FORCE_PTX_JIT=1 run2 jit80_pol 300 $C/kvtile_device_attention_policies &
wait
CUDA_FORCE_PTX_JIT=1 run2 jit80_synccheck_att $((585-SECONDS+t0)) compute-sanitizer --error-exitcode 1 --tool synccheck $C/kvtile_device_attention --small
(cd $O && tar czf logs2.tgz jit80_*.log row_all2.log ncu_*.log && rm -f jit80_*.log row_all2.log ncu_*.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
