source tools/kv-fidelity/cpu_env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
/usr/bin/python3 tools/kv-fidelity/kv_fidelity.py --hf /work/shared/data/tinylm-model --out build/kvf/C --windows 8 \
  --variants build/kvf/libkvtvariants.so \
  --variant "k2v2 fp8 mm it0=2,2,fp8,mm,1000,1000,0" \
  --variant "k2v2 fp8 mm it2=2,2,fp8,mm,1000,1000,2" \
  --variant "k2v2 fp8 mm it16=2,2,fp8,mm,1000,1000,16" \
  --variant "k2v2 fp8 mm voff=2,2,fp8,mm,1000,1000,8,voff" \
  --variant "k4v2 fp8 mm voff=4,2,fp8,mm,1000,1000,8,voff"
