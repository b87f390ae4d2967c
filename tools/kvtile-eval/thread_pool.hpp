// tools/kvtile-eval/thread_pool.hpp: parallel_for over std::thread workers.
//
// parallel_for(n, threads, f) runs f(item, worker) for every item in [0, n)
// on up to `threads` workers (worker ids in [0, threads)); items are handed
// out one at a time from an atomic counter.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace kvtile_eval {

inline int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 2 : static_cast<int>(n);
}

// Runs f(item, worker) for item in [0, n) on `threads` workers (worker in [0, threads)).
template <class F>
void parallel_for(std::size_t n, int threads, F&& f) {
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::min<std::size_t>(n, 1024))));
  if (threads <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  auto body = [&](int w) {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) f(i, w);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(body, w);
  body(0);
  for (auto& t : pool) t.join();
}

}  // namespace kvtile_eval
