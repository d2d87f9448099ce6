#pragma once
// The listening receive (docs/distributed.md, "The listening receive").
//
// A send() waits for the receiver's expectation, and Gloo moves a message only
// once its receive is posted. Posted when send() is called, the expectation's
// receive puts a round trip on the critical path (its "ready" notification to
// the receiver, then the expectation back), although the receiver, usually
// waiting already, has sent it long before. So a rank that sent (send,
// init_remote) leaves a receive posted for the peer's next first message on
// that tag (its slot tag | kCheckedTagBit, which no program message uses),
// once every message of the transfer has been matched, and the next
// point-to-point call between the two on that tag takes it as its first
// receive: a send or init_remote finds the expectation there, often arrived
// already; a recv or from_remote_init (the roles swapped) the sender's header,
// with a one-buffer transfer of up to 4 MiB behind it. The receive holds
// kListenBytes; the expectation says so (kEFirstBytes), and a larger
// one-buffer transfer then sends its header alone first, the buffer after it.

#include "distributed/buffers.h"
#include "distributed/channel.h"
#include "distributed/protocol.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <optional>

namespace tensordict::detail::distributed {

constexpr int64_t kListenBytes = kHeaderBytes + (int64_t{4} << 20);

// Leaves the receive of `peer`'s next first message posted (in `buffer` when
// it has kListenBytes).
void listen(Channel& ch, int peer, at::Tensor buffer);

// The receive of the peer's first message of a transfer: the listening one, or
// one posted now of `nbytes` (from the buffer pool when `pooled`).
class FirstReceive {
 public:
  FirstReceive(Channel& ch, int peer, int64_t nbytes, bool pooled);
  bool listened() const { return listened_.defined(); }
  // FormatError when the message received (waited for) overran the buffer.
  void check_fit(const Channel& ch, int peer) const {
    ch.check_fit(listened() ? listened_ : posted_->tensor(), peer, "the first message's receive");
  }
  const c10::intrusive_ptr<c10d::Work>& work() const { return work_; }
  uint8_t* data() const {
    return listened() ? static_cast<uint8_t*>(listened_.data_ptr()) : posted_->data();
  }
  // The buffer, for the next listening receive.
  at::Tensor release() {
    at::Tensor out;
    if (listened())
      out = std::move(listened_);
    else
      out = posted_->tensor();
    posted_.reset();
    return out;
  }
  // Gives a pooled buffer back (its messages completed).
  void done() {
    if (posted_) posted_->done();
    listened_ = at::Tensor();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  at::Tensor listened_;
  std::optional<MessageBuffer> posted_;
};

// A one-buffer transfer whose receiver's first receive (kEFirstBytes, 0 when
// it made room for it) is smaller than the header and the buffer: the header
// goes alone, the buffer in a message of its own after it.
inline bool split_flat(int64_t first_bytes, int64_t flat_bytes) {
  return first_bytes > 0 && kHeaderBytes + flat_bytes > first_bytes;
}

}  // namespace tensordict::detail::distributed
