#pragma once
// What the two point-to-point protocols share: point_to_point.cpp (the
// receiver speaks first, both sides check) and eager.cpp
// (StructureCheck::Receiver).

#include "distributed/buffers.h"
#include "distributed/channel.h"
#include "distributed/layout.h"

#include <tensordict/distributed.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::detail::distributed {

[[noreturn]] void throw_bad_magic(const Channel& ch);

// The messages of a send after its first (posted in `works`): the non-tensor
// JSON, then, per leaf, one message per non-empty leaf; waits for all.
void send_rest_and_wait(Channel& ch, const Layout& layout, const std::string& extra, bool per_leaf,
                        int dst, std::vector<c10::intrusive_ptr<c10d::Work>>& works);

// A buffer of `nbytes` the peer announced: an allocation that fails is a
// StorageError naming the transfer, not LibTorch's.
at::Tensor peer_sized_buffer(const Channel& ch, int64_t nbytes);

// Receives the leaves of a per-leaf transfer into a scratch buffer and drops
// them: a receiver that throws first takes the sender's messages, so the
// group stays in step.
void take_leaves(Channel& ch, const std::vector<int64_t>& nbytes, int src);

// The non-tensor values of a transfer of `td`'s structure, `extra_bytes` of
// JSON, read before any data is written; when they are not valid and the data
// comes per leaf, the leaves are taken before the FormatError.
std::vector<NonTensorValue> recv_non_tensors(Channel& ch, const TensorDictBase& td,
                                             const Layout& layout, int64_t extra_bytes,
                                             bool per_leaf, int src);

// The receives of a per-leaf transfer, one per non-empty leaf, posted at
// construction: in place where the leaf is an in-memory contiguous tensor of
// `td`, unless TransferOptions::stage_leaves; every other leaf into a staging
// buffer (the flat buffer's layout, pooled), written into the tensordict only
// once every leaf has arrived.
class LeafReceives {
 public:
  LeafReceives(Channel& ch, const Layout& layout, const TensorDictBase& td, int src);
  int64_t count() const { return static_cast<int64_t>(works_.size()); }
  // Blocks until every receive has completed (with a leaf, or filled empty);
  // FormatError when `src` sent a message longer than the leaves. A failure
  // of the group names the leaves written in place before it.
  void wait(Channel& ch, int src);
  // Writes the leaves received into `td` (of `layout`'s structure).
  void write(const TensorDictBase& td);

 private:
  [[noreturn]] void rethrow_naming_written(const Error& e, std::size_t failed) const;

  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<std::pair<const Leaf*, bool>> received_;  // per work: its leaf, in place
  std::optional<MessageBuffer> staging_;                // for the leaves not in place
};

// Receives one leaf per message (LeafReceives posted, waited for, written).
void recv_per_leaf(Channel& ch, const Layout& layout, const TensorDictBase& td, int src);

// Completes the `count` leaf receives the peer posted ahead (its expectation's
// kEPosted) with empty messages, which write nothing: what a rank does that
// answers such a recv() with no leaves (a mismatch, a refusal, a recv facing
// a recv). FormatError naming the peer for a count no recv() posts: more
// than the `leaves` its expectation announces, or than kMaxLeaves.
void fill_posted(Channel& ch, int64_t count, int64_t leaves, int peer);

// The most leaves a peer's expectation may announce receives for: a hostile
// count must not queue millions of messages.
constexpr int64_t kMaxLeaves = int64_t{1} << 20;

// The tensordict of a from_remote_init(): `structure` (JSON, the header's
// `format`: kInitConsolidated or kInitLayout) over `storage`. FormatError
// naming `what` for anything a sender does not send. Callable without a
// process group (fuzz/fuzz_wire_message.cpp).
TensorDictBase build_received(const std::string& what, int64_t format, const std::string& structure,
                              const at::Tensor& storage);

// The entries of `layout` as an eager transfer's first message carries them.
std::string encode_entries(const Layout& layout);
// The entries of an eager transfer's first message (`n` bytes at `p`), as the
// sender encoded them; FormatError naming `what` when they are cut short or
// not valid.
EntryList decode_entries(const std::string& what, const uint8_t* p, int64_t n);

// StructureCheck::Receiver (eager.cpp), on a Channel in its tag slot.
void send_eager(Channel& ch, const TensorDictBase& td, const Layout& layout, int dst);
void recv_eager(Channel& ch, const TensorDictBase& td, int src);

// Wire::Python (python_wire.cpp): Python tensordict's own send / recv.
void send_python(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                 const TransferOptions& options);
void recv_python(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
                 const TransferOptions& options);
// ValueError for a tag Python's wire cannot start from (a negative one).
void check_python_tag(const TransferOptions& options, const char* op);
// tensordict.utils._int_generator(seed): the next tag of a pseudo_rand transfer.
int64_t python_int_generator(uint64_t seed);

}  // namespace tensordict::detail::distributed
