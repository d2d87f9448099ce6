// Point to point: the receiver-first protocol (StructureCheck::BothSides) and
// the public calls; eager.cpp has StructureCheck::Receiver, listening.cpp the
// listening receive. In short (docs/distributed.md, "Protocol"), a transfer is
//   receiver -> expectation (8 x int64: its structure's hash, sizes, mode)
//   sender   -> a 64-byte header (status), with the flat buffer behind it (or
//               the header alone, then one message per leaf), [non-tensor JSON]
// where every message fits the receive it lands in; a mismatch makes both
// sides exchange their structures and name the first differing entry.

#include "distributed/point_to_point.h"

#include "distributed/buffers.h"
#include "distributed/channel.h"
#include "distributed/layout.h"
#include "distributed/listening.h"
#include "distributed/protocol.h"

#include <tensordict/distributed.h>
#include <tensordict/dtype.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::detail::distributed {

// Receiver-driven: the receiver first tells the sender what it expects (its
// structure's hash, flat size, leaf count, mode) and posts the receive of the
// sender's first message: a header, with room for its own flat buffer behind
// it. The sender waits for the expectation and answers with messages that fit
// what the receiver posted, so that a mismatch never gives Gloo a message
// larger than its receive (which aborts the process) and never leaves a
// receive pending. Both messages that can come first (the expectation, the
// header) are at least 64 bytes and have magic numbers of their own, so two
// ranks that both call recv() (or from_remote_init()) each find the other's
// expectation where the header should be, and both throw.

namespace {

// After a mismatch: each side sends its description (length first), and
// gets the other's.
std::string exchange_descriptions(Channel& ch, const std::string& mine, int peer) {
  auto sent_len = ch.send(at::full({1}, static_cast<int64_t>(mine.size()), at::kLong), peer);
  at::Tensor mine_t = bytes_tensor(mine);
  auto sent = ch.send(mine_t, peer);
  at::Tensor len = guarded_bytes(sizeof(int64_t));
  ch.recv_now(len, peer);
  ch.check_fit(len, peer, "the length of a structure");
  int64_t n = 0;
  std::memcpy(&n, len.data_ptr(), sizeof n);
  std::string theirs = ch.recv_string(n, peer);
  ch.wait(sent_len);
  ch.wait(sent);
  return theirs;
}

}  // namespace

[[noreturn]] void throw_bad_magic(const Channel& ch) {
  throw FormatError(ch.what() + ": the message is not a tensordict transfer (bad magic number)");
}

namespace {

[[noreturn]] void throw_called(const Channel& ch, int peer, const char* what) {
  throw ValueError(ch.what() + ": rank " + std::to_string(peer) + " called " + what);
}

// What the peer called, by the first message it sent (an expectation or a header).
const char* peer_call(const int64_t* first) {
  if (first[kEMagic] == kExpectMagic)
    return first[kEKind] == kExpectInit ? "from_remote_init(), which pairs with init_remote()"
                                        : "recv(), which pairs with send()";
  return first[kHKind] == kInitHeader || first[kHKind] == kInitRefused
             ? "init_remote(), which pairs with from_remote_init()"
             : "send(), which pairs with recv()";
}

// The first 8 int64 of the sender's first message, in recv() and
// from_remote_init(). A peer that receives too sent its expectation there
// (and took ours): both fill the leaf receives the other posted ahead, wait
// for their own (`posted`, if any) to be filled, and throw.
void read_first(Channel& ch, const uint8_t* first, int peer,
                const c10::intrusive_ptr<c10d::Work>& announced, int64_t* h, LeafReceives* posted) {
  std::memcpy(h, first, kHeaderBytes);
  if (h[kHMagic] == kMagic) return;
  if (h[kEMagic] == kExpectMagic) {
    fill_posted(ch, h[kEPosted], h[kELeaves], peer);
    if (posted) posted->wait(ch, peer);
    ch.wait(announced);
    throw_called(ch, peer, peer_call(h));
  }
  ch.wait(announced);
  throw_bad_magic(ch);
}

[[noreturn]] void mismatch(Channel& ch, const Layout& layout, int peer) {
  const std::string mine = layout.text();
  const std::string theirs = exchange_descriptions(ch, mine, peer);
  throw_mismatch(ch.what(), mine, "rank " + std::to_string(peer), theirs);
}

}  // namespace

