#pragma once
// Small tensordicts and checks the wire-level scenarios share.

#include "harness.h"

#include <tensordict/distributed.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace tdtest {

// Two leaves, "a" (16 bytes at offset 0 of the flat buffer) and "b" (64 bytes
// at offset 16): sorted keys, 16-byte aligned offsets.
inline tensordict::TensorDict small(int seed) {
  return tensordict::TensorDict({{"a", at::arange(4, at::kFloat) + seed},
                                 {"b", (at::arange(8, at::kLong) + seed).reshape({4, 2})}},
                                {4});
}

inline void expect_equal(const tensordict::TensorDictBase& got,
                         const tensordict::TensorDictBase& want) {
  if (!got.equal(want))
    throw std::runtime_error("tensordicts differ:\ngot " + got.repr() + "\nwant " + want.repr());
}

// One transfer from `sender` to the other rank: make(seed) sent, received into
// make(0) and compared.
template <class Make>
void transfer(Ctx& ctx, int sender, Make make, int seed,
              const tensordict::TransferOptions& opts = {}) {
  if (ctx.rank == sender) {
    tensordict::send(make(seed), *ctx.pg, 1 - sender, opts);
    return;
  }
  tensordict::TensorDict t = make(0);
  tensordict::recv(t, *ctx.pg, sender, opts);
  expect_equal(t, make(seed));
}

}  // namespace tdtest
