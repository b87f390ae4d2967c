#!/usr/bin/env bash
# Device call D3 (2026-12-08): the tail-pieces test fixed (9450e2c: no pieces required where the selected policy
# has none; the pieces' slots read one by one):
# initcheck on attention --small (sm_90a), after the prototype
# with the query operands in registers (QR 1, 2) and main's rows on the same shapes.
# build_carry/d3: kvtile_device_attention and kvtile_bench_attention (90a-real),
# ms_proto (sm_90a, from ms_proto.cu with qr.diff applied). Not run: no device time was left.
set -u
O=$OUT; t0=$SECONDS; C=build_carry/d3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
S="compute-sanitizer --error-exitcode 1"
run() { local n=$1; shift; timeout 400 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
timeout 200 $C/ms_proto > $O/ms_proto.txt 2>&1; echo "ms_proto rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
cat $O/ms_proto.txt
B=$C/kvtile_bench_attention
row() { timeout 60 $B --shape "$1" --kernel "$2" --iters 50 2>/dev/null |
        awk -v k="$2" '/^summary/{s=1} s && $1==k {printf "%s us (%s chunks, %s of ceiling)", $9, $8, $11}'; }
for k in k4v2_g128 k4v2_g128_mq2 k4v2_g128_mq4 k4v2_g128_mq8; do
  echo "main 16,32,8,128,65536 $k: $(row 16,32,8,128,65536 $k)" | tee -a $O/call.txt; done
for sh in 8,128,8,128,32768 2,8,1,128,32768 2,16,1,128,65536 1,32,8,128,16384; do
  echo "main $sh k4v2_g128: $(row $sh k4v2_g128)" | tee -a $O/call.txt; done
run initcheck_att $S --tool initcheck $C/kvtile_device_attention --small
wait
grep -hiE "tail pieces" $O/*.log | sort | uniq -c | head -12 | tee -a $O/call.txt
for f in $O/*.log; do grep -q "FAIL\|Race reported\|========= Error\|Barrier error\|Uninitialized" $f && { echo "== $f"; grep -n -B2 "FAIL\|Race reported\|========= Error\|Barrier error\|Uninitialized" $f | cut -c1-200 | head -8; }; done | tee -a $O/call.txt
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
