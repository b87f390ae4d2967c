#!/usr/bin/env bash
# branch steal (2a5271b) at 16 x 64K: every --policies row, pieces on and off (*_nosteal) from one binary, twice.
set -u
O=$OUT; t0=$SECONDS; B=build_carry/stb/kvtile_bench_attention; SH=16,32,8,128,65536
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $O/call.txt
for r in 1 2; do
  timeout 60 $B --policies --shape $SH --iters 50 > $O/new$r.log 2>&1; echo "new$r rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
  awk '/^summary/{s=1} s' $O/new$r.log | awk '{print $1, $8, $9, $11}' | tee -a $O/call.txt
done
