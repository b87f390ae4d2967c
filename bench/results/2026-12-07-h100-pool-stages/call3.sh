set -u
O=$OUT; t0=$SECONDS; B=build_carry/pw/kvtile_bench_attention; SH=16,32,8,128,65536
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $O/call.txt
for r in 1 2; do
timeout 60 $B --policies --shape $SH --iters 50 > $O/row_all$r.log 2>&1; echo "row$r rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
awk '/^summary/{s=1} s' $O/row_all$r.log | grep -E '^(kernel|fp16_baseline|k4v2_g128(_sm80_bulk|_pool[0-9x]*|_mq2|_fp16s)?) ' | tee -a $O/call.txt
done
S="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats"
for k in k4v2_g128 k4v2_g128_sm80_bulk k4v2_g128_pool10x12 k4v2_g128_pool12x14; do
  timeout 60 ncu --clock-control none --kernel-name regex:quant_decode_kernel --launch-skip 5 --launch-count 1 $S \
    --metrics smsp__inst_executed.sum,dram__bytes_read.sum $B --policies --iters 50 --shape $SH --kernel $k > $O/ncu_$k.log 2>&1
  echo "ncu $k rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
done
run2() { local n=$1; shift; timeout 200 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
for t in build_carry/dv/*; do run2 sm90a_$(basename $t) $t & done
run2 att build_carry/w6t/kvtile_device_attention &
run2 pol build_carry/w6t/kvtile_device_attention_policies &
wait
(cd $O && tar czf logs3.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