void send_rest_and_wait(Channel& ch, const Layout& layout, const std::string& extra, bool per_leaf,
                        int dst, std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  at::Tensor extra_t = bytes_tensor(extra);
  if (!extra.empty()) works.push_back(ch.send(extra_t, dst));
  std::vector<at::Tensor> keep;  // contiguous copies must outlive their sends
  if (per_leaf) {
    for (const Leaf& leaf : layout.leaves) {
      if (leaf.nbytes == 0) continue;
      keep.push_back(contiguous_cpu(leaf.tensor));
      works.push_back(ch.send(bytes_of(keep.back()), dst));
    }
  }
  ch.wait_all(works);
}

namespace {

// The channel of a send() or recv(): its messages on its protocol's tag slot.
Channel transfer_channel(c10d::ProcessGroup& pg, const TransferOptions& options, const char* op,
                         std::string what) {
  const int slot = options.check == StructureCheck::Receiver ? kEagerTagBit : kCheckedTagBit;
  return Channel(pg, in_slot(options, slot, op), std::move(what));
}

void send_impl(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
               const TransferOptions& options) {
  if (options.wire == Wire::Python) {
    send_python(td, pg, dst, options);
    return;
  }
  check_peer(pg, dst, "send", "destination");
  Channel ch = transfer_channel(pg, options, "send", "send to rank " + std::to_string(dst));
  if (options.check == StructureCheck::Receiver) {
    send_eager(ch, td, describe(td), dst);
    return;
  }
  const Layout layout = describe(td);
  // The expectation lands in the listening receive (often it is there
  // already), or in one posted now; when this side would send one buffer (the
  // receiver's mode, unless their options differ), the data is packed
  // meanwhile, so the copy overlaps the expectation's wait.
  FirstReceive expected(ch, dst, kHeaderBytes, false);
  std::optional<MessageBuffer> packed;
  if (choose_mode(layout, options) == TransferMode::Consolidated) {
    try {
      packed.emplace(kHeaderBytes + layout.flat_bytes, options.reuse_buffers);
      pack_into(layout, packed->data() + kHeaderBytes);
    } catch (...) {
      ch.wait(expected.work());  // a receive left posted would take a later message
      throw;
    }
  }
  ch.wait(expected.work());
  expected.check_fit(ch, dst);
  int64_t e[kECount];
  std::memcpy(e, expected.data(), sizeof e);
  if (e[kEMagic] != kExpectMagic) throw_bad_magic(ch);
  if (e[kEKind] == kExpectInit) {
    ch.send_now(Header(kSendRefused).message(), dst);
    listen(ch, dst, expected.release());
    throw_called(ch, dst, "from_remote_init(), which pairs with init_remote()");
  }
  if (!same_structure(layout, e[kEHash], e[kEFlatBytes], e[kELeaves])) {
    ch.send_now(Header(kSendMismatch).message(), dst);
    fill_posted(ch, e[kEPosted], e[kELeaves], dst);
    const std::string mine = layout.text();
    const std::string theirs = exchange_descriptions(ch, mine, dst);
    listen(ch, dst, expected.release());
    throw_mismatch(ch.what(), mine, "rank " + std::to_string(dst), theirs);
  }
  // The receiver's mode decides (they agree unless the options differ).
  const bool flat = e[kEMode] == static_cast<int64_t>(TransferMode::Consolidated);
  const std::string extra = non_tensor_payload(ch.what(), td, layout);
  const int64_t extra_bytes = static_cast<int64_t>(extra.size());
  const Header header(kSendOk, extra_bytes, layout, e[kEMode]);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::optional<MessageBuffer> message;
  if (flat) {
    if (!packed) {
      packed.emplace(kHeaderBytes + layout.flat_bytes, options.reuse_buffers);
      pack_into(layout, packed->data() + kHeaderBytes);
    }
    message = std::move(packed);
    header.write(message->data());
    if (split_flat(e[kEFirstBytes], layout.flat_bytes)) {
      works.push_back(ch.send(message->tensor().narrow(0, 0, kHeaderBytes), dst));
      works.push_back(ch.send(message->tensor().narrow(0, kHeaderBytes, layout.flat_bytes), dst));
    } else {
      works.push_back(ch.send(message->tensor(), dst));
    }
  } else {
    if (packed) packed->done();  // never sent: back to the pool
    works.push_back(ch.send(header.message(), dst));
  }
  // The receiver sends nothing more in this transfer.
  listen(ch, dst, expected.release());
  send_rest_and_wait(ch, layout, extra, !flat, dst, works);
  if (message) message->done();
}

}  // namespace

