# Device call of 2026-12-07-h100-shared-tails.md; build_carry/st held kvtile_device_attention, kvtile_device_attention_policies and
# kvtile_bench_attention built (90a-real) from bd19ae5 + measured_form.diff. The std step was limited to 150 s (it finished).
set -u
O=$OUT; t0=$SECONDS; C=build_carry/st; B=$C/kvtile_bench_attention; SH=16,32,8,128,65536
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $O/call.txt
S="compute-sanitizer --error-exitcode 1"
run2() { local n=$1; local to=$2; shift 2; timeout $to stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
# 1. correctness first: the small set (shared-tail case included) and its sanitizers, then the full suites
run2 att_small 100 $C/kvtile_device_attention --small
grep -i "shared tails" $O/att_small.log | head -3 | tee -a $O/call.txt
for t in racecheck synccheck memcheck; do run2 ${t}_att 200 $S --tool $t $C/kvtile_device_attention --small & done
run2 att 200 $C/kvtile_device_attention &
run2 pol 200 $C/kvtile_device_attention_policies &
wait
grep -i "shared tails" $O/att.log | head -4 | tee -a $O/call.txt
# 2. A/B at 16 x 64K: shared tails on (default, k4v2_g128) / off / other sizes, twice
for r in 1 2; do
  timeout 60 $B --policies --shape $SH --iters 50 > $O/row$r.log 2>&1; echo "row$r rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
  awk '/^summary/{s=1} s' $O/row$r.log | grep -E '^(kernel|fp16_baseline|k4v2_g128(_sm80_bulk|_nosteal|_steal[0-9x]*|_sm80_bulk_nosteal|_mq2|_fp16s)?) ' | tee -a $O/call.txt
done
M=sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,sm__cycles_elapsed.max,gpu__time_duration.sum
for k in k4v2_g128 k4v2_g128_nosteal; do
  timeout 60 ncu --clock-control none --kernel-name regex:quant_decode_kernel --launch-skip 5 --launch-count 1 --metrics $M \
    $B --policies --iters 50 --shape $SH --kernel $k > $O/ncu_$k.log 2>&1
  echo "ncu $k rc=$? $(grep -E 'sm__cycles|gpu__time' $O/ncu_$k.log | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $O/call.txt
done
# 3. the standard set (default kernels), if time is left
[ $((SECONDS-t0)) -lt 200 ] && { timeout 150 $B --iters 50 > $O/std.log 2>&1; echo "std rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt; }
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
