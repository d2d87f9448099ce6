#pragma once
// fn(0) ... fn(count - 1) on a pool of std::threads: the loop shared by
// tensordict::map and the memmap saves. Internal.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tensordict::detail {

/// Runs fn(i) for every i < count on min(threads, count) threads, each taking
/// the next index (one thread: on the caller's). After the first exception no
/// further index is started; it is rethrown once every thread has stopped.
template <class Fn>
void parallel_for(std::size_t count, std::size_t threads, Fn&& fn) {
  const std::size_t n = std::min(threads, count);
  if (n <= 1) {
    for (std::size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (std::size_t i = next++; i < count && !failed; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n);
  for (std::size_t t = 0; t < n; ++t) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace tensordict::detail
