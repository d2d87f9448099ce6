#pragma once
// Message buffers kept between one-buffer transfers (docs/distributed.md,
// "Buffer reuse").
//
// One-buffer transfers reuse their message buffers: a fresh buffer of many
// megabytes is mapped anew by malloc and page-faulted in on every transfer
// (3x the hand-written floor, which sends from a preallocated one, at 100 MB). A buffer is only
// bytes, packed or received in full each time, so the pool is keyed by size alone (the structure is
// checked on every transfer regardless). A transfer takes a buffer out of the pool (concurrent
// isend/irecv never share one) and gives it back only once every message that used it has
// completed; after an error the buffer is dropped, since the group may still hold it.

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>

namespace tensordict::detail::distributed {

constexpr int64_t kPoolMaxBytes = int64_t{256} << 20;
constexpr std::size_t kPoolMaxBuffers = 16;

class BufferPool {
 public:
  // A buffer of exactly `nbytes` (from the pool, or new).
  at::Tensor take(int64_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
        if (it->numel() != nbytes) continue;
        at::Tensor t = std::move(*it);
        buffers_.erase(it);
        bytes_ -= nbytes;
        return t;
      }
    }
    return at::empty({nbytes}, at::kByte);
  }
  // Keeps `buffer` for a later take(); the least recently given back go
  // first when the pool is full.
  void give(at::Tensor buffer) {
    const int64_t n = buffer.numel();
    if (n == 0 || n > kPoolMaxBytes) return;
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.push_front(std::move(buffer));
    bytes_ += n;
    while (bytes_ > kPoolMaxBytes || buffers_.size() > kPoolMaxBuffers) {
      bytes_ -= buffers_.back().numel();
      buffers_.pop_back();
    }
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.clear();
    bytes_ = 0;
  }
  int64_t bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }

 private:
  std::mutex mutex_;
  std::list<at::Tensor> buffers_;  // most recently given back first
  int64_t bytes_ = 0;
};

// The process-wide pool.
BufferPool& pool();

// A message buffer for one transfer: from the pool when the options allow,
// back into it by done() (only after its messages completed).
class MessageBuffer {
 public:
  MessageBuffer(int64_t nbytes, bool reuse)
      : reuse_(reuse), tensor_(reuse ? pool().take(nbytes) : at::empty({nbytes}, at::kByte)) {}
  const at::Tensor& tensor() const { return tensor_; }
  uint8_t* data() const { return static_cast<uint8_t*>(tensor_.data_ptr()); }
  void done() {
    if (reuse_) pool().give(std::move(tensor_));
    tensor_ = at::Tensor();
  }

 private:
  bool reuse_;
  at::Tensor tensor_;
};

}  // namespace tensordict::detail::distributed
