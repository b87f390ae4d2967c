source tools/kv-fidelity/cpu_env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
/usr/bin/python3 tools/kv-fidelity/kv_fidelity.py --hf /work/shared/data/tinylm-model --out build/kvf/A --windows 8 \
  --variants build/kvf/libkvtvariants.so \
  --variant "k2v2 fp16 cover=2,2,fp16,cover,1000,1000,8" \
  --variant "k2v2 fp8 cover=2,2,fp8,cover,1000,1000,8" \
  --variant "k2v2 fp8 nearest=2,2,fp8,nearest,1000,1000,8" \
  --variant "k2v2 fp8 mm=2,2,fp8,mm,1000,1000,8" \
  --variant "k2v2 fp16 mm=2,2,fp16,mm,1000,1000,8" \
  --variant "k2v2 fp8 mm c930=2,2,fp8,mm,930,930,8" \
  --variant "k2v2 fp8 mm c850=2,2,fp8,mm,850,850,8" \
  --variant "k2v2 fp8 mm k930 v850=2,2,fp8,mm,930,850,8" \
  --variant "k2v2 fp8 mm k850 v930=2,2,fp8,mm,850,930,8"
