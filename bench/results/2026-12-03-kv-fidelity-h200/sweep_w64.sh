#!/bin/bash
# kv-fidelity, 64 windows: defaults at 4 and 8 Sinkhorn iterations, k2v2 no clip at 2, 4, 8, the 0.1 fp16_scales baselines
# run from the repository root on a machine with a GPU and PyTorch
R=${OUT:-build}/kvf64; mkdir -p $R
V=()
for it in 4 8; do
  V+=(--variant "k2v2 fp8 mm c850 it$it=2,2,fp8,mm,850,850,$it" --variant "k4v2 fp8 mm v850 it$it=4,2,fp8,mm,1000,850,$it"
      --variant "k4v4 fp8 mm it$it=4,4,fp8,mm,1000,1000,$it")
done
for it in 2 4 8; do V+=(--variant "k2v2 fp8 mm it$it=2,2,fp8,mm,1000,1000,$it"); done
V+=(--variant "k2v2 fp16 cover it8=2,2,fp16,cover,1000,1000,8" --variant "k4v2 fp16 cover it8=4,2,fp16,cover,1000,1000,8" --variant "k4v4 fp16 cover it8=4,4,fp16,cover,1000,1000,8")
PYTHONUNBUFFERED=1 timeout ${KVF_TIMEOUT:-400} python3 tools/kv-fidelity/kv_fidelity.py --hf ../shared/data/tinylm-model --out $R --windows 64 \
  --variants build/kvf/libkvtvariants.so "${V[@]}" > $R/log.txt 2>&1; echo "kvf64 rc $?" >> $R/log.txt
cat $R/log.txt | tail -14
