#!/bin/bash
# kv-fidelity, 8 windows (those of docs/accuracy.md): defaults and fp16 baselines at 4 and 8 Sinkhorn iterations, k2v2 no clip at 0-16
# run from the repository root on a machine with a GPU and PyTorch
R=${OUT:-build}/kvf; mkdir -p $R
SO=build/kvf/libkvtvariants.so
V=()
for it in 4 8; do
  V+=(--variant "k2v2 fp8 mm c850 it$it=2,2,fp8,mm,850,850,$it" --variant "k4v2 fp8 mm v850 it$it=4,2,fp8,mm,1000,850,$it"
      --variant "k4v4 fp8 mm it$it=4,4,fp8,mm,1000,1000,$it"
      --variant "k2v2 fp16 mm c850 it$it=2,2,fp16,mm,850,850,$it" --variant "k4v2 fp16 mm v850 it$it=4,2,fp16,mm,1000,850,$it"
      --variant "k4v4 fp16 mm it$it=4,4,fp16,mm,1000,1000,$it"
      --variant "k2v2 fp16 cover it$it=2,2,fp16,cover,1000,1000,$it" --variant "k4v2 fp16 cover it$it=4,2,fp16,cover,1000,1000,$it"
      --variant "k4v4 fp16 cover it$it=4,4,fp16,cover,1000,1000,$it")
done
for it in 0 1 2 4 8 16; do V+=(--variant "k2v2 fp8 mm it$it=2,2,fp8,mm,1000,1000,$it"); done
PYTHONUNBUFFERED=1 timeout ${KVF_TIMEOUT:-300} python3 tools/kv-fidelity/kv_fidelity.py --hf ../shared/data/tinylm-model --out $R --windows ${KVF_WINDOWS:-8} \
  --variants $SO "${V[@]}" > $R/log.txt 2>&1; echo "kvf rc $?" >> $R/log.txt
tail -5 $R/log.txt
