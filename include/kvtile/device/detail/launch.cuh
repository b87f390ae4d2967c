// kvtile/device/detail/launch.cuh: kernel launch setup shared by every kvtile
// launcher (paged store, dequantize, attention).
//
// What a launcher does with it:
//
//   using namespace kvtile::device;
//   if (launch_result r = detail::prepare_kernel<my_kernel<...>>(smem, /*min_cc=*/80); !r.ok()) return r;
//   return detail::launch_kernel<my_kernel<...>>(grid, block, smem, opts, args...);
//
// prepare_kernel<K>(smem, min_cc) checks the CURRENT device (cudaGetDevice):
//   - a device exists                          else no_device
//   - compute capability >= min_cc (80 = 8.0)  else unsupported_arch
//   - the binary holds code for K on it        else unsupported_arch
//     (cudaFuncGetAttributes: no SASS for the device and no PTX it can JIT)
//   - smem + K's static shared memory fit the device's opt-in limit
//                                              else unsupported_arch
// and, once per (kernel, device), sets K's cudaFuncAttributeMaxDynamicSharedMemorySize
// to the device's opt-in limit minus K's static shared memory. Setting the
// largest value (not the launch's smem) makes the setup idempotent: every
// thread that races on the first launch writes the same value, so no thread
// can lower the limit under another's launch. The attribute is an upper bound
// only (occupancy follows the smem of each launch). The per-(kernel, device)
// state is an array of atomics (thread-safe, lock-free; devices with ordinal
// >= max_cached_devices are set up on every call). The attribute lives in the
// device's primary context: after cudaDeviceReset call reset_launch_setup().
// Graph capture: these calls are not stream operations and are legal while a
// stream is being captured.
//
// launch_kernel<K>(grid, block, smem, opts, args...) launches with
// cudaLaunchKernelEx and returns ITS error: a launch error of the caller's
// other work (left in the thread's last-error slot by a <<<>>> launch) is not
// reported, because the launcher never asks cudaGetLastError for its own
// result. (The CUDA runtime itself may reset that slot during these calls:
// with CUDA 13.0 on an H200 it was found cleared after a kernel's first
// launch. Check your own launches before calling kvtile.) A sticky error (the
// context is broken, e.g. an earlier illegal address) is reported, because
// every call reports it. When the launch fails, its error is also cleared
// from the last-error slot (the result carries it). opts.pdl adds programmatic stream serialization (PDL);
// if that launch fails, the failure is returned; there is no silent fallback.
//
// launch_result carries the status and the CUDA error behind it
// (cudaSuccess unless code is cuda_error or unsupported_arch from a CUDA call),
// and converts to status, so `status s = launch_append(...)` keeps working.
#pragma once

#include "../../config.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "../../status.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

// A launcher's result: the status and, for a failed CUDA call, its error.
struct [[nodiscard]] launch_result {
  status code = status::success;
  cudaError_t error = cudaSuccess;

  constexpr launch_result() = default;
  constexpr launch_result(status s, cudaError_t e = cudaSuccess) noexcept : code(s), error(e) {}  // NOLINT: implicit
  constexpr operator status() const noexcept { return code; }                                   // NOLINT: implicit
  constexpr bool ok() const noexcept { return ::kvtile::ok(code); }
  // "CUDA error: an illegal memory access was encountered" style text.
  const char* cuda_message() const noexcept { return error == cudaSuccess ? "" : cudaGetErrorString(error); }
};
constexpr bool operator==(launch_result a, status b) noexcept { return a.code == b; }
constexpr bool operator==(status a, launch_result b) noexcept { return a == b.code; }
constexpr bool operator!=(launch_result a, status b) noexcept { return a.code != b; }
constexpr bool operator!=(status a, launch_result b) noexcept { return a != b.code; }

// Per-launch options of every launcher that takes them.
struct launch_options {
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (cudaLaunchAttributeProgrammaticStreamSerialization)
};

// What kvtile's launchers check on the current device.
struct device_caps {
  int ordinal = -1;
  int cc = 0;                       // compute capability, 10 major + minor (90 = sm_90)
  int sm_count = 0;
  std::size_t smem_optin = 0;       // cudaDevAttrMaxSharedMemoryPerBlockOptin
};

