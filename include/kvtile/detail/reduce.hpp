// kvtile/detail/reduce.hpp: the canonical reduction order shared by host and device.
//
// Float sums depend on order, so kvtile defines one: the halving tree. For n a
// power of two, `for (h = n/2; h >= 1; h /= 2) v[i] += v[i + h] (i < h)`; the
// result is v[0]. On the device, strides >= 32 are lane-local adds and strides
// 16..1 are __shfl_xor_sync butterflies, which compute the same sums.
#pragma once

#include "../config.hpp"

#include "bits.hpp"

KVTILE_NAMESPACE_BEGIN
namespace detail {

// In-place halving-tree sum of v[0..n), n a power of two. Destroys v.
KVTILE_HOST_DEVICE float tree_sum_inplace(float* v, int n) {
  for (int h = n / 2; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) v[i] = add(v[i], v[i + h]);
  return v[0];
}

// div(x, N) for a compile-time count N (the divisions of a mean or a
// variance). For N = 2^k it is mul(x, 2^-k): 2^-k is exact, and the IEEE
// quotient x / 2^k and product x 2^-k are the same real number rounded once,
// so the bits agree for every x (subnormal results, zeros, Inf, NaN
// included). The device uses it: one multiplication instead of a division
// sequence.
template <int N>
KVTILE_HOST_DEVICE float div_by(float x) {
  static_assert(N >= 1 && N <= (1 << 30), "div_by: count out of range");
  if constexpr ((N & (N - 1)) == 0) {
    return mul(x, 1.0f / static_cast<float>(N));
  } else {
    return div(x, static_cast<float>(N));
  }
}

// Unbiased standard deviation of v[0..n) (n >= 2, power of two) in canonical
// order: mean = tree(v) / n; var = tree((v - mean)^2) / (n - 1). tmp holds n floats.
KVTILE_HOST_DEVICE float canonical_std(const float* v, int n, float* tmp) {
  for (int i = 0; i < n; ++i) tmp[i] = v[i];
  const float mean = div(tree_sum_inplace(tmp, n), static_cast<float>(n));
  for (int i = 0; i < n; ++i) {
    const float d = sub(v[i], mean);
    tmp[i] = mul(d, d);
  }
  return sqrt(div(tree_sum_inplace(tmp, n), static_cast<float>(n - 1)));
}

// Column standard deviations of a row-major R x C matrix, each in canonical
// order over its R entries (the tree runs over rows, vectorised over columns).
// tmp holds R*C floats.
KVTILE_HOST_DEVICE void canonical_col_std(const float* m, int rows, int cols, float* out, float* tmp) {
  for (int i = 0; i < rows * cols; ++i) tmp[i] = m[i];
  for (int h = rows / 2; h >= 1; h /= 2)
    for (int r = 0; r < h; ++r)
      for (int c = 0; c < cols; ++c) tmp[r * cols + c] = add(tmp[r * cols + c], tmp[(r + h) * cols + c]);
  const float n = static_cast<float>(rows);
  for (int c = 0; c < cols; ++c) out[c] = div(tmp[c], n);  // means
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float d = sub(m[r * cols + c], out[c]);
      tmp[r * cols + c] = mul(d, d);
    }
  for (int h = rows / 2; h >= 1; h /= 2)
    for (int r = 0; r < h; ++r)
      for (int c = 0; c < cols; ++c) tmp[r * cols + c] = add(tmp[r * cols + c], tmp[(r + h) * cols + c]);
  const float n1 = static_cast<float>(rows - 1);
  for (int c = 0; c < cols; ++c) out[c] = sqrt(div(tmp[c], n1));
}

// lo = min, hi = max of v[0..n) (n >= 1), by fmin/fmax in index order: the
// first element that reaches an extreme wins (which zero, +0 or -0, is kept).
KVTILE_HOST_DEVICE void min_max(const float* v, int n, float& lo, float& hi) {
  lo = v[0];
  hi = v[0];
  for (int i = 1; i < n; ++i) {
    lo = fmin(lo, v[i]);
    hi = fmax(hi, v[i]);
  }
}

}  // namespace detail
KVTILE_NAMESPACE_END
