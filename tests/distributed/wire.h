#pragma once
// The wire format of point-to-point transfers (docs/distributed.md,
// "Protocol"), for the scenarios that speak it by hand with raw
// ProcessGroup messages between ranks 0 and 1.

#include "harness.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tdtest::wire {

constexpr int kCheckedTag = 1 << 29;  // tag 0 | 2^29: the slot of transfers checked on both sides
constexpr int kEagerTag = 1 << 30;    // tag 0 | 2^30: StructureCheck::Receiver's slot
constexpr int64_t kEagerFirstMessageBytes = (int64_t{4} << 20) + (int64_t{64} << 10);
constexpr int64_t kListenBytes = 64 + (int64_t{4} << 20);  // a sender's listening receive
enum : int { kHMagic, kHKind, kHExtraBytes, kHHash, kHFlatBytes, kHLeaves, kHMode, kHDescBytes };
enum : int { kEMagic, kEKind, kEHash, kEFlatBytes, kEMode, kELeaves, kEFirstBytes, kEPosted };
constexpr int64_t kMagic = 0x0054'4443'5431'0003;        // the sender's headers, protocol 3
constexpr int64_t kExpectMagic = 0x0054'4443'5445'0003;  // the expectation
constexpr int64_t kSendOk = 1;
constexpr int64_t kSendMismatch = 2;
constexpr int64_t kInitHeader = 4;
constexpr int64_t kExpectRecv = 1;
constexpr int64_t kModeConsolidated = 1;  // TransferMode
constexpr int64_t kModePerLeaf = 2;

// Raw messages between the two ranks; a zero timeout waits for the group's.
inline void raw_send(Ctx& ctx, const at::Tensor& t, int tag,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  std::vector<at::Tensor> v{t};
  auto work = ctx.pg->send(v, 1 - ctx.rank, tag);
  if (timeout.count() > 0)
    work->wait(timeout);
  else
    work->wait();
}
inline at::Tensor raw_recv(Ctx& ctx, int64_t nbytes, int tag,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  std::vector<at::Tensor> v{at::empty({nbytes}, at::kByte)};
  auto work = ctx.pg->recv(v, 1 - ctx.rank, tag);
  if (timeout.count() > 0)
    work->wait(timeout);
  else
    work->wait();
  return v[0];
}
inline int64_t* words(const at::Tensor& t) { return reinterpret_cast<int64_t*>(t.data_ptr()); }
inline int64_t padded16(int64_t n) { return (n + 15) / 16 * 16; }

// A kSendOk header answering the expectation `e` with its own structure
// (hash, sizes, leaf count), at the front of a message of 64 + `data_bytes`.
inline at::Tensor ok_header(const at::Tensor& e, int64_t mode, int64_t extra_bytes = 0,
                            int64_t data_bytes = 0) {
  at::Tensor msg = at::zeros({64 + data_bytes}, at::kByte);
  int64_t* h = words(msg);
  const int64_t* x = words(e);
  h[kHMagic] = kMagic;
  h[kHKind] = kSendOk;
  h[kHExtraBytes] = extra_bytes;
  h[kHHash] = x[kEHash];
  h[kHFlatBytes] = x[kEFlatBytes];
  h[kHLeaves] = x[kELeaves];
  h[kHMode] = mode;
  return msg;
}

inline at::Tensor bytes_of(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

}  // namespace tdtest::wire
