#pragma once
/// @file rb/prefetcher.h
/// Prefetcher: batches of a ReplayBuffer sampled ahead on a background thread
/// (TorchRL's ReplayBuffer(prefetch=N)), so that a learner's next batch is
/// ready when it asks. See docs/replay_buffer_library.md, "Prefetching".
///
/// @code
///   rb::Prefetcher batches(buffer, /*batch_size=*/256, /*depth=*/3);
///   for (int step = 0; step < steps; ++step) {
///     tensordict::TensorDict batch = batches.next();   // the oldest ready batch
///     ...
///     buffer.update_tensordict_priority(batch);
///   }
/// @endcode
///
/// As TorchRL's: the first next() samples on the caller's thread, and every
/// next() then has the thread fill the queue up to `depth` batches. A batch is
/// drawn when it is prefetched: writes and priority updates made after that
/// reach the batches prefetched after them, not the ones already waiting.
/// Samples go through ReplayBuffer::sample, so they are as thread-safe as any
/// other call of the buffer. An error of a prefetched sample (an empty buffer:
/// ValueError) is thrown by the next() that would have returned it, and the
/// thread draws nothing more until then.
///
/// The buffer must outlive the prefetcher and must not be moved while it
/// exists. The destructor stops the thread (after the sample it may be
/// drawing) and drops the batches still waiting. One consumer: next() may be
/// called from one thread at a time.

#include <tensordict/rb/replay_buffer.h>
#include <tensordict/tensor_dict.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

namespace tensordict::rb {

class Prefetcher {
 public:
  /// Batches of `batch_size` rows of `buffer`, up to `depth` drawn ahead.
  /// ValueError unless batch_size > 0 and depth > 0. Samples nothing yet.
  Prefetcher(ReplayBuffer& buffer, int64_t batch_size, int depth);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// The oldest prefetched batch (waiting for it if it is being drawn), or a
  /// batch sampled now when none is queued; then lets the thread draw up to
  /// `depth` more. Throws the error of the sample that failed.
  TensorDict next();
  /// Batches drawn and waiting (for tests and monitoring).
  int64_t ready() const;
  int64_t batch_size() const noexcept { return batch_size_; }
  int depth() const noexcept { return depth_; }

 private:
  struct Slot {
    std::optional<TensorDict> batch;
    std::exception_ptr error;
  };
  void run();

  ReplayBuffer& buffer_;
  const int64_t batch_size_;
  const int depth_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;    // the thread: room in the queue, or stop
  std::condition_variable filled_;  // next(): a slot arrived
  std::deque<Slot> queue_;
  int drawing_ = 0;       // samples being drawn by the thread (0 or 1)
  bool started_ = false;  // the first next() happened
  bool failed_ = false;   // an error waits in the queue: draw nothing more
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tensordict::rb