at::Tensor peer_sized_buffer(const Channel& ch, int64_t nbytes) {
  try {
    return guarded_bytes(nbytes);
  } catch (const std::exception&) {
    throw StorageError(ch.what() + ": cannot allocate the " + std::to_string(nbytes) +
                       " bytes the peer announces");
  }
}

void take_leaves(Channel& ch, const std::vector<int64_t>& nbytes, int src) {
  // One at a time, into one buffer of the largest: no hot path, and one
  // mapping however many leaves the peer lists.
  const int64_t largest = nbytes.empty() ? 0 : *std::max_element(nbytes.begin(), nbytes.end());
  if (largest <= 0) return;
  const at::Tensor scratch = peer_sized_buffer(ch, largest);
  for (int64_t n : nbytes)
    if (n > 0) ch.recv_now(scratch.narrow(0, 0, n), src);
}

namespace {

std::vector<int64_t> leaf_sizes(const Layout& layout) {
  std::vector<int64_t> out;
  for (const Leaf& leaf : layout.leaves) out.push_back(leaf.nbytes);
  return out;
}

}  // namespace

std::vector<NonTensorValue> recv_non_tensors(Channel& ch, const TensorDictBase& td,
                                             const Layout& layout, int64_t extra_bytes,
                                             bool per_leaf, int src) {
  try {
    return read_non_tensors(ch.what(), td, layout, ch.recv_string(extra_bytes, src));
  } catch (const FormatError&) {
    if (per_leaf) take_leaves(ch, leaf_sizes(layout), src);
    throw;
  }
}

LeafReceives::LeafReceives(Channel& ch, const Layout& layout, const TensorDictBase& td, int src) {
  const bool stage = ch.options().stage_leaves;
  for (const Leaf& leaf : layout.leaves) {
    if (leaf.nbytes == 0) continue;
    const at::Tensor* own = stage ? nullptr : own_memory(leaf, td);
    received_.emplace_back(&leaf, own != nullptr);
    if (own) {
      works_.push_back(ch.recv(bytes_of(*own), src));
      continue;
    }
    if (!staging_) staging_.emplace(layout.flat_bytes, ch.options().reuse_buffers);
    works_.push_back(ch.recv(staging_->tensor().narrow(0, leaf.offset, leaf.nbytes), src));
  }
}

void LeafReceives::wait(Channel& ch, int src) {
  const bool staged_only =
      std::none_of(received_.begin(), received_.end(), [](const auto& r) { return r.second; });
  if (staged_only) {
    ch.wait_all_last_first(works_);  // a peer that dies is noticed at once
  } else {
    // In order, so that a failure tells which leaves were written in place.
    for (std::size_t i = 0; i < works_.size(); ++i) {
      try {
        ch.wait(works_[i]);
      } catch (const Error& e) {
        rethrow_naming_written(e, i);
      }
    }
    works_.clear();
  }
  if (staging_) ch.check_fit(staging_->tensor(), src, "the leaves' receives");
}

