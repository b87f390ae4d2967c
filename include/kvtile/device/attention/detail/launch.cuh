// kvtile/device/attention/detail/launch.cuh: launch setup of the decode
// kernels: the device check behind can_implement (compute capability 9.0,
// opt-in shared memory) and the per-device kernel attribute setup.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "../../../config.hpp"
#include "../../../status.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// The current device, or the status why there is none usable. The kernels use
// sm_90 instructions (cp.async.bulk, mbarrier transaction counts,
// griddepcontrol) and are built for sm_90a: other architectures get
// unsupported_arch, as does a device whose opt-in shared memory per block is
// below `smem` bytes.
inline status current_device(int& dev, std::size_t smem) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return status::no_device;
  if (cudaGetDevice(&dev) != cudaSuccess) return status::cuda_error;
  int major = 0, minor = 0, optin = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return status::cuda_error;
  if (major != 9 || minor != 0) return status::unsupported_arch;
  if (static_cast<std::size_t>(optin) < smem) return status::unsupported_arch;
  return status::success;
}

inline int sm_count(int dev) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 1;
  return n;
}

// Sets the dynamic shared-memory limit of `kernel` on device `dev` once per
// (kernel, device): a per-instantiation atomic bit mask of configured devices
// (devices >= 64 are configured on every call). A kernel without an image for
// the device (built for another architecture), or whose image was compiled
// from PTX below compute_90, gives unsupported_arch.
// Concurrent first calls may both set the attribute (idempotent).
template <class KernelT>
status configure_kernel(KernelT kernel, std::size_t smem, int dev, std::atomic<std::uint64_t>& configured) {
  const std::uint64_t bit = dev < 64 ? std::uint64_t{1} << dev : 0;
  if (bit && (configured.load(std::memory_order_acquire) & bit)) return status::success;
  cudaFuncAttributes fa{};
  const cudaError_t e = cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(kernel));
  if (e != cudaSuccess) (void)cudaGetLastError();  // the error is this call's: answered below, not left behind
  if (e == cudaErrorInvalidDeviceFunction || e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidPtx ||
      e == cudaErrorUnsupportedPtxVersion) {
    return status::unsupported_arch;
  }
  if (e != cudaSuccess) return status::cuda_error;
  // Code JIT-compiled from PTX older than compute_90 (e.g. a compute_80-only
  // build, or CUDA_FORCE_PTX_JIT=1) holds no kernel body (kernels.cuh).
  if (fa.ptxVersion < 90) return status::unsupported_arch;
  if (cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess) {
    (void)cudaGetLastError();
    return status::cuda_error;
  }
  if (bit) configured.fetch_or(bit, std::memory_order_release);
  return status::success;
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
