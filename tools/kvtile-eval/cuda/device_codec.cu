// tools/kvtile-eval/cuda/device_codec.cu: device_codec.hpp for CUDA builds
// (KVTILE_EVAL_HAVE_CUDA = 1): GPU detection, the per-layer buffers and the
// launch of the head_dim's kernel (device_codec_d{64,128,256}.cu).
#include <cuda_runtime.h>

#include "../device_codec.hpp"
#include "device_codec_kernels.cuh"

#if !KVTILE_EVAL_HAVE_CUDA
#error "tools/kvtile-eval/cuda/*.cu is compiled only in CUDA builds (KVTILE_EVAL_HAVE_CUDA=1)"
#endif

namespace kvtile_eval {

namespace {
template <class T>
struct dev_buffer {
  T* p = nullptr;
  std::size_t n = 0;
  ~dev_buffer() {
    if (p) cudaFree(p);
  }
  cudaError_t reserve(std::size_t count) {  // grows only; contents are not kept
    if (count <= n) return cudaSuccess;
    if (p) cudaFree(p);
    p = nullptr;
    n = 0;
    const cudaError_t e = cudaMalloc(&p, count * sizeof(T));
    if (e == cudaSuccess) n = count;
    return e;
  }
};

bool cuda_ok(cudaError_t e, const char* what, std::string& err) {
  if (e == cudaSuccess) return true;
  err = std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e);
  return false;
}

cuda::launch_result launch(const kvtile::codec_params& p, const cuda::launch_args& a, std::size_t items) {
  switch (p.head_dim) {
    case 64: return cuda::launch_d64(p, a, items);
    case 128: return cuda::launch_d128(p, a, items);
    case 256: return cuda::launch_d256(p, a, items);
    default: return {};
  }
}
}  // namespace

bool device_available(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    why = std::string("no GPU (no CUDA device found") + (e != cudaSuccess ? std::string(": ") + cudaGetErrorString(e) : "") +
          ")";
    return false;
  }
  return true;
}

bool device_supports(const kvtile::codec_params& p) { return launch(p, cuda::launch_args{}, 0).supported; }

struct device_codec_session::impl {
  dev_buffer<float> k, v, kh, vh;
  dev_buffer<unsigned char> rec;
  dev_buffer<int> st;
  int heads = 0, tokens = 0, head_dim = 0;
};

device_codec_session::device_codec_session() : d_(new impl) {}
device_codec_session::~device_codec_session() = default;

bool device_codec_session::upload(const float* k, const float* v, int heads, int tokens, int head_dim,
                                  std::string& err) {
  const std::size_t n = static_cast<std::size_t>(heads) * tokens * head_dim;
  if (!cuda_ok(d_->k.reserve(n), "cudaMalloc", err) || !cuda_ok(d_->v.reserve(n), "cudaMalloc", err) ||
      !cuda_ok(d_->kh.reserve(n), "cudaMalloc", err) || !cuda_ok(d_->vh.reserve(n), "cudaMalloc", err))
    return false;
  if (!cuda_ok(cudaMemcpy(d_->k.p, k, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (keys)", err) ||
      !cuda_ok(cudaMemcpy(d_->v.p, v, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (values)", err))
    return false;
  d_->heads = heads;
  d_->tokens = tokens;
  d_->head_dim = head_dim;
  return true;
}

bool device_codec_session::roundtrip(const kvtile::codec_params& p, float* kh, float* vh, std::vector<int>& statuses,
                                     std::vector<unsigned char>* records, std::string& err) {
  if (p.head_dim != d_->head_dim) {
    err = "device roundtrip: head_dim differs from the uploaded layer";
    return false;
  }
  const cuda::launch_result q = launch(p, cuda::launch_args{}, 0);
  if (!q.supported) {
    err = "no device kernel for this codec in this build";
    return false;
  }
  const int H = d_->heads, T = d_->tokens, D = d_->head_dim;
  const int tiles = T / p.tile_tokens;
  const std::size_t items = static_cast<std::size_t>(tiles) * H;
  statuses.assign(items, 0);
  if (records) records->assign(items * q.record_bytes, 0);
  if (items == 0) return true;
  if (!cuda_ok(d_->rec.reserve(items * q.record_bytes), "cudaMalloc", err) ||
      !cuda_ok(d_->st.reserve(items), "cudaMalloc", err))
    return false;
  cuda::launch_args a;
  a.k = d_->k.p;
  a.v = d_->v.p;
  a.kh = d_->kh.p;
  a.vh = d_->vh.p;
  a.rec = d_->rec.p;
  a.st = d_->st.p;
  a.heads = H;
  a.tokens = T;
  const std::size_t n = static_cast<std::size_t>(H) * T * D;
  // a tile whose encode fails is not decoded: its tokens read back as 0
  if (!cuda_ok(cudaMemset(d_->kh.p, 0, n * sizeof(float)), "cudaMemset", err) ||
      !cuda_ok(cudaMemset(d_->vh.p, 0, n * sizeof(float)), "cudaMemset", err))
    return false;
  const cuda::launch_result r = launch(p, a, items);
  if (!cuda_ok(r.error, "kernel launch", err) || !cuda_ok(cudaDeviceSynchronize(), "kernel", err)) return false;
  // decoded tokens [0, tiles * G) of every head
  const std::size_t per_head = static_cast<std::size_t>(tiles) * p.tile_tokens * D;
  for (int h = 0; h < H; ++h) {
    const std::size_t off = static_cast<std::size_t>(h) * T * D;
    if (!cuda_ok(cudaMemcpy(kh + off, d_->kh.p + off, per_head * sizeof(float), cudaMemcpyDeviceToHost),
                 "cudaMemcpy (decoded keys)", err) ||
        !cuda_ok(cudaMemcpy(vh + off, d_->vh.p + off, per_head * sizeof(float), cudaMemcpyDeviceToHost),
                 "cudaMemcpy (decoded values)", err))
      return false;
  }
  if (!cuda_ok(cudaMemcpy(statuses.data(), d_->st.p, items * sizeof(int), cudaMemcpyDeviceToHost),
               "cudaMemcpy (statuses)", err))
    return false;
  if (records && !cuda_ok(cudaMemcpy(records->data(), d_->rec.p, records->size(), cudaMemcpyDeviceToHost),
                          "cudaMemcpy (records)", err))
    return false;
  return true;
}

}  // namespace kvtile_eval
