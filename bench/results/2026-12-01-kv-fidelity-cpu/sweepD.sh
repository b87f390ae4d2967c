source tools/kv-fidelity/cpu_env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
/usr/bin/python3 tools/kv-fidelity/kv_fidelity.py --hf /work/shared/data/tinylm-model --out build/kvf/D --windows 8 \
  --variants build/kvf/libkvtvariants.so \
  --variant "k4v2 fp8 mm k1000 v850=4,2,fp8,mm,1000,850,8" \
  --variant "k2v2 fp16 mm c850=2,2,fp16,mm,850,850,8" \
  --variant "k4v2 fp16 mm k1000 v850=4,2,fp16,mm,1000,850,8" \
  --variant "k4v4 fp8 mm c930=4,4,fp8,mm,930,930,8"