void LeafReceives::rethrow_naming_written(const Error& e, std::size_t failed) const {
  std::string written;
  for (std::size_t i = 0; i < failed; ++i)
    if (received_[i].second)
      written += (written.empty() ? "" : ", ") + received_[i].first->key.repr();
  std::string msg = std::string(e.what()) + " (received in place: " +
                    (written.empty() ? std::string("nothing was written before the failure")
                                     : "written before the failure: " + written);
  if (received_[failed].second)
    msg += "; " + received_[failed].first->key.repr() + " may be partly written";
  msg +=
      "; the other leaves are as they were; TransferOptions::stage_leaves writes nothing "
      "on a failure)";
  if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(msg);
  if (dynamic_cast<const ConnectionError*>(&e)) throw ConnectionError(msg);
  if (dynamic_cast<const StorageError*>(&e)) throw StorageError(msg);
  if (dynamic_cast<const FormatError*>(&e)) throw FormatError(msg);
  throw Error(msg);
}

void LeafReceives::write(const TensorDictBase& td) {
  for (const auto& [leaf, in_place] : received_)
    if (!in_place) unpack_leaf(*leaf, staging_->data(), td);
  if (staging_) staging_->done();
}

void recv_per_leaf(Channel& ch, const Layout& layout, const TensorDictBase& td, int src) {
  LeafReceives leaves(ch, layout, td, src);
  leaves.wait(ch, src);
  leaves.write(td);
}

void fill_posted(Channel& ch, int64_t count, int64_t leaves, int peer) {
  // A recv() posts at most one receive per leaf of its structure (`leaves`,
  // from the same expectation), and no tensordict has kMaxLeaves leaves.
  const int64_t limit = std::clamp<int64_t>(leaves, 0, kMaxLeaves);
  if (count < 0 || count > limit)
    throw FormatError(ch.what() + ": rank " + std::to_string(peer) + " announces " +
                      std::to_string(count) + " leaf receives, outside [0, " +
                      std::to_string(limit) + "] (its structure has " + std::to_string(leaves) +
                      " leaves)");
  if (count == 0) return;
  // In batches, each waited for, all within one timeout: a peer that takes
  // none or few costs one timeout, not `count` messages queued in memory.
  constexpr int64_t kBatch = 1024;
  const auto deadline = ch.deadline();
  const at::Tensor empty = at::empty({0}, at::kByte);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (int64_t done = 0; done < count; done += kBatch) {
    for (int64_t i = done; i < std::min(count, done + kBatch); ++i)
      works.push_back(ch.send(empty, peer));
    ch.wait_all(works, deadline);
  }
}

