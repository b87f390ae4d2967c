source tools/kv-fidelity/cpu_env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
/usr/bin/python3 tools/kv-fidelity/kv_fidelity.py --hf /work/shared/data/tinylm-model --out build/kvf/B --windows 8 \
  --variants build/kvf/libkvtvariants.so \
  --variant "k4v2 fp16 cover=4,2,fp16,cover,1000,1000,8" \
  --variant "k4v2 fp8 cover=4,2,fp8,cover,1000,1000,8" \
  --variant "k4v2 fp8 mm=4,2,fp8,mm,1000,1000,8" \
  --variant "k4v2 fp16 mm=4,2,fp16,mm,1000,1000,8" \
  --variant "k4v2 fp8 mm k1000 v930=4,2,fp8,mm,1000,930,8" \
  --variant "k4v2 fp8 mm k970 v930=4,2,fp8,mm,970,930,8" \
  --variant "k4v4 fp16 cover=4,4,fp16,cover,1000,1000,8" \
  --variant "k4v4 fp8 cover=4,4,fp8,cover,1000,1000,8" \
  --variant "k4v4 fp8 mm=4,4,fp8,mm,1000,1000,8" \
  --variant "k4v4 fp16 mm=4,4,fp16,mm,1000,1000,8" \
  --variant "k4v4 fp8 mm c970=4,4,fp8,mm,970,970,8"
