#pragma once
// What the two point-to-point protocols share: point_to_point.cpp (the
// receiver speaks first, both sides check) and eager.cpp
// (StructureCheck::Receiver).

#include "distributed/channel.h"
#include "distributed/layout.h"

#include <tensordict/distributed.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <string>
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

// Receives the leaves of a per-leaf transfer into scratch buffers and drops
// them: a receiver that throws first takes the sender's messages, so the
// group stays in step.
void take_leaves(Channel& ch, const std::vector<int64_t>& nbytes, int src);

// The non-tensor values of a transfer of `td`'s structure, `extra_bytes` of
// JSON, read before any data is written; when they are not valid and the data
// comes per leaf, the leaves are taken before the FormatError.
std::vector<NonTensorValue> recv_non_tensors(Channel& ch, const TensorDictBase& td,
                                             const Layout& layout, int64_t extra_bytes,
                                             bool per_leaf, int src);

// Receives one leaf per message, in place where the leaf is an in-memory
// contiguous tensor; otherwise into a temporary written with set_ (memmap,
// lazy stacks, other storages).
void recv_per_leaf(Channel& ch, const Layout& layout, const TensorDictBase& td, int src);

// StructureCheck::Receiver (eager.cpp), on a Channel in its tag slot.
void send_eager(Channel& ch, const TensorDictBase& td, const Layout& layout, int dst);
void recv_eager(Channel& ch, const TensorDictBase& td, int src);

}  // namespace tensordict::detail::distributed