namespace {

void recv_impl(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
               const TransferOptions& options) {
  if (options.wire == Wire::Python) {
    recv_python(td, pg, src, options);
    return;
  }
  check_peer(pg, src, "recv", "source");
  Channel ch = transfer_channel(pg, options, "recv", "recv from rank " + std::to_string(src));
  if (options.check == StructureCheck::Receiver) {
    recv_eager(ch, td, src);
    return;
  }
  const Layout layout = describe(td);
  check_receivable(ch.what(), layout);  // before any message
  const TransferMode mode = choose_mode(layout, options);
  const bool flat = mode == TransferMode::Consolidated;
  // The sender's first message: the header, with room behind it for this
  // side's flat buffer (or the listening receive this side left posted).
  FirstReceive first(ch, src, kHeaderBytes + (flat ? layout.flat_bytes : 0),
                     options.reuse_buffers && flat);
  // Per leaf, the leaf receives are posted now, behind it, so that the
  // leaves move as soon as the sender has the expectation (as one send per
  // tensor by hand does), not a round trip after the header. Not with
  // non-tensor values: those are checked before any leaf is written.
  std::optional<LeafReceives> posted;
  if (!flat && layout.non_tensors.empty()) posted.emplace(ch, layout, td, src);
  at::Tensor expectation = at::zeros({kECount}, at::kLong);
  int64_t* e = expectation.data_ptr<int64_t>();
  e[kEMagic] = kExpectMagic;
  e[kEKind] = kExpectRecv;
  e[kEHash] = layout.hash;
  e[kEFlatBytes] = layout.flat_bytes;
  e[kEMode] = static_cast<int64_t>(mode);
  e[kELeaves] = static_cast<int64_t>(layout.leaves.size());
  e[kEFirstBytes] = first.listened() ? kListenBytes : 0;
  e[kEPosted] = posted ? posted->count() : 0;
  auto announced = ch.send(expectation, src);
  ch.wait(first.work());
  try {
    first.check_fit(ch, src);
  } catch (const FormatError&) {
    ch.wait(announced);
    throw;
  }
  int64_t h[kHCount];
  read_first(ch, first.data(), src, announced, h, posted ? &*posted : nullptr);
  if (h[kHKind] != kSendOk) {
    ch.wait(announced);  // the sender answered it
    const bool refused = h[kHKind] == kInitRefused, differs = h[kHKind] == kSendMismatch;
    if (!refused && !differs)  // a corrupt peer: leaf receives posted ahead stay posted
      throw FormatError(ch.what() + ": unknown message kind " + std::to_string(h[kHKind]));
    if (posted) posted->wait(ch, src);  // the sender filled them, empty
    if (refused) throw_called(ch, src, peer_call(h));
    mismatch(ch, layout, src);
  }
  // The data comes in the mode this side asked for.
  if (flat && h[kHFlatBytes] != layout.flat_bytes)
    throw FormatError(ch.what() + ": the data message has " + std::to_string(h[kHFlatBytes]) +
                      " bytes where " + std::to_string(layout.flat_bytes) + " are expected");
  // A buffer larger than the listening receive comes in a message of its own,
  // before the non-tensor values.
  uint8_t* data = first.data() + kHeaderBytes;
  std::optional<MessageBuffer> separate;
  c10::intrusive_ptr<c10d::Work> separate_work;
  if (flat && split_flat(e[kEFirstBytes], layout.flat_bytes)) {
    separate.emplace(kHeaderBytes + layout.flat_bytes, options.reuse_buffers);
    separate_work = ch.recv(separate->tensor().narrow(0, kHeaderBytes, layout.flat_bytes), src);
    data = separate->data() + kHeaderBytes;
  }
  std::vector<NonTensorValue> non_tensors;
  try {
    // (With leaf receives posted ahead there are no non-tensor values: JSON
    // here comes from a corrupt peer, and those receives stay posted.)
    non_tensors = recv_non_tensors(ch, td, layout, h[kHExtraBytes], !flat && !posted, src);
  } catch (const FormatError&) {
    if (separate_work) ch.wait(separate_work);  // a receive left posted would take a later message
    throw;
  }
  if (separate_work) {
    ch.wait(separate_work);
    ch.check_fit(separate->tensor(), src, "the data's receive");
  }
  if (flat) unpack(layout, data, td);
  first.done();  // unpack copied everything out
  if (separate) separate->done();
  if (posted) {
    posted->wait(ch, src);
    posted->write(td);
  } else if (!flat) {
    recv_per_leaf(ch, layout, td, src);
  }
  apply_non_tensors(td, non_tensors);
  ch.wait(announced);
}

}  // namespace

}  // namespace tensordict::detail::distributed

