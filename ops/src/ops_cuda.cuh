// ops/src/ops_cuda.cuh: helpers shared by kvtile_ops' CUDA translation units
// (device_ops.cuh's per-preset tables, device_fp16.cu).
#pragma once

#include <cuda_runtime.h>

#include <kvtile/device/detail/launch.cuh>
#include <kvtile/numeric/bfloat16.hpp>
#include <kvtile/numeric/half.hpp>
#include <kvtile/status.hpp>

#include "ops_internal.hpp"

namespace kvtile_ops {

// A launch's status, with the CUDA error the launcher returned (r.error: the
// paged store, dequantize and decode launchers return a launch_result and
// clear the thread's last-error slot). Calls that return a bare status
// (decode_plan::plan's copy of the work list) leave the error in the slot,
// so only then is it peeked at.
inline int launch_result(kvtile::device::launch_result r, const char* function) {
  cudaError_t e = r.error;
  if (e == cudaSuccess && r.code == kvtile::status::cuda_error) e = cudaPeekAtLastError();
  if (e != cudaSuccess)
    return fail(static_cast<int>(r.code), "%s: %s: %s (%s)", function, kvtile::to_string(r.code),
                cudaGetErrorName(e), cudaGetErrorString(e));
  if (r.code == kvtile::status::cuda_error)
    return fail(KVTILE_OPS_CUDA_ERROR, "%s: CUDA error (the failing call's error code was not returned)", function);
  return from_status(r.code, function);
}

// A plan's run: invalid_argument also covers a call that does not match the last plan.
inline int run_result(kvtile::device::launch_result s, const char* function) {
  if (s.code == kvtile::status::invalid_argument)
    return fail(KVTILE_OPS_INVALID_ARGUMENT,
                "%s: invalid argument, or the call does not match the last plan (cache shape, params, workspace or "
                "current device): plan again",
                function);
  return launch_result(s, function);
}

// f(kvtile::attention::decode_args<QT>) for checked params (q_dtype fp16 or bf16).
template <class F>
int with_args(const kvtile_ops_decode_params& p, bool for_plan, F&& f) {
  if (p.q_dtype == KVTILE_OPS_BF16) return f(args_of<kvtile::bfloat16_t>(p, for_plan));
  return f(args_of<kvtile::half_t>(p, for_plan));
}


}  // namespace kvtile_ops
