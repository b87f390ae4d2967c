#!/usr/bin/env bash
# call EP (2026-12-07): the evenphase build (barriers initialized once per kernel; each chunk leaves
# every full barrier at an even phase count) against main's device code (build_carry/pb): ring_sync
# under racecheck, A/B rows (two interleaved rounds), then the suites and all four sanitizers.
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
timeout 60 $C/ep/kvtile_device_ring_sync --reinit > $O/rs.txt 2>&1; echo "rs rc=$?" | tee -a $O/call.txt
timeout 120 stdbuf -o0 -e0 compute-sanitizer --tool racecheck $C/ep/kvtile_device_ring_sync --reinit > $O/rs_race_reinit.txt 2>&1
echo "rs_race_reinit rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
timeout 120 stdbuf -o0 -e0 compute-sanitizer --tool racecheck --error-exitcode 1 $C/ep/kvtile_device_ring_sync > $O/rs_race.txt 2>&1
echo "rs_race (default modes) rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
grep -E "ok|FAIL|Race|SUMMARY" $O/rs_race_reinit.txt $O/rs_race.txt | cut -c1-200
run() { local n=$1; shift; timeout 240 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/suites.txt; }
S="compute-sanitizer --error-exitcode 1"
for t in racecheck memcheck synccheck initcheck; do
  run ${t}_att $S --tool $t $C/ep/kvtile_device_attention --small &
  run ${t}_pol $S --tool $t $C/ep/kvtile_device_attention_policies --small &
done
run att $C/ep/kvtile_device_attention &
run pol $C/ep/kvtile_device_attention_policies &
wait
sort $O/suites.txt
for f in $O/*.log; do grep -q "Race reported\|Error" $f && { echo "== $f"; grep -n -B2 "Race reported\|========= Error\|Invalid" $f | cut -c1-200 | head -10; }; done
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
row() { $1/kvtile_bench_attention --shape "$2" --kernel "$3" --iters 100 ${4:-} 2>/dev/null |
        awk -v k="$3" '/^summary/{s=1} s && $1==k {printf "%s:%s", $8, $9}'; }
ab() {  # shape [kernel [flags]]
  local k=${2:-k4v2_g128} l="ep $1 ${2:-k4v2_g128}"
  for r in 1 2; do l="$l new=$(row $C/ep $1 $k "${3:-}") old=$(row $C/pb $1 $k "${3:-}")"; done
  echo "$l $((SECONDS-t0)) s" | tee -a $O/call.txt
}
for s in ragged32 1,32,8,128,16384 2,8,1,128,32768 2,16,1,128,65536 16,32,8,128,65536 8,128,8,128,32768; do ab $s; done
ab ragged32 k4v2_g128_sm86 --policies
ab 16,32,8,128,65536 k4v2_g128_sm80 --policies
