#!/bin/bash
# kv-fidelity, 8 and 64 windows: the defaults at Sinkhorn 2, the same rounding with fp16 scales, and the
# 0.1 fp16_scales baseline (min-max / cover rounding, Sinkhorn 8)
cd "$(git rev-parse --show-toplevel)"  # run from anywhere in the repository, on a machine with a GPU and PyTorch
V=(--variant "k2v2 fp8 mm c850 it2=2,2,fp8,mm,850,850,2" --variant "k4v2 fp8 mm v850 it2=4,2,fp8,mm,1000,850,2"
   --variant "k4v4 fp8 mm it2=4,4,fp8,mm,1000,1000,2"
   --variant "k2v2 fp16 mm c850 it2=2,2,fp16,mm,850,850,2" --variant "k4v2 fp16 mm v850 it2=4,2,fp16,mm,1000,850,2"
   --variant "k4v4 fp16 mm it2=4,4,fp16,mm,1000,1000,2"
   --variant "k2v2 fp16 cover it8=2,2,fp16,cover,1000,1000,8" --variant "k4v2 fp16 cover it8=4,2,fp16,cover,1000,1000,8"
   --variant "k4v4 fp16 cover it8=4,4,fp16,cover,1000,1000,8")
for w in ${KVF_WINDOW_SETS:-8 64}; do
  R=${OUT:-build}/kvf/w$w; mkdir -p $R; t0=$SECONDS
  PYTHONUNBUFFERED=1 timeout 280 python3 tools/kv-fidelity/kv_fidelity.py --hf ../shared/data/tinylm-model --out $R --windows $w \
    --variants build/kvf/libkvtvariants.so "${V[@]}" > $R/log.txt 2>&1; echo "kvf rc $? ($((SECONDS-t0)) s)" >> $R/log.txt
  tail -11 $R/log.txt
done

