# Source before running kv_fidelity.py on a CPU-only Debian 12 machine: Debian's python3-torch links the
# reference BLAS (~1 GFLOP/s); OpenBLAS unpacked locally (no system change):
#   mkdir -p build/openblas && cd build/openblas && apt-get download libopenblas0-pthread && dpkg -x *.deb root
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LD_LIBRARY_PATH=$here/build/openblas/root/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
