set -u
O=$OUT; t0=$SECONDS; C=build_carry/st; B=$C/kvtile_bench_attention; OLD=build_carry/old/kvtile_bench_attention; SH=16,32,8,128,65536
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
S="compute-sanitizer --error-exitcode 1"
run2() { local n=$1; local to=$2; shift 2; timeout $to stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
run2 att_small 60 $C/kvtile_device_attention --small &
run2 racecheck_att 90 $S --tool racecheck $C/kvtile_device_attention --small &
wait
grep -i "shared tails" $O/att_small.log | head -2 | tee -a $O/call.txt
for r in 1 2; do
  timeout 60 $B --policies --shape $SH --iters 50 > $O/new$r.log 2>&1; echo "new$r rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
  awk '/^summary/{s=1} s' $O/new$r.log | grep -E '^(kernel|fp16_baseline|k4v2_g128|k4v2_g128_(mq2|fp16s|sink|steal128x32|steal64x64|steal128x128|sm80_bulk)(_nosteal)?|k2v2_g128(_nosteal)?|k4v2_g128_nosteal) ' | tee -a $O/call.txt
  [ $r = 1 ] && { timeout 60 $OLD --policies --shape $SH --iters 50 > $O/old.log 2>&1; echo "old rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
    awk '/^summary/{s=1} s' $O/old.log | grep -E '^(kernel|fp16_baseline|k4v2_g128|k4v2_g128_(mq2|fp16s|sink|sm80_bulk)|k2v2_g128) ' | tee -a $O/call.txt; }
done
for r in 1 2; do for b in new old; do X=$B; [ $b = old ] && X=$OLD; for sh in ragged32 ragged64; do timeout 60 $X --shape $sh --kernel k4v2_g128 --iters 50 > $O/r_$b$r$sh.log 2>&1; echo "$b$r $sh rc=$? $(awk "/^summary/{s=1} s" $O/r_$b$r$sh.log | grep "^k4v2_g128 " | tr -s " ")" | tee -a $O/call.txt; done; done; done
(cd $O && tar czf logs2.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
