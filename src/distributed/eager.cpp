// StructureCheck::Receiver: the sender sends at once and the receiver alone
// checks (docs/distributed.md, "Who checks the structures").
//
// StructureCheck::Receiver: the sender does not wait for an expectation, so a
// transfer is one message (plus the non-tensor JSON, and the leaves when per
// leaf). Its first message carries the sender's structure:
//   header (kind kSendEager, kHDescBytes) | entries | padding to 16 |
//     one buffer: the flat data / per leaf: each leaf's size (int64)
// The receiver posts kEagerFirstMessageBytes for it, which every eager first
// message fits (a larger transfer goes per leaf), checks the structure, and
// on a mismatch takes the sender's remaining messages before it throws, so
// the group stays in step. Eager messages use a tag slot of their own (tag |
// kEagerTagBit, see protocol.h): a rank that checks on both sides never
// receives one; mixed settings fail on both sides instead (a timeout, or the
// connection the other side closed on its timeout).

#include "distributed/buffers.h"
#include "distributed/channel.h"
#include "distributed/layout.h"
#include "distributed/point_to_point.h"
#include "distributed/protocol.h"

#include <tensordict/errors.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace tensordict::detail::distributed {

namespace {

int64_t padded(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

// The entries as the receiver compares them, in binary: per entry the number
// of key parts (uint32), each part (its uint32 length, then its bytes), the
// kind (uint8), the dtype (int8), the number of dims (uint32) and the dims
// (int64 each). The receiver formats them only to name a difference.
std::string encode_entries(const Layout& layout) {
  std::string out;
  auto put = [&](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (const EntryDesc& e : layout.entries) {
    put(static_cast<uint32_t>(e.key.size()));
    for (const auto& part : e.key) {
      put(static_cast<uint32_t>(part.size()));
      out += part;
    }
    put(static_cast<uint8_t>(e.kind));
    put(static_cast<int8_t>(e.dtype));
    put(static_cast<uint32_t>(e.dims.size()));
    for (int64_t d : e.dims) put(d);
  }
  return out;
}

EntryList decode_entries(const std::string& what, const uint8_t* p, int64_t n) {
  EntryList out;
  int64_t at = 0;
  auto bad = [&](const std::string& why) {
    return FormatError(what + ": the sender's structure is " + why + " at byte " +
                       std::to_string(at) + " of " + std::to_string(n));
  };
  auto get = [&](auto& v) {
    if (n - at < static_cast<int64_t>(sizeof v)) throw bad("truncated");
    std::memcpy(&v, p + at, sizeof v);
    at += sizeof v;
  };
  while (at < n) {
    EntryDesc e;
    uint32_t parts = 0;
    get(parts);
    std::vector<std::string> key;
    for (uint32_t i = 0; i < parts; ++i) {  // each takes >= 4 bytes
      uint32_t len = 0;
      get(len);
      if (n - at < static_cast<int64_t>(len)) throw bad("truncated");
      key.emplace_back(reinterpret_cast<const char*>(p + at), len);
      at += len;
    }
    e.key = NestedKey(key);
    uint8_t kind = 0;
    int8_t dtype = 0;
    uint32_t ndims = 0;
    get(kind);
    get(dtype);
    get(ndims);
    if (kind > static_cast<uint8_t>(EntryKind::NonTensorStack)) throw bad("not valid (entry kind)");
    e.kind = static_cast<EntryKind>(kind);
    e.dtype = static_cast<at::ScalarType>(dtype);
    if (static_cast<int64_t>(ndims) > (n - at) / 8) throw bad("truncated");
    e.dims.resize(ndims);
    for (int64_t& d : e.dims) get(d);
    std::string described;
    try {
      if (e.kind == EntryKind::Tensor &&
          (dtype < 0 || dtype >= static_cast<int8_t>(at::ScalarType::NumOptions)))
        throw ValueError("dtype out of range");
      described = e.what();
    } catch (const std::exception&) {  // a dtype without a name
      throw bad("not valid (dtype " + std::to_string(dtype) + ")");
    }
    out.emplace_back(std::move(e.key), std::move(described));
  }
  return out;
}

void send_eager(Channel& ch, const TensorDictBase& td, const Layout& layout, int dst) {
  const TransferOptions& options = ch.options();
  const std::string entries = encode_entries(layout);
  const auto desc_bytes = static_cast<int64_t>(entries.size());
  const int64_t data_at = kHeaderBytes + padded(desc_bytes);
  const auto leaves = static_cast<int64_t>(layout.leaves.size());
  const bool flat = choose_mode(layout, options) == TransferMode::Consolidated &&
                    data_at + layout.flat_bytes <= kEagerFirstMessageBytes;
  const int64_t first_bytes = data_at + (flat ? layout.flat_bytes : 8 * leaves);
  if (first_bytes > kEagerFirstMessageBytes)
    throw ValueError(ch.what() + ": a structure of " + std::to_string(layout.entries.size()) +
                     " entries takes " + std::to_string(first_bytes) + " bytes, more than the " +
                     std::to_string(kEagerFirstMessageBytes) +
                     " of StructureCheck::Receiver's first message; use StructureCheck::BothSides");
  const std::string extra = non_tensor_payload(ch.what(), td, layout);
  MessageBuffer message(first_bytes, options.reuse_buffers);
  Header header(kSendEager, static_cast<int64_t>(extra.size()), layout,
                static_cast<int64_t>(flat ? TransferMode::Consolidated : TransferMode::PerLeaf));
  header.desc_bytes = desc_bytes;
  header.write(message.data());
  std::memcpy(message.data() + kHeaderBytes, entries.data(), entries.size());
  if (flat) {
    pack_into(layout, message.data() + data_at);
  } else {
    for (int64_t i = 0; i < leaves; ++i)
      std::memcpy(message.data() + data_at + 8 * i, &layout.leaves[i].nbytes, 8);
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(ch.send(message.tensor(), dst));
  send_rest_and_wait(ch, layout, extra, !flat, dst, works);
  message.done();
}

void recv_eager(Channel& ch, const TensorDictBase& td, int src) {
  // The receive is posted first and the structure described meanwhile: the
  // sender can start sending as soon as it is posted.
  if (!td.defined()) throw ValueError("distributed transfer of a null tensordict handle");
  MessageBuffer message(kEagerFirstMessageBytes, ch.options().reuse_buffers);
  auto received = ch.recv(message.tensor(), src);
  std::optional<Layout> described;
  try {
    described.emplace(describe(td));
  } catch (...) {
    ch.wait(received);  // a receive left posted would take a later message
    throw;
  }
  const Layout& layout = *described;
  ch.wait(received);
  ch.check_fit(message.tensor(), src, "the first message's receive");
  int64_t h[kHCount];
  std::memcpy(h, message.data(), kHeaderBytes);
  if (h[kHMagic] != kMagic) throw_bad_magic(ch);
  if (h[kHKind] != kSendEager)
    throw FormatError(ch.what() + ": unknown message kind " + std::to_string(h[kHKind]));
  const int64_t desc_bytes = h[kHDescBytes], leaves = h[kHLeaves], flat_bytes = h[kHFlatBytes];
  const bool flat = h[kHMode] == static_cast<int64_t>(TransferMode::Consolidated);
  const int64_t limit = kEagerFirstMessageBytes;
  if (desc_bytes < 0 || desc_bytes > limit || leaves < 0 || leaves > limit / 8 || flat_bytes < 0 ||
      (flat && flat_bytes > limit) || h[kHExtraBytes] < 0 ||
      kHeaderBytes + padded(desc_bytes) + (flat ? flat_bytes : 8 * leaves) > limit)
    throw FormatError(ch.what() + ": the sender's header does not fit its message (" +
                      std::to_string(desc_bytes) + " bytes of structure, " +
                      std::to_string(leaves) + " leaves, " + std::to_string(flat_bytes) +
                      " bytes of data)");
  uint8_t* data = message.data() + kHeaderBytes + padded(desc_bytes);  // after the structure
  // A leaf that cannot receive in place (checked once the first message is
  // here, so that the structure was described meanwhile) refuses the
  // transfer as a mismatch does.
  const std::string refused = unreceivable(ch.what(), layout);
  if (!refused.empty() || !same_structure(layout, h[kHHash], flat_bytes, leaves)) {
    // Take the sender's JSON and leaves (it does not wait to be told), then throw.
    ch.recv_string(h[kHExtraBytes], src);
    if (!flat) {
      std::vector<int64_t> sizes(leaves);
      for (int64_t i = 0; i < leaves; ++i) {
        std::memcpy(&sizes[i], data + 8 * i, 8);
        if (sizes[i] < 0)
          throw FormatError(ch.what() + ": the sender's leaf " + std::to_string(i) + " has " +
                            std::to_string(sizes[i]) + " bytes");
      }
      take_leaves(ch, sizes, src);
    }
    if (!refused.empty()) throw ValueError(refused);
    const EntryList theirs = decode_entries(ch.what(), message.data() + kHeaderBytes, desc_bytes);
    message.done();
    throw_mismatch(ch.what(), entries_of(layout), "rank " + std::to_string(src), theirs);
  }
  // The sender's mode decides: the same structure, so the same sizes.
  const auto non_tensors = recv_non_tensors(ch, td, layout, h[kHExtraBytes], !flat, src);
  if (flat) {
    unpack(layout, data, td);
    message.done();
  } else {
    message.done();
    recv_per_leaf(ch, layout, td, src);
  }
  apply_non_tensors(td, non_tensors);
}

}  // namespace tensordict::detail::distributed
