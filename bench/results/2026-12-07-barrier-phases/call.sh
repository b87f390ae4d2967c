#!/usr/bin/env bash
# Calls W3, W5, W6 (2026-12-07): bash call.sh NEW (build_carry/w3, w5 or w6: ring_sync, attention,
# attention_policies, kvtile_bench_attention of one form) against main's device code (build_carry/pb):
# ring_sync and the --small suites under synccheck, racecheck, memcheck and initcheck, the full suites,
# then A/B rows. W3 ran it without the ring_sync --unequal --reinit line.
set -u
C=build_carry; O=$OUT; t0=$SECONDS; N=${1:?usage: call.sh w3|w5|w6}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
S="compute-sanitizer --error-exitcode 1"
for t in synccheck racecheck; do
  timeout 60 stdbuf -o0 -e0 $S --tool $t $C/$N/kvtile_device_ring_sync > $O/rs_$t.txt 2>&1
  echo "rs_$t rc=$? $(grep SUMMARY $O/rs_$t.txt | cut -c10-)" | tee -a $O/call.txt
done
timeout 60 stdbuf -o0 -e0 $S --tool racecheck $C/$N/kvtile_device_ring_sync --unequal --reinit > $O/rs_racecheck_flags.txt 2>&1
echo "rs_racecheck_flags rc=$? $(grep SUMMARY $O/rs_racecheck_flags.txt | cut -c10-)" | tee -a $O/call.txt
run() { local n=$1; shift; timeout 150 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/suites.txt; }
for t in synccheck racecheck memcheck initcheck; do
  run ${t}_att $S --tool $t $C/$N/kvtile_device_attention --small &
  run ${t}_pol $S --tool $t $C/$N/kvtile_device_attention_policies --small &
done
run att $C/$N/kvtile_device_attention &
run pol $C/$N/kvtile_device_attention_policies &
wait
for f in $O/*.log; do grep -q "Race reported\|========= Error\|Barrier error" $f && { echo "== $f"; grep -n -B2 "Race reported\|========= Error\|Barrier error" $f | cut -c1-200 | head -8; }; done
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
row() { $1/kvtile_bench_attention --shape "$2" --kernel "$3" --iters 100 ${4:-} 2>/dev/null |
        awk -v k="$3" '/^summary/{s=1} s && $1==k {printf "%s:%s", $8, $9}'; }
ab() {
  local k=${2:-k4v2_g128} l="$N $1 ${2:-k4v2_g128}"
  for r in 1 2; do l="$l new=$(row $C/$N $1 $k "${3:-}") old=$(row $C/pb $1 $k "${3:-}")"; done
  echo "$l $((SECONDS-t0)) s" | tee -a $O/call.txt
}
for s in 8,128,8,128,32768 16,32,8,128,65536 ragged32 2,16,1,128,65536 1,32,8,128,16384; do ab $s; done
ab 8,128,8,128,32768 k4v2_g128_sm86 --policies
