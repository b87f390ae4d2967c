#!/bin/bash
# kv-fidelity, 256 windows (KVF_WINDOWS): the defaults (k2v2 clip 85%, k4v2 V clip 85%, k4v4) at Sinkhorn 1, 2, 4
cd "$(git rev-parse --show-toplevel)"  # run from anywhere in the repository, on a machine with a GPU and PyTorch
R=${OUT:-build}/kvf; mkdir -p $R
V=()
for it in 1 2 4; do
  V+=(--variant "k2v2 fp8 mm c850 it$it=2,2,fp8,mm,850,850,$it" --variant "k4v2 fp8 mm v850 it$it=4,2,fp8,mm,1000,850,$it"
      --variant "k4v4 fp8 mm it$it=4,4,fp8,mm,1000,1000,$it")
done
t0=$SECONDS
PYTHONUNBUFFERED=1 timeout 520 python3 tools/kv-fidelity/kv_fidelity.py --hf ../shared/data/tinylm-model --out $R --windows ${KVF_WINDOWS:-256} \
  --variants build/kvf/libkvtvariants.so "${V[@]}" > $R/log.txt 2>&1; echo "kvf rc $? ($((SECONDS-t0)) s)" >> $R/log.txt

tail -14 $R/log.txt
