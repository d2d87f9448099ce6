#pragma once
/// @file distributed.h
/// Whole tensordicts over a c10d process group (Python's td.send / recv /
/// isend / irecv / init_remote / from_remote_init / broadcast / all_reduce /
/// reduce / all_gather / gather_and_stack). Component tensordict::distributed
/// (-DTENSORDICT_WITH_DISTRIBUTED=ON, find_package(tensordict COMPONENTS distributed)). See
/// docs/distributed.md.
///
/// Every call is collective between the ranks it names: a send() needs a
/// matching recv() (or an isend() an irecv()) with the same tag on the peer.
/// Before any data moves, both sides check that their structures agree (keys,
/// kinds, dtypes, shapes, batch sizes); on a mismatch both throw StructureError
/// naming the first differing entry on each side, and the group stays usable.
/// TransferOptions::check = StructureCheck::Receiver trades the sender's error
/// for one message fewer: the receiver alone checks and throws.
/// Failures of the group itself (timeouts, a peer that went away) are
/// TimeoutError / ConnectionError.
///
/// Every `pg` must be owned by a c10::intrusive_ptr (as c10d makes groups):
/// LibTorch 2.x takes a reference from the group's `this` in every call.

#include <tensordict/errors.h>
#include <tensordict/nested_key.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <string>

namespace tensordict {

/// The structures of two ranks disagree. Thrown on both sides of the transfer;
/// what() names the first differing entry as each side sees it.
class StructureError : public SchemaError {
 public:
  StructureError(const std::string& message, NestedKey key)
      : SchemaError(message), key_(std::move(key)) {}
  /// The first entry (in sorted key order) where the structures differ; the
  /// empty key when the roots differ (batch size, or one side is empty).
  const NestedKey& key() const noexcept { return key_; }

 private:
  NestedKey key_;
};

/// How the tensor data of one transfer travels.
enum class TransferMode : std::uint8_t {
  /// Consolidated below TransferOptions::flat_max_bytes, per leaf above.
  Auto,
  /// One flat buffer: every leaf packed at 16-byte aligned offsets (one copy
  /// on each side, one message).
  Consolidated,
  /// One message per tensor leaf, straight from and (for in-memory
  /// tensordicts) into the leaves' own storage.
  PerLeaf,
};

/// Who checks, on a point-to-point transfer, that the two structures agree.
/// Both ranks must pass the same value: mixed settings fail on both sides
/// (TimeoutError, or ConnectionError once the other side timed out).
enum class StructureCheck : std::uint8_t {
  /// The receiver announces its structure and the sender waits for it: on a
  /// mismatch both sides throw StructureError, and nothing moves.
  BothSides,
  /// The sender sends at once, its structure in front of the data: one
  /// message fewer and no wait (Python's send, which checks nothing, sends
  /// this way). The receiver checks: on a mismatch it takes the sender's
  /// messages, writes nothing and throws StructureError; the sender is not
  /// told (its send returns normally). The sender's mode decides; one
  /// buffer holds at most 4 MiB (plus 64 KiB of structure), larger transfers
  /// go per leaf.
  Receiver,
};

/// What goes on the wire in send / recv / isend / irecv.
enum class Wire : std::uint8_t {
  /// This library's protocol (docs/distributed.md, "Protocol"): the
  /// structures are compared before any data moves.
  Native,
  /// Python tensordict's own td.send / recv / isend / irecv, so that a C++
  /// rank and a Python rank exchange tensordicts (docs/distributed.md, "Python's
  /// wire"): one message per tensor leaf, in Python's key order (each level's
  /// keys sorted, a nested tensordict where its key sorts, a lazy stack member
  /// by member), on c10d tags `tag`, `tag + 1`, ... (`pseudo_rand`: Python's
  /// pseudo-random chain seeded by `tag`); with `mode = Consolidated`, one
  /// message of the consolidated storage on tag 0 (Python's
  /// consolidated=True; `tag` and `pseudo_rand` are then unused, as in
  /// Python). No structure travels and non-tensor values are not sent. The
  /// receiver checks the size of every message it receives against its leaf
  /// without risking Gloo's abort, and throws StructureError on a difference
  /// (exact for a smaller message; a larger one is missed only when it is less
  /// than a page longer and the extra bytes are all zero); the sender is not
  /// told of anything.
  Python,
};

struct TransferOptions {
  /// The transfer's tag, in [0, 2^29) (ValueError otherwise); concurrent
  /// transfers between the same two ranks need distinct tags. Point-to-point
  /// messages go on c10d tag `tag | 2^29` (`tag | 2^30` with
  /// StructureCheck::Receiver), so a program's own messages on `tag` stay
  /// apart from them.
  int tag = 0;
  /// Wait at most this long for each message; zero uses the group's own
  /// timeout (ProcessGroupGloo::Options::timeout).
  std::chrono::milliseconds timeout{0};
  /// On a point-to-point transfer the receiver's mode decides.
  TransferMode mode = TransferMode::Auto;
  /// Auto sends tensordicts of at most this many bytes consolidated (see
  /// docs/distributed.md for the measurements behind the default: where one
  /// buffer stops beating one message per leaf depends on the machine).
  std::int64_t flat_max_bytes = std::int64_t{2} << 20;
  /// Consolidated transfers keep their message buffer for the next transfer
  /// of the same size (a process-wide pool of at most 256 MiB, see
  /// release_transfer_buffers()); false allocates a fresh one every time.
  bool reuse_buffers = true;
  /// send / recv / isend / irecv only: who checks the structures (see
  /// StructureCheck; docs/distributed.md compares the costs).
  StructureCheck check = StructureCheck::BothSides;
  /// send / recv / isend / irecv only: the protocol (see Wire). With
  /// Wire::Python, `tag` is Python's init_tag (the c10d tag of the first leaf,
  /// used as is: any tag >= 0 whose leaves' tags stay within int), `check` is
  /// unused, and `mode` is Consolidated (one message) or anything else (one
  /// message per leaf, Python's default). The other calls refuse it
  /// (ValueError).
  Wire wire = Wire::Native;
  /// recv / irecv per leaf (native wire): receive every leaf into a staging
  /// buffer and write the tensordict only once all have arrived, so that a
  /// failed transfer (a peer that dies, a timeout) writes nothing, and a peer
  /// that dies is noticed at once. Costs one copy of the data on the receiver
  /// (docs/distributed.md, "A peer that misbehaves, a peer that dies"). Off:
  /// in-memory contiguous leaves receive in place, and a failure names the
  /// leaves it had written.
  bool stage_leaves = false;
  /// Wire::Python only: Python's pseudo_rand=True (the leaves' tags follow
  /// tensordict.utils._int_generator seeded by `tag`, values in [0, 10000)).
  bool pseudo_rand = false;
};

/// Frees the message buffers that consolidated transfers keep for reuse
/// (those of transfers under way are given back when they finish).
void release_transfer_buffers();
/// The bytes of message buffers kept for reuse right now.
std::int64_t transfer_buffer_bytes();

/// The handle isend / irecv return: the transfer runs on its own thread;
/// wait() blocks until it has finished and rethrows its error. Destroying the
/// last copy of a handle also waits for the transfer (as std::async does).
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_future<void> future) : future_(std::move(future)) {}
  /// Blocks until the transfer has finished; throws what it threw.
  void wait() const;
  /// True once the transfer has finished (successfully or not).
  bool is_completed() const;

 private:
  std::shared_future<void> future_;
};

