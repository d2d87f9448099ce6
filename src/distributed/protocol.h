#pragma once
// The wire format of point-to-point transfers (docs/distributed.md,
// "Protocol"): magic numbers, the receiver's expectation, the sender's header
// and their kinds.

#include "distributed/layout.h"

#include <tensordict/distributed.h>
#include <tensordict/errors.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace tensordict::detail::distributed {

// Protocol 3 (2 plus the listening receive, see Listeners). The receiver's
// expectation and the sender's headers have magic numbers of their own, so
// that either side tells an expectation from a header when both call the same
// side (send and send, recv and recv).
constexpr int64_t kMagic = 0x0054'4443'5431'0003;        // "TDCT1": the sender's headers
constexpr int64_t kExpectMagic = 0x0054'4443'5445'0003;  // "TDCTE": the expectation
// init_remote formats (header mode field).
constexpr int64_t kInitConsolidated = 0;
constexpr int64_t kInitLayout = 1;
// The header that starts the first message of a send() or init_remote():
// its kind, the length of the message after it (non-tensor JSON, or
// init_remote's structure), the sender's structure and its mode (init_remote:
// its format). The flat buffer, if any, follows in the same message.
// Eager transfers (StructureCheck::Receiver) put the sender's structure
// between the header and the data.
enum : int {
  kHMagic,
  kHKind,
  kHExtraBytes,
  kHHash,
  kHFlatBytes,
  kHLeaves,
  kHMode,
  kHDescBytes,  // an eager header's structure length (see send_eager)
  kHCount = 8
};
constexpr int64_t kHeaderBytes = int64_t{kHCount} * 8;

// Declared kinds of the receiver's expectation.
constexpr int64_t kExpectRecv = 1;  // recv(): the data of an existing structure
constexpr int64_t kExpectInit = 2;  // from_remote_init(): structure and data
// kEFirstBytes: 0, or the size of the receive the sender's first message lands
// in when it is a listening receive (see listening.h). kEPosted: the leaf
// receives a per-leaf recv() posted next to it, before the header (see
// LeafReceives); a peer that sends no leaves fills each with an empty message.
enum : int {
  kEMagic,
  kEKind,
  kEHash,
  kEFlatBytes,
  kEMode,
  kELeaves,
  kEFirstBytes,
  kEPosted,
  kECount = 8
};
// Kinds of the sender's header.
constexpr int64_t kSendOk = 1;        // send(): data in the receiver's mode
constexpr int64_t kSendMismatch = 2;  // send(): the structures differ
constexpr int64_t kSendRefused = 3;   // send() answering from_remote_init()
constexpr int64_t kInitHeader = 4;    // init_remote(): structure and buffer follow
constexpr int64_t kInitRefused = 5;   // init_remote() answering recv()

// StructureCheck::Receiver (eager.cpp): the header's kind and the receive its
// first message lands in.
constexpr int64_t kSendEager = 6;
constexpr int64_t kEagerFirstMessageBytes = (int64_t{4} << 20) + (int64_t{64} << 10);

struct Header {
  int64_t kind = 0;
  int64_t extra_bytes = 0;
  int64_t hash = 0, flat_bytes = 0, leaves = 0;  // the sender's structure
  int64_t mode = 0;
  int64_t desc_bytes = 0;

  Header(int64_t kind_, int64_t extra_bytes_ = 0) : kind(kind_), extra_bytes(extra_bytes_) {}
  Header(int64_t kind_, int64_t extra_bytes_, const Layout& layout, int64_t mode_)
      : kind(kind_),
        extra_bytes(extra_bytes_),
        hash(layout.hash),
        flat_bytes(layout.flat_bytes),
        leaves(static_cast<int64_t>(layout.leaves.size())),
        mode(mode_) {}

  void write(uint8_t* at) const {
    const int64_t h[kHCount] = {kMagic,     kind,   extra_bytes, hash,
                                flat_bytes, leaves, mode,        desc_bytes};
    std::memcpy(at, h, kHeaderBytes);
  }
  at::Tensor message() const {
    at::Tensor msg = at::empty({kHeaderBytes}, at::kByte);
    write(msg.data_ptr<uint8_t>());
    return msg;
  }
};

// Tag slots. A point-to-point transfer with tag t (0 <= t < 2^29) sends every
// message on t | kCheckedTagBit (the receiver speaks first, both sides check;
// init_remote / from_remote_init too) or on t | kEagerTagBit
// (StructureCheck::Receiver), never on t itself: a program's own messages on
// t never land in a transfer's receives (a listening receive included), and
// a rank of one protocol never receives a message of the other, which could
// be larger than its receive (Gloo aborts the process then).
constexpr int kTagLimit = 1 << 29;
constexpr int kCheckedTagBit = 1 << 29;
constexpr int kEagerTagBit = 1 << 30;

// The options of a transfer's messages: its tag in the slot `bit`;
// ValueError for a tag outside [0, 2^29).
// ValueError for Wire::Python outside send / recv / isend / irecv.
inline void native_wire_only(const TransferOptions& options, const char* op) {
  if (options.wire != Wire::Native)
    throw ValueError(std::string(op) +
                     ": Wire::Python applies to send, recv, isend and irecv only (Python's "
                     "other calls have protocols of their own)");
}

inline TransferOptions in_slot(const TransferOptions& options, int bit, const char* op) {
  native_wire_only(options, op);
  if (options.tag < 0 || options.tag >= kTagLimit)
    throw ValueError(std::string(op) + ": the tag of a transfer must be in [0, 2^29), not " +
                     std::to_string(options.tag));
  TransferOptions slotted = options;
  slotted.tag = options.tag | bit;
  return slotted;
}

inline bool same_structure(const Layout& layout, int64_t hash, int64_t flat_bytes, int64_t leaves) {
  return hash == layout.hash && flat_bytes == layout.flat_bytes &&
         leaves == static_cast<int64_t>(layout.leaves.size());
}

}  // namespace tensordict::detail::distributed
