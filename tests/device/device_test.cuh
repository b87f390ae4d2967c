// tests/device/device_test.cuh: what every device test shares (not a test
// itself; CMake globs *.cu): the no-GPU skip, a host thread pool for the host
// models, and the fp64 attention reference of the attention and soak tests.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <thread>
#include <vector>

namespace kvtest {

// Returns 77 (and prints SKIPPED) when no device is usable, else 0.
inline int require_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  return 0;
}

// Runs f(i) for i in [0, n) on all hardware threads.
template <class F>
void parallel_for(int n, F f) {
  if (n <= 0) return;
  const int nt = std::min<int>(n, std::max(1u, std::thread::hardware_concurrency()));
  if (nt == 1) {
    for (int i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<int> next{0};
  std::vector<std::thread> th;
  for (int t = 0; t < nt; ++t)
    th.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) f(i);
    });
  for (auto& t : th) t.join();
}

// Normalized FWHT (the Hadamard rotation) in fp64.
inline void fwht_d(double* v, int D) {
  for (int h = 1; h < D; h *= 2)
    for (int i = 0; i < D; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const double a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
  const double s = 1.0 / std::sqrt(static_cast<double>(D));
  for (int i = 0; i < D; ++i) v[i] *= s;
}

// fp64 attention of one query row over K/V [L][D] (same frame as q); returns lse.
inline double attend(const double* q, const std::vector<double>& K, const std::vector<double>& V, int L, int D,
                     double scale, double* out) {
  for (int d = 0; d < D; ++d) out[d] = 0.0;
  if (L == 0) return -INFINITY;
  std::vector<double> sc(L);
  double mx = -INFINITY;
  for (int t = 0; t < L; ++t) {
    double acc = 0;
    for (int d = 0; d < D; ++d) acc += q[d] * K[static_cast<std::size_t>(t) * D + d];
    sc[t] = acc * scale;
    mx = std::max(mx, sc[t]);
  }
  double sum = 0;
  for (int t = 0; t < L; ++t) {
    const double p = std::exp(sc[t] - mx);
    sum += p;
    for (int d = 0; d < D; ++d) out[d] += p * V[static_cast<std::size_t>(t) * D + d];
  }
  for (int d = 0; d < D; ++d) out[d] /= sum;
  return mx + std::log(sum);
}

// Relative L2 error of a row against ref (absolute when ref is 0).
inline double rel_err(const double* a, const double* ref, int D) {
  double num = 0, den = 0;
  for (int d = 0; d < D; ++d) {
    num += (a[d] - ref[d]) * (a[d] - ref[d]);
    den += ref[d] * ref[d];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace kvtest
