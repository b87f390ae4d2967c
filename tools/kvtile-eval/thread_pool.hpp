// tools/kvtile-eval/thread_pool.hpp: parallel_for over std::thread workers.
//
// parallel_for(n, threads, f) runs f(item, worker) for every item in [0, n)
// on up to `threads` workers (worker ids in [0, threads)); items are handed
// out one at a time from an atomic counter. The calling thread is worker 0.
//
// Failures: when a worker thread cannot be created (std::system_error, e.g.
// in a memory- or process-capped container; or std::bad_alloc) or f throws,
// no further items are started, every thread that did start is joined, and
// parallel_for throws: thread_start_error for a std::system_error, else the
// first exception. No joinable std::thread is ever destroyed (that would call
// std::terminate).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace kvtile_eval {

// Largest worker count kvtile-eval accepts (`-j`).
inline constexpr int max_threads = 1024;

inline int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 2 : static_cast<int>(std::min<unsigned>(n, max_threads));
}

// A worker thread could not be created.
class thread_start_error : public std::runtime_error {
 public:
  thread_start_error(int started, int wanted, const std::string& why)
      : std::runtime_error("cannot start worker thread " + std::to_string(started + 1) + " of " +
                           std::to_string(wanted) + " (" + why + "); use fewer threads (-j)"),
        started_(started) {}
  int started() const { return started_; }  // worker threads that did start (besides the caller)

 private:
  int started_;
};

namespace detail {
// Test hook: called with the worker index before each worker thread is
// created; a hook that throws std::system_error stands in for a failed
// std::thread constructor. Null in the tool.
inline void (*thread_start_hook)(int worker) = nullptr;
}  // namespace detail

// Runs f(item, worker) for item in [0, n) on `threads` workers (worker in [0, threads)).
template <class F>
void parallel_for(std::size_t n, int threads, F&& f) {
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::min<std::size_t>(n, max_threads))));
  if (threads <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex m;
  std::exception_ptr first;
  auto body = [&](int w) {
    try {
      for (std::size_t i; !stop.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) f(i, w);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!first) first = std::current_exception();
      stop = true;
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  std::string start_error;             // std::system_error: no thread
  std::exception_ptr start_failure;    // anything else (std::bad_alloc of the thread's state)
  for (int w = 1; w < threads; ++w) {
    try {
      if (detail::thread_start_hook) detail::thread_start_hook(w);
      pool.emplace_back(body, w);
    } catch (const std::system_error& e) {
      start_error = e.what();
    } catch (...) {
      start_failure = std::current_exception();
    }
    if (!start_error.empty() || start_failure) {
      stop = true;
      break;
    }
  }
  if (start_error.empty() && !start_failure) body(0);
  for (auto& t : pool) t.join();
  if (!start_error.empty()) throw thread_start_error(static_cast<int>(pool.size()), threads - 1, start_error);
  if (start_failure) std::rethrow_exception(start_failure);
  if (first) std::rethrow_exception(first);
}

}  // namespace kvtile_eval
