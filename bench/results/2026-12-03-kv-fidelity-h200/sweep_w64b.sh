#!/bin/bash
# kv-fidelity, 64 windows: fp16-scale rows of the default rounding at 4 iterations; k2v2 / k4v2 no clip at other counts
# run from the repository root on a machine with a GPU and PyTorch
R=${OUT:-build}/kvf64b; mkdir -p $R
V=(--variant "k2v2 fp16 mm c850 it4=2,2,fp16,mm,850,850,4" --variant "k4v2 fp16 mm v850 it4=4,2,fp16,mm,1000,850,4"
   --variant "k4v4 fp16 mm it4=4,4,fp16,mm,1000,1000,4")
for it in 0 1 16; do V+=(--variant "k2v2 fp8 mm it$it=2,2,fp8,mm,1000,1000,$it"); done
for it in 0 2 4 8; do V+=(--variant "k4v2 fp8 mm it$it=4,2,fp8,mm,1000,1000,$it"); done
PYTHONUNBUFFERED=1 timeout ${KVF_TIMEOUT:-300} python3 tools/kv-fidelity/kv_fidelity.py --hf ../shared/data/tinylm-model --out $R --windows 64 \
  --variants build/kvf/libkvtvariants.so "${V[@]}" > $R/log.txt 2>&1; echo "kvf64b rc $?" >> $R/log.txt
tail -12 $R/log.txt
