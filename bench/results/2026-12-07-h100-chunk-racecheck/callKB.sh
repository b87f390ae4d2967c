#!/usr/bin/env bash
# call KB (prepared 2026-12-07 for the next session): barriers initialized once per kernel and kept
# from chunk to chunk (branch keepbars, build_carry/kb) against main's device code (build_carry/pb),
# then racecheck of main (build_carry/fin: the multi-chunk ring cases of ec56a84) and of keepbars
# (which adds the stage-pool and 16-row multi-chunk cases to --small), stdout unbuffered.
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
# ring_sync modes 4 (two chunks, barriers inval + init between) and 5 (kept), racecheck, unbuffered
timeout 120 stdbuf -o0 -e0 compute-sanitizer --tool racecheck $C/rs/kvtile_device_ring_sync --reinit > $O/rs_race.txt 2>&1
echo "rs_race rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt; grep -E "ok|FAIL|Race|ERROR SUMMARY|RACECHECK SUMMARY" $O/rs_race.txt | head -20
run() { local n=$1; shift; timeout 400 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $((SECONDS-t0)) s" | tee -a $O/suites.txt; }
S="compute-sanitizer --error-exitcode 1"
run fin_race_att $S --tool racecheck $C/fin/kvtile_device_attention --small &
run fin_race_pol $S --tool racecheck $C/fin/kvtile_device_attention_policies --small &
run kb_race_att $S --tool racecheck $C/kb/kvtile_device_attention --small &
run kb_race_pol $S --tool racecheck $C/kb/kvtile_device_attention_policies --small &
run kb_mem_att $S --tool memcheck $C/kb/kvtile_device_attention --small &
run kb_att $C/kb/kvtile_device_attention &
run kb_pol $C/kb/kvtile_device_attention_policies &
wait
sort $O/suites.txt
for f in $O/*race*.log; do echo "== $f"; grep -n -B2 "Race reported" $f | cut -c1-200 | head -12; done
cd $O && tar czf logs.tgz *.log && rm -f *.log
