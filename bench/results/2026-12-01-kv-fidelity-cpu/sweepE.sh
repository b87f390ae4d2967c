source tools/kv-fidelity/cpu_env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
/usr/bin/python3 tools/kv-fidelity/kv_fidelity.py --hf /work/shared/data/tinylm-model --out build/kvf/E --windows 8 \
  --variants build/kvf/libkvtvariants.so \
  --variant "k2v2 fp8 mm c800=2,2,fp8,mm,800,800,8" \
  --variant "k4v2 fp8 mm k950 v850=4,2,fp8,mm,950,850,8" \
  --variant "k4v2 fp8 mm k970 v800=4,2,fp8,mm,970,800,8"
