// kvtile/status.hpp: the status every host API returns (no exceptions needed).
#pragma once

#include "config.hpp"

KVTILE_NAMESPACE_BEGIN

enum class [[nodiscard]] status : int {
  success = 0,
  // Input data contained NaN or +-Inf. The record WAS written and is valid:
  // every non-finite element was replaced by 0 before encoding (docs/reliability.md).
  non_finite_input,
  null_pointer,           // a required pointer was null
  invalid_argument,       // a size, count or stride is out of its documented range
  misaligned,             // a pointer or stride violates the documented alignment
  unsupported_head_dim,   // head_dim not in {64, 128, 256}
  unsupported_tile_tokens,// tile tokens not 64 or 128 (the presets' and dispatch's; tile_config<> itself takes 32 to 256)
  unsupported_bits,       // key/value bits not a preset's pair (G 128: k4v2, k4v4, k2v2, k8v8; G 64: k4v2, k4v4)
  unsupported_dtype,      // element type not supported by this entry point
  out_of_range,           // a value cannot be represented by the chosen packing (e.g. |x| too large for fp16 scales)
  corrupt_record,         // a record field holds a value encode never writes (NaN/Inf/negative scale)
  insufficient_space,     // an output buffer is too small
  cuda_error,             // a CUDA runtime call failed (device APIs)
  no_device,              // no CUDA device present (device APIs)
  unsupported_arch,       // the current GPU cannot run this kernel: compute capability below the kernel's
                          // minimum, no code for it in the binary, or too little (opt-in) shared memory
  truncated_record,       // a record buffer is shorter than the codec's record_bytes (codec/record_span.hpp)
};

constexpr const char* to_string(status s) noexcept {
  switch (s) {
    case status::success: return "success";
    case status::non_finite_input: return "non-finite input replaced by zero";
    case status::null_pointer: return "null pointer";
    case status::invalid_argument: return "invalid argument";
    case status::misaligned: return "misaligned pointer or stride";
    case status::unsupported_head_dim: return "unsupported head_dim (64, 128 or 256)";
    case status::unsupported_tile_tokens: return "unsupported tile tokens (the presets: 64 or 128)";
    case status::unsupported_bits: return "unsupported key/value bits (128-token tiles: k4v2, k4v4, k2v2, k8v8; 64-token: k4v2, k4v4)";
    case status::unsupported_dtype: return "unsupported element type";
    case status::out_of_range: return "value out of the packing's representable range";
    case status::corrupt_record: return "corrupt record";
    case status::insufficient_space: return "output buffer too small";
    case status::cuda_error: return "CUDA error";
    case status::no_device: return "no CUDA device";
    case status::unsupported_arch: return "kernel not supported on this GPU (architecture or shared memory)";
    case status::truncated_record: return "record buffer shorter than the codec's record size";
  }
  return "unknown status";
}

// True when the record/output was written and is valid (success or a warning).
constexpr bool ok(status s) noexcept { return s == status::success || s == status::non_finite_input; }

KVTILE_NAMESPACE_END
