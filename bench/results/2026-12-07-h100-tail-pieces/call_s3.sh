# Device call S3 of branch steal2, the landed form (CTAs without chunks of their own take no pieces): build_carry/s3 holds
# kvtile_device_attention, kvtile_device_attention_policies and kvtile_bench_attention (90a-real).
set -u
O=$OUT; t0=$SECONDS; C=build_carry/s3; B=$C/kvtile_bench_attention; SH=16,32,8,128,65536
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
S="compute-sanitizer --error-exitcode 1"
run2() { local n=$1; local to=$2; shift 2; timeout $to stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
run2 att_small 60 $C/kvtile_device_attention --small
grep -iE "tail pieces|FAIL" $O/att_small.log | head -8 | tee -a $O/call.txt
run2 racecheck_att 120 $S --tool racecheck $C/kvtile_device_attention --small &
run2 att 150 $C/kvtile_device_attention &
[ -x $C/kvtile_device_attention_policies ] && run2 pol 150 $C/kvtile_device_attention_policies &
wait
grep -iE "tail pieces|FAIL" $O/att.log | head -8 | tee -a $O/call.txt
grep -iE "FAIL" $O/pol.log $O/racecheck_att.log 2>/dev/null | head -5 | tee -a $O/call.txt
for r in 1; do
  timeout 90 $B --policies --shape $SH --iters 50 > $O/p$r.log 2>&1; echo "p$r rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
  awk '/^summary/{s=1} s' $O/p$r.log | grep -E '^(kernel|fp16_baseline|k4v2_g128|k4v2_g128_(mq2|fp16s|sink|steal128x32|sm80_bulk|sm80|sm86|sm120|bf16q|fused)(_nosteal|_steal)?|k2v2_g128(_nosteal|_noidle)?|k4v2_g128_nosteal|k4v2_g128_noidle|k4v2_g128_mq2_noidle|k4v4_g128) ' | tee -a $O/call.txt
done
for r in 1; do for sh in ragged32 ragged64; do timeout 60 $B --shape $sh --kernel k4v2_g128 --iters 50 > $O/r$r$sh.log 2>&1; echo "r$r $sh rc=$? $(awk '/^summary/{s=1} s' $O/r$r$sh.log | grep '^k4v2_g128 ' | tr -s ' ')" | tee -a $O/call.txt; done; done
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
