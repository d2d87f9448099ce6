// Leaf receives posted ahead (docs/distributed.md, "One buffer or one message
// per leaf"): a per-leaf recv() without non-tensor values posts its leaf
// receives next to the receive of the header and says so in its expectation;
// a peer that answers without leaves (a mismatch, a refusal, a recv facing a
// recv) fills each with an empty message, which writes nothing.

#include "harness.h"
#include "helpers.h"
#include "wire.h"

#include <tensordict/distributed.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

#include <chrono>
#include <string>
#include <vector>

namespace td = tensordict;
using nlohmann::json;
using namespace tdtest;
using namespace tdtest::wire;

namespace {

td::TransferOptions per_leaf() {
  td::TransferOptions o;
  o.mode = td::TransferMode::PerLeaf;
  return o;
}

// Every dtype, nested, no non-tensor value (so the receives go ahead).
td::TensorDict tensors(int seed, int64_t rows = 3) {
  const std::vector<at::ScalarType> dtypes = {at::kFloat,    at::kDouble,       at::kHalf,
                                              at::kBFloat16, at::kByte,         at::kBool,
                                              at::kInt,      at::kComplexFloat, at::kLong};
  td::TensorDict t(std::vector<int64_t>{rows});
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    at::Tensor v = (at::arange(rows * 2, at::kDouble) + seed + static_cast<double>(i))
                       .remainder(50)
                       .reshape({rows, 2});
    v = dtypes[i] == at::kBool ? v.remainder(2).to(at::kBool) : v.to(dtypes[i]);
    if (i % 2)
      t.set({"nested", "x" + std::to_string(i)}, v);
    else
      t.set("x" + std::to_string(i), v);
  }
  t.set("empty", at::zeros({rows, 0}));  // no message, no receive
  return t;
}

// Rank 0's hand-made answer to a recv(): the structures differ. The header,
// `fills` empty messages, then the exchange of descriptions.
void answer_mismatch(tdtest::Ctx& ctx, int64_t fills) {
  at::Tensor header = at::zeros({64}, at::kByte);
  words(header)[kHMagic] = kMagic;
  words(header)[kHKind] = kSendMismatch;
  raw_send(ctx, header, kCheckedTag);
  for (int64_t i = 0; i < fills; ++i) raw_send(ctx, at::empty({0}, at::kByte), kCheckedTag);
  const std::string mine =
      json::array({json::array({json::array(), "root batch [5]", json{{"batch", {5}}}})}).dump();
  raw_send(ctx, at::full({1}, static_cast<int64_t>(mine.size()), at::kLong), kCheckedTag);
  raw_send(ctx, bytes_of(mine), kCheckedTag);
  const at::Tensor len = raw_recv(ctx, 8, kCheckedTag);
  raw_recv(ctx, words(len)[0], kCheckedTag);
}

}  // namespace

TD_SCENARIO(leaf_receives_posted_ahead_on_the_wire) {
  // Rank 1 receives per leaf; rank 0 speaks the protocol by hand: the
  // expectation announces the two receives posted ahead (none with a
  // non-tensor value, whose JSON is checked before any leaf is written); a
  // header then the leaves land in them; a mismatch fills them, and rank 1
  // throws with its leaves as they were; a forged expectation announcing -1
  // receives is a FormatError for the sender; genuine transfers follow.
  if (ctx.rank == 1) {
    td::TensorDict t = small(0);
    td::recv(t, *ctx.pg, 0, per_leaf());
    expect_equal(t, small(5));
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, per_leaf()), td::StructureError);
    TD_CHECK(what.find("root batch [4]") != std::string::npos &&
             what.find("on rank 0") != std::string::npos &&
             what.find("root batch [5]") != std::string::npos);
    expect_equal(t, small(5));
    td::TensorDict named = small(0);
    named.set_non_tensor("name", json("x"));
    what = TD_EXPECT_THROW(td::recv(named, *ctx.pg, 0, per_leaf()), td::StructureError);
    // A forged expectation of another structure announcing -1 receives.
    what = TD_EXPECT_THROW(td::send(small(7), *ctx.pg, 0), td::FormatError);
    TD_CHECK(what.find("announces -1 leaf receives") != std::string::npos);
    td::recv(t, *ctx.pg, 0, per_leaf());
    expect_equal(t, small(6));
    return;
  }
  at::Tensor e = raw_recv(ctx, 64, kCheckedTag);
  TD_CHECK(words(e)[kEMagic] == kExpectMagic && words(e)[kEMode] == kModePerLeaf);
  TD_CHECK(words(e)[kELeaves] == 2 && words(e)[kEPosted] == 2);
  raw_send(ctx, ok_header(e, kModePerLeaf), kCheckedTag);
  const td::TensorDict x = small(5);
  for (const char* key : {"a", "b"}) {
    const at::Tensor leaf = x.get(key);
    raw_send(ctx, at::from_blob(leaf.data_ptr(), {static_cast<int64_t>(leaf.nbytes())}, at::kByte),
             kCheckedTag);
  }
  e = raw_recv(ctx, 64, kCheckedTag);
  TD_CHECK(words(e)[kEPosted] == 2);
  answer_mismatch(ctx, 2);
  e = raw_recv(ctx, 64, kCheckedTag);
  TD_CHECK(words(e)[kELeaves] == 2 && words(e)[kEPosted] == 0);  // a non-tensor value
  answer_mismatch(ctx, 0);
  at::Tensor forged = at::zeros({64}, at::kByte);
  words(forged)[kEMagic] = kExpectMagic;
  words(forged)[kEKind] = kExpectRecv;
  words(forged)[kEPosted] = -1;
  raw_send(ctx, forged, kCheckedTag);
  const at::Tensor answer = raw_recv(ctx, 64, kCheckedTag);
  TD_CHECK(words(answer)[kHKind] == kSendMismatch);
  td::send(small(6), *ctx.pg, 1, per_leaf());
}

