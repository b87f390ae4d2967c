#!/usr/bin/env bash
# call S1 (2026-12-07): the standard set on the landed device code (19c6760 = bedba12), kvtile bench + SDPA, one call
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $O/call.txt
timeout 420 $C/w6/kvtile_bench_attention --policies --json $O/attention.json --iters 50 > $O/bench.log.txt 2>&1
echo "bench rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
timeout 150 python3 bench/device/sdpa_bench.py --shapes $O/attention.json --json $O/sdpa.json --iters 50 > $O/sdpa.log.txt 2>&1
echo "sdpa rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