namespace tensordict {

using namespace detail::distributed;

// ---- Work ----------------------------------------------------------------------

void Work::wait() const {
  if (!future_.valid()) throw ValueError("Work::wait() on a default-constructed handle");
  future_.get();
}

bool Work::is_completed() const {
  return future_.valid() && future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// ---- point to point ------------------------------------------------------------

void send(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
          const TransferOptions& options) {
  send_impl(td, pg, dst, options);
}

void recv(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
          const TransferOptions& options) {
  recv_impl(td, pg, src, options);
}

namespace {
using Transfer = void (*)(const TensorDictBase&, c10d::ProcessGroup&, int, const TransferOptions&);

// `transfer` on a thread of its own (the arguments checked first, here).
Work run_async(Transfer transfer, const TensorDictBase& td, c10d::ProcessGroup& pg, int peer,
               const TransferOptions& options, const char* op, const char* role) {
  check_peer(pg, peer, op, role);
  // A tag out of range: ValueError here, not on wait().
  if (options.wire == Wire::Python)
    check_python_tag(options, op);
  else
    in_slot(options, kCheckedTagBit, op);
  c10d::ProcessGroup* group = &pg;
  return Work(std::async(std::launch::async, [transfer, td, group, peer, options] {
                transfer(td, *group, peer, options);
              }).share());
}
}  // namespace

Work isend(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
           const TransferOptions& options) {
  return run_async(send_impl, td, pg, dst, options, "isend", "destination");
}

Work irecv(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
           const TransferOptions& options) {
  return run_async(recv_impl, td, pg, src, options, "irecv", "source");
}

void init_remote(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                 const TransferOptions& options) {
  check_peer(pg, dst, "init_remote", "destination");
  Channel ch(pg, in_slot(options, kCheckedTagBit, "init_remote"),
             "init_remote to rank " + std::to_string(dst));
  const Layout layout = describe(td);
  FirstReceive expected(ch, dst, kHeaderBytes, false);
  ch.wait(expected.work());
  expected.check_fit(ch, dst);
  int64_t e[kECount];
  std::memcpy(e, expected.data(), sizeof e);
  if (e[kEMagic] != kExpectMagic) throw_bad_magic(ch);
  if (e[kEKind] != kExpectInit) {
    ch.send_now(Header(kInitRefused).message(), dst);
    fill_posted(ch, e[kEPosted], e[kELeaves], dst);
    listen(ch, dst, expected.release());
    throw_called(ch, dst, peer_call(e));
  }
  // Python's consolidated format keeps the class (a lazy stack stays one). A
  // tensordict holding a NonTensorStack still sends our own layout (every
  // level a TensorDict), chosen before consolidate() held NonTensorStacks.
  const bool has_stack = std::any_of(layout.non_tensors.begin(), layout.non_tensors.end(),
                                     [](const NonTensorEntry& e) { return e.stack; });
  std::string structure;
  at::Tensor storage;
  int64_t format = kInitConsolidated;
  if (!has_stack) {
    const TensorDictBase consolidated = td.is_consolidated() ? td : td.consolidate();
    structure = consolidated.consolidated_metadata().dump();
    storage = consolidated.consolidated_storage();
  } else {
    format = kInitLayout;
    const std::string extra = non_tensor_payload(ch.what(), td, layout);
    structure = json{{"layout", layout.description()},
                     {"non_tensors", extra.empty() ? json() : json::parse(extra)}}
                    .dump();
    storage = pack(layout);
  }
  const int64_t nbytes = storage.defined() ? storage.numel() : 0;

  Header init(kInitHeader, static_cast<int64_t>(structure.size()));
  init.flat_bytes = nbytes;
  init.mode = format;
  const at::Tensor header = init.message();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(ch.send(header, dst));
  at::Tensor structure_t = bytes_tensor(structure);
  works.push_back(ch.send(structure_t, dst));
  if (nbytes > 0) {
    storage = storage.contiguous();
    works.push_back(ch.send(storage, dst));
  }
  listen(ch, dst, expected.release());  // the receiver sends nothing more
  ch.wait_all(works);
}

namespace {

// from_remote_init of the layout format: a TensorDict per level, leaves views
// of `storage`.
TensorDictBase build_from_layout(const json& structure, const at::Tensor& storage) {
  const json& entries = structure.at("layout");
  TensorDict out(entries.at(0).at(2).at("batch").get<std::vector<int64_t>>());
  for (std::size_t i = 1; i < entries.size(); ++i) {
    const json& e = entries.at(i);
    NestedKey key(e.at(0).get<std::vector<std::string>>());
    const json& info = e.at(2);
    if (info.contains("batch")) {
      if (!out.contains(key))
        out.set(key, TensorDict(info.at("batch").get<std::vector<int64_t>>()));
    } else if (info.contains("dtype")) {
      const auto dtype = dtype_from_string(info.at("dtype").get<std::string>());
      const auto shape = info.at("shape").get<std::vector<int64_t>>();
      // The byte count, refused where it overflows (the storage bounds it anyway).
      int64_t nbytes = static_cast<int64_t>(c10::elementSize(dtype));
      for (int64_t d : shape)
        if (d < 0 || __builtin_mul_overflow(nbytes, d, &nbytes))
          throw FormatError("the leaf " + key.repr() + " has the shape " + shape_string(shape));
      at::Tensor leaf =
          nbytes == 0
              ? at::empty(shape, at::TensorOptions().dtype(dtype))
              : storage.narrow(0, info.at("offset").get<int64_t>(), nbytes).view(dtype).view(shape);
      out.set(key, leaf);
    }
  }
  if (!structure.at("non_tensors").is_null()) {
    for (const json& item : structure.at("non_tensors")) {
      NestedKey key(item.at(0).get<std::vector<std::string>>());
      if (item.at(1).get<bool>())
        out.set_non_tensor_stack(key, item.at(2));
      else
        out.set_non_tensor(key, item.at(2));
    }
  }
  return out;
}

}  // namespace

namespace detail::distributed {

TensorDictBase build_received(const std::string& what, int64_t format, const std::string& structure,
                              const at::Tensor& storage) {
  const std::string invalid = what + ": the structure message is not valid: ";
  const json parsed = parse_received(structure, invalid);
  try {
    if (format == kInitLayout) return build_from_layout(parsed, storage);
    if (format != kInitConsolidated) throw FormatError("unknown format " + std::to_string(format));
    return TensorDict::from_consolidated(storage, nlohmann::ordered_json(parsed));
  } catch (const json::exception& e) {
    throw FormatError(invalid + e.what());
  } catch (const c10::Error& e) {  // offsets or shapes outside the buffer
    throw FormatError(
        what + ": the structure message does not fit its buffer: " + e.what_without_backtrace());
  } catch (const Error& e) {  // keys, shapes or values a sender does not send
    throw FormatError(invalid + e.what());
  }
}

}  // namespace detail::distributed

TensorDictBase from_remote_init(c10d::ProcessGroup& pg, int src, const TransferOptions& options) {
  check_peer(pg, src, "from_remote_init", "source");
  Channel ch(pg, in_slot(options, kCheckedTagBit, "from_remote_init"),
             "from_remote_init from rank " + std::to_string(src));
  at::Tensor expectation = at::zeros({kECount}, at::kLong);
  expectation.data_ptr<int64_t>()[kEMagic] = kExpectMagic;
  expectation.data_ptr<int64_t>()[kEKind] = kExpectInit;
  FirstReceive first(ch, src, kHeaderBytes, false);
  auto announced = ch.send(expectation, src);
  ch.wait(first.work());
  try {
    first.check_fit(ch, src);
  } catch (const FormatError&) {
    ch.wait(announced);
    throw;
  }
  int64_t h[kHCount];
  read_first(ch, first.data(), src, announced, h, nullptr);
  ch.wait(announced);
  if (h[kHKind] != kInitHeader) {
    if (h[kHKind] == kSendRefused)
      throw_called(ch, src, "send(), which pairs with recv() into an existing tensordict");
    throw FormatError(ch.what() + ": unknown message kind " + std::to_string(h[kHKind]));
  }
  if (h[kHFlatBytes] < 0 || h[kHExtraBytes] < 0)
    throw FormatError(ch.what() + ": the header gives negative sizes");
  const std::string structure = ch.recv_string(h[kHExtraBytes], src);
  at::Tensor storage = peer_sized_buffer(ch, h[kHFlatBytes]);
  if (h[kHFlatBytes] > 0) {
    ch.recv_now(storage, src);
    ch.check_fit(storage, src, "the buffer's receive");
  }
  return build_received(ch.what(), h[kHMode], structure, storage);
}

}  // namespace tensordict
