set -u
O=$OUT; t0=$SECONDS; B=build_carry/pw2/kvtile_bench_attention; SH=16,32,8,128,65536
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $O/call.txt
for r in 1 2; do
timeout 60 $B --policies --shape $SH --iters 50 > $O/row_all$r.log 2>&1; echo "row$r rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
awk '/^summary/{s=1} s' $O/row_all$r.log | grep -E '^(kernel|fp16_baseline|k4v2_g128(_sm80_bulk|_pool[0-9x]*|_mq2|_fp16s)?) ' | tee -a $O/call.txt
done
M=sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,sm__cycles_elapsed.max,dram__bytes_read.sum,gpu__time_duration.sum
for k in k4v2_g128 k4v2_g128_sm80_bulk k4v2_g128_pool10x12 k4v2_g128_pool12x11 k4v2_g128_fp16s k4v2_g128_mq2 fp16_baseline; do
  kn=quant_decode_kernel; [ $k = fp16_baseline ] && kn=fp16_decode_kernel
  timeout 60 ncu --clock-control none --kernel-name regex:$kn --launch-skip 5 --launch-count 1 --metrics $M \
    $B --policies --iters 50 --shape $SH --kernel $k > $O/ncu_$k.log 2>&1
  echo "ncu $k rc=$? $((SECONDS-t0)) s $(grep -E 'sm__cycles|gpu__time' $O/ncu_$k.log | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $O/call.txt
done
(cd $O && tar czf logs4.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
