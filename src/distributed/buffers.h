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

// Receive buffers with room behind them (docs/distributed.md, "Messages
// longer than their receive"). Gloo aborts the process when a message is
// longer than the receive it lands in, and a peer may send anything on a
// transfer's tag. So message buffers are guarded: `nbytes` at the start of a
// private mapping, followed by kReceiveReserve bytes of address space that
// nothing touches. A receive posted over both (receivable()) takes a message
// up to kReceiveReserve bytes longer than expected without harm, and
// overran() tells afterwards whether one came (the pages behind the buffer
// were written).
constexpr int64_t kReceiveReserve = int64_t{1} << 30;

// `nbytes` of a guarded mapping (page aligned), as a 1-D uint8 tensor.
at::Tensor guarded_bytes(int64_t nbytes);
// `t` (a guarded buffer or a slice of one) to the end of its storage: what a
// receive into `t` is posted with.
at::Tensor receivable(const at::Tensor& t);
// Whether a message longer than `t` (a guarded buffer, or a slice ending where
// it ends) was received into receivable(t). False for a tensor that is not
// guarded.
bool overran(const at::Tensor& t);

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
    return guarded_bytes(nbytes);
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
      : reuse_(reuse), tensor_(reuse ? pool().take(nbytes) : guarded_bytes(nbytes)) {}
  const at::Tensor& tensor() const { return tensor_; }
  uint8_t* data() const { return static_cast<uint8_t*>(tensor_.data_ptr()); }
  void done() {
    if (reuse_ && !overran(tensor_)) pool().give(std::move(tensor_));  // an overrun one is dirty
    tensor_ = at::Tensor();
  }

 private:
  bool reuse_;
  at::Tensor tensor_;
};

}  // namespace tensordict::detail::distributed