namespace detail {

inline constexpr int max_cached_devices = 64;

// Bumped by reset_launch_setup(): every cached setup older than it is redone.
inline std::atomic<std::uint32_t>& launch_setup_epoch() {
  static std::atomic<std::uint32_t> e{1};
  return e;
}

// Maps a failed CUDA call to a status: missing code for the device is
// unsupported_arch, no device is no_device, anything else cuda_error.
inline launch_result from_cuda(cudaError_t e) noexcept {
  switch (e) {
    case cudaSuccess: return {status::success};
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorInvalidPtx:
    case cudaErrorJitCompilerNotFound:
      return {status::unsupported_arch, e};
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return {status::no_device, e};
    default: return {status::cuda_error, e};
  }
}

// The current device's capabilities (cached per device and epoch).
inline launch_result current_device(device_caps& out) {
  int dev = -1;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) {
    (void)cudaGetLastError();
    return from_cuda(e == cudaErrorInvalidDevice ? cudaErrorNoDevice : e);
  }
  // word: epoch << 32 | cc << 16 | sm_count (epoch 0: not filled); optin
  // stored before word is published. Racing writers store identical values.
  struct slot {
    std::atomic<std::uint64_t> word{0};
    std::atomic<std::uint64_t> optin{0};
  };
  static slot cache[max_cached_devices];
  const std::uint32_t epoch = launch_setup_epoch().load(std::memory_order_acquire);
  slot* sl = dev >= 0 && dev < max_cached_devices ? &cache[dev] : nullptr;
  if (sl) {
    const std::uint64_t w = sl->word.load(std::memory_order_acquire);
    if ((w >> 32) == epoch) {
      out.ordinal = dev;
      out.cc = static_cast<int>((w >> 16) & 0xffffu);
      out.sm_count = static_cast<int>(w & 0xffffu);
      out.smem_optin = static_cast<std::size_t>(sl->optin.load(std::memory_order_relaxed));
      return {status::success};
    }
  }
  int major = 0, minor = 0, sms = 0, optin = 0;
  cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return from_cuda(e);
  }
  out.ordinal = dev;
  out.cc = 10 * major + minor;
  out.sm_count = sms;
  out.smem_optin = static_cast<std::size_t>(optin);
  if (sl && out.cc < 0x10000 && sms < 0x10000) {
    sl->optin.store(static_cast<std::uint64_t>(optin), std::memory_order_relaxed);
    sl->word.store((static_cast<std::uint64_t>(epoch) << 32) | (static_cast<std::uint64_t>(out.cc) << 16) |
                       static_cast<std::uint64_t>(sms),
                   std::memory_order_release);
  }
  return {status::success};
}

// Per (kernel, device): the largest dynamic shared memory the kernel may use
// there, +1, and the virtual architecture of the image the device runs (0: not
// set up in this epoch).
template <auto Kernel>
struct kernel_setup_state {
  struct slot {
    std::atomic<std::uint64_t> word{0};  // epoch << 32 | ptx_version << 24 | (max_dynamic_smem + 1)
  };
  static slot* slots() {
    static slot s[max_cached_devices];
    return s;
  }
};

// Checks the current device for Kernel and sets it up (see the file comment).
// image_arch, if given, receives the virtual architecture of the kernel image
// the device runs, as 10 x its PTX version (900 for sm_90a SASS, 800 for
// compute_80 PTX, also when JIT-compiled for a newer device): what
// __CUDA_ARCH__ was when that image was compiled.
template <auto Kernel>
inline launch_result prepare_kernel(std::size_t smem, int min_cc = 80, int* image_arch = nullptr) {
  device_caps caps;
  if (launch_result r = current_device(caps); !r.ok()) return r;
  if (caps.cc < min_cc) return {status::unsupported_arch};
  const std::uint32_t epoch = launch_setup_epoch().load(std::memory_order_acquire);
  auto* slot = caps.ordinal < max_cached_devices ? &kernel_setup_state<Kernel>::slots()[caps.ordinal] : nullptr;
  std::size_t max_dynamic = 0;
  int ptx = 0;
  constexpr std::uint64_t smem_mask = 0xffffffu;
  const std::uint64_t w = slot ? slot->word.load(std::memory_order_acquire) : 0;
  if (slot && (w >> 32) == epoch && (w & smem_mask) != 0) {
    max_dynamic = static_cast<std::size_t>((w & smem_mask) - 1);
    ptx = static_cast<int>((w >> 24) & 0xffu);
  } else {
    cudaFuncAttributes fa{};
    if (cudaError_t e = cudaFuncGetAttributes(&fa, Kernel); e != cudaSuccess) {
      (void)cudaGetLastError();
      return from_cuda(e);
    }
    if (fa.sharedSizeBytes > caps.smem_optin) return {status::unsupported_arch};
    max_dynamic = caps.smem_optin - fa.sharedSizeBytes;
    ptx = fa.ptxVersion;
    if (max_dynamic > static_cast<std::size_t>(fa.maxDynamicSharedSizeBytes)) {
      if (cudaError_t e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(max_dynamic));
          e != cudaSuccess) {
        (void)cudaGetLastError();
        return from_cuda(e);
      }
    }
    if (slot && max_dynamic < smem_mask && ptx >= 0 && ptx < 256)
      slot->word.store((static_cast<std::uint64_t>(epoch) << 32) | (static_cast<std::uint64_t>(ptx) << 24) |
                           (max_dynamic + 1),
                       std::memory_order_release);
  }
  if (image_arch) *image_arch = 10 * ptx;
  if (smem > max_dynamic) return {status::unsupported_arch};
  return {status::success};
}

// Launches Kernel with cudaLaunchKernelEx; returns the launch's own error.
template <auto Kernel, class... Args>
inline launch_result launch_kernel(dim3 grid, dim3 block, std::size_t smem, const launch_options& opts,
                                   Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = opts.stream;
  cudaLaunchAttribute attr[1];
  if (opts.pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, Kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // the error is ours (this call just set it) and is returned
    return from_cuda(e);
  }
  return {status::success};
}

}  // namespace detail

// The current device's capabilities as kvtile's launchers see them.
inline launch_result query_current_device(device_caps& out) { return detail::current_device(out); }

// Forgets every cached device query and kernel setup (call after
// cudaDeviceReset, which drops the kernels' attributes with the context).
inline void reset_launch_setup() { detail::launch_setup_epoch().fetch_add(1, std::memory_order_acq_rel); }

}  // namespace device
KVTILE_NAMESPACE_END
