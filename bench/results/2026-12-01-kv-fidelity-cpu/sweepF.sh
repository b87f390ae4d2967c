source tools/kv-fidelity/cpu_env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
/usr/bin/python3 tools/kv-fidelity/kv_fidelity.py --hf /work/shared/data/tinylm-model --out build/kvf/F --windows 8 \
  --variants build/kvf/libkvtvariants.so \
  --variant "k4v2 fp8 mm k970 v850=4,2,fp8,mm,970,850,8" \
  --variant "k4v2 fp16 mm k970 v850=4,2,fp16,mm,970,850,8" \
  --variant "k4v4 fp16 mm c970=4,4,fp16,mm,970,970,8"