// ---- point to point ----------------------------------------------------------
/// Sends the tensor leaves and non-tensor values of `td` to rank `dst`, which
/// must call recv() into a tensordict of the same structure. The receiver
/// speaks first (it announces the structure it expects), so a send() waits
/// for its recv() (not with StructureCheck::Receiver); it returns once the
/// data is handed to the group, leaving a receive posted for `dst`'s next
/// announcement on this tag (so that, in a loop, it has arrived before the
/// next send() needs it; docs/distributed.md, "The listening receive").
/// `pg` must be owned by a c10::intrusive_ptr for that. Lazy stacks are sent
/// densified (each stacked leaf as one tensor).
void send(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
          const TransferOptions& options = {});
/// Receives from rank `src` into `td` in place (set_ per leaf; non-tensor
/// values replaced where they differ, unless `td` is locked). `td` keeps its storage: a memmap or
/// shared tensordict receives into its files or segments.
void recv(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
          const TransferOptions& options = {});
/// send() on a thread of its own. `td` must stay unchanged, and `pg` alive,
/// until wait().
Work isend(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
           const TransferOptions& options = {});
/// recv() on a thread of its own. Do not touch `td` (and keep `pg` alive)
/// until wait().
Work irecv(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
           const TransferOptions& options = {});

/// Python's init_remote: sends the structure (keys, shapes, dtypes, class,
/// non-tensor values) and the data to `dst`, which calls from_remote_init().
/// The data is td.consolidate()'s buffer (the tensordict's own buffer when it
/// is already consolidated).
void init_remote(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                 const TransferOptions& options = {});
/// Python's from_remote_init: a new tensordict built from what rank `src`'s
/// init_remote() sent, its leaves views of one received buffer. The class is
/// the sender's (a lazy stack stays a LazyStackedTensorDict).
TensorDictBase from_remote_init(c10d::ProcessGroup& pg, int src,
                                const TransferOptions& options = {});

// ---- collectives -------------------------------------------------------------
/// Every rank's `td` receives rank `root`'s data in place (non-tensor values
/// included). Structures are checked on every rank first.
void broadcast(const TensorDictBase& td, c10d::ProcessGroup& pg, int root,
               const TransferOptions& options = {});
/// Reduces every tensor leaf over the ranks in place (sum by default): one
/// collective per dtype. Non-tensor entries are left alone. TypeError for a
/// bool leaf (Gloo does not reduce bools), on every rank before any data moves.
void all_reduce(const TensorDictBase& td, c10d::ProcessGroup& pg,
                const c10d::ReduceOp& op = c10d::ReduceOp::SUM,
                const TransferOptions& options = {});
/// Python's reduce: rank `dst`'s `td` receives the reduction (sum by default)
/// of every rank's tensor leaves, in place; the other ranks' tensordicts stay
/// as they were. As all_reduce otherwise (one collective per dtype, bool
/// leaves a TypeError).
void reduce(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
            const c10d::ReduceOp& op = c10d::ReduceOp::SUM, const TransferOptions& options = {});
/// Python's gather_and_stack: every rank but `dst` sends its `td`; rank
/// `dst`'s `td`, of batch [world_size - 1, *batch], receives them in its rows
/// in rank order (its own data is not part of it, as in Python). Point to
/// point underneath (send / recv, so structure errors are those of recv).
void gather_and_stack(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                      const TransferOptions& options = {});
/// Every rank's tensordict, stacked along a new first dim in rank order
/// (batch [world_size, *batch]); non-tensor values that differ between ranks
/// become a NonTensorStack, as in stack().
TensorDict all_gather(const TensorDictBase& td, c10d::ProcessGroup& pg,
                      const TransferOptions& options = {});

}  // namespace tensordict