TD_SCENARIO(leaf_receives_posted_ahead) {
  // Per leaf, every path with receives posted ahead: in place (in memory)
  // and staged (memmap, lazy stack) receivers; a mismatch each way, both
  // ranks receiving, init_remote and from_remote_init facing a per-leaf
  // recv: each side throws, the receivers' leaves stay as they were, and
  // the transfers after it arrive whole.
  const int peer = 1 - ctx.rank;
  auto make = [](int seed) { return tensors(seed); };
  transfer(ctx, 0, make, 1, per_leaf());
  transfer(ctx, 1, make, 2, per_leaf());
  const std::string prefix = ctx.dir + "/memmap-rank" + std::to_string(ctx.rank);
  if (ctx.rank == 0) {
    td::send(tensors(3), *ctx.pg, 1, per_leaf());
    td::send(tensors(4), *ctx.pg, 1, per_leaf());
  } else {
    td::TensorDictBase mm = tensors(0).memmap(prefix);
    td::recv(mm, *ctx.pg, 0, per_leaf());
    expect_equal(td::load_memmap(prefix), tensors(3));
    td::LazyStackedTensorDict stack =
        td::lazy_stack({tensors(0, 1)[0], tensors(0, 1)[0], tensors(0, 1)[0]}, 0);
    td::recv(stack, *ctx.pg, 0, per_leaf());
    expect_equal(stack.to_tensordict(), tensors(4));
  }
  for (int sender : {0, 1}) {  // a mismatch each way
    if (ctx.rank == sender) {
      TD_EXPECT_THROW(td::send(tensors(5, 2), *ctx.pg, peer, per_leaf()), td::StructureError);
    } else {
      td::TensorDict t = tensors(0);
      TD_EXPECT_THROW(td::recv(t, *ctx.pg, peer, per_leaf()), td::StructureError);
      expect_equal(t, tensors(0));
    }
    transfer(ctx, sender, make, 6 + sender, per_leaf());
  }
  {  // both ranks receive
    td::TensorDict t = tensors(0);
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, peer, per_leaf()), td::ValueError);
    TD_CHECK(what.find("called recv()") != std::string::npos);
    expect_equal(t, tensors(0));
  }
  transfer(ctx, 0, make, 8, per_leaf());
  if (ctx.rank == 0) {  // init_remote, then from_remote_init, facing a per-leaf recv
    TD_EXPECT_THROW(td::init_remote(tensors(9), *ctx.pg, 1), td::ValueError);
    TD_EXPECT_THROW(td::from_remote_init(*ctx.pg, 1), td::ValueError);
  } else {
    td::TensorDict t = tensors(0);
    TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, per_leaf()), td::ValueError);
    TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, per_leaf()), td::ValueError);
    expect_equal(t, tensors(0));
  }
  transfer(ctx, 1, make, 10, per_leaf());
  transfer(ctx, 0, make, 11);
}
