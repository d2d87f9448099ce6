// Prefetcher (include/tensordict/rb/prefetcher.h): one thread drawing
// ReplayBuffer::sample ahead of the consumer, up to `depth` batches.
#include <tensordict/errors.h>
#include <tensordict/rb/prefetcher.h>

#include <string>
#include <utility>

namespace tensordict::rb {

Prefetcher::Prefetcher(ReplayBuffer& buffer, int64_t batch_size, int depth)
    : buffer_(buffer), batch_size_(batch_size), depth_(depth) {
  if (batch_size <= 0)
    throw ValueError("Prefetcher: the batch size must be positive, got " +
                     std::to_string(batch_size));
  if (depth <= 0)
    throw ValueError("Prefetcher: the depth must be positive, got " + std::to_string(depth));
  thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Prefetcher::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] {
      return stopping_ || (started_ && !failed_ && static_cast<int>(queue_.size()) < depth_);
    });
    if (stopping_) return;
    ++drawing_;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = buffer_.sample(batch_size_);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    --drawing_;
    if (slot.error) failed_ = true;
    queue_.push_back(std::move(slot));
    filled_.notify_all();
  }
}

TensorDict Prefetcher::next() {
  std::unique_lock lock(mutex_);
  started_ = true;
  // A batch being drawn comes before one sampled here: batches keep the order
  // in which they were drawn.
  filled_.wait(lock, [&] { return !queue_.empty() || drawing_ == 0; });
  Slot slot;
  if (!queue_.empty()) {
    slot = std::move(queue_.front());
    queue_.pop_front();
    if (slot.error) failed_ = false;
  }
  wake_.notify_all();
  lock.unlock();
  if (slot.error) std::rethrow_exception(slot.error);
  if (slot.batch) return std::move(*slot.batch);
  return buffer_.sample(batch_size_);
}

int64_t Prefetcher::ready() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

}  // namespace tensordict::rb
