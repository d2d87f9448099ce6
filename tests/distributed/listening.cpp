// The listening receive (docs/distributed.md, "The listening receive"): after
// a send, the sender keeps a receive posted for its peer's next first message
// on that tag. These scenarios check that it is there (a raw message lands in
// it while the sender is outside any transfer), that every kind of transfer
// lands in it when the roles swap, and that it goes with its group.

#include "harness.h"
#include "helpers.h"
#include "support/gloo_group.h"
#include "wire.h"

#include <tensordict/distributed.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace td = tensordict;
using nlohmann::json;
using namespace tdtest;
using namespace tdtest::wire;

namespace {

void pack_small(const td::TensorDict& t, uint8_t* flat) {
  std::memcpy(flat, t.get("a").data_ptr(), 16);
  std::memcpy(flat + 16, t.get("b").data_ptr(), 64);
}

// Nested, three dtypes, non-tensor values; `rows` sets the size (`wide`
// leaves make it 6 MB, above the listening receive's 4 MiB).
td::TensorDict rich(int seed, int64_t rows = 3, bool wide = false) {
  const int64_t width = wide ? 250'000 : 4;
  td::TensorDict t(std::vector<int64_t>{rows});
  t.set("obs", at::arange(rows * width, at::kFloat).reshape({rows, width}) + seed);
  t.set({"next", "reward"}, at::arange(rows, at::kDouble) * seed);
  t.set({"next", "done"}, (at::arange(rows, at::kLong) + seed).remainder(2).to(at::kBool));
  t.set_non_tensor("name", json("run-" + std::to_string(seed)));
  json tags = json::array();
  for (int64_t k = 0; k < rows; ++k) tags.push_back("tag" + std::to_string(k + seed));
  t.set_non_tensor_stack({"next", "tags"}, tags);
  return t;
}

}  // namespace

TD_SCENARIO(sender_listens_for_the_next_expectation) {
  // Rank 0 captures rank 1's expectation by hand and answers it; after one
  // genuine transfer, rank 1 sends that expectation again by hand while rank
  // 0 waits in the store, outside any transfer: a Gloo send completes only
  // into a posted receive, so it completes only because rank 0 listens. Rank
  // 0's next send then finds it there and answers it.
  const std::chrono::milliseconds patience(20'000);
  if (ctx.rank == 0) {
    at::Tensor expectation = raw_recv(ctx, 64, kCheckedTag);
    const int64_t* e = words(expectation);
    TD_CHECK(e[kEMagic] == kExpectMagic && e[kEKind] == kExpectRecv);
    TD_CHECK(e[kEFlatBytes] == 80 && e[kELeaves] == 2 && e[kEFirstBytes] == 0);
    at::Tensor answer = at::zeros({64 + 80}, at::kByte);
    int64_t* h = words(answer);
    h[kHMagic] = kMagic;
    h[kHKind] = kSendOk;
    h[kHHash] = e[kEHash];
    h[kHFlatBytes] = 80;
    h[kHLeaves] = 2;
    h[kHMode] = e[kEMode];
    pack_small(small(7), answer.data_ptr<uint8_t>() + 64);
    raw_send(ctx, answer, kCheckedTag);
    ctx.store->set("expectation", std::vector<uint8_t>(expectation.data_ptr<uint8_t>(),
                                                       expectation.data_ptr<uint8_t>() + 64));
    td::send(small(1), *ctx.pg, 1);
    ctx.store->wait({"delivered"});
    td::send(small(2), *ctx.pg, 1);  // answers the expectation that came by hand
    td::send(small(3), *ctx.pg, 1);
    return;
  }
  td::TensorDict t = small(0);
  td::recv(t, *ctx.pg, 0);  // answered by hand
  expect_equal(t, small(7));
  td::recv(t, *ctx.pg, 0);
  expect_equal(t, small(1));
  const std::vector<uint8_t> captured = ctx.store->get("expectation");
  at::Tensor expectation = at::empty({64}, at::kByte);
  std::memcpy(expectation.data_ptr(), captured.data(), 64);
  raw_send(ctx, expectation, kCheckedTag, patience);  // lands in rank 0's listening receive
  ctx.store->set("delivered", std::vector<uint8_t>{1});
  at::Tensor answer = raw_recv(ctx, 64 + 80, kCheckedTag);
  const int64_t* h = words(answer);
  TD_CHECK(h[kHMagic] == kMagic && h[kHKind] == kSendOk && h[kHFlatBytes] == 80);
  at::Tensor want = at::empty({80}, at::kByte);
  pack_small(small(2), want.data_ptr<uint8_t>());
  TD_CHECK(answer.narrow(0, 64, 80).equal(want));
  td::recv(t, *ctx.pg, 0);
  expect_equal(t, small(3));
}

TD_SCENARIO(own_messages_on_the_tag_stay_apart) {
  // Transfers send on their own tag slots: a program's raw messages on the
  // tag it gives a transfer never land in the transfer's receives, the
  // listening receive included. Tags outside [0, 2^29) are a ValueError
  // before any message.
  const std::chrono::milliseconds patience(20'000);
  td::TransferOptions bad;
  bad.tag = 1 << 29;
  TD_EXPECT_THROW(td::send(small(0), *ctx.pg, 1 - ctx.rank, bad), td::ValueError);
  bad.tag = -1;
  TD_EXPECT_THROW(td::isend(small(0), *ctx.pg, 1 - ctx.rank, bad), td::ValueError);
  bad.check = td::StructureCheck::Receiver;
  TD_EXPECT_THROW(td::irecv(small(0), *ctx.pg, 1 - ctx.rank, bad), td::ValueError);
  const at::Tensor mine = at::arange(8, at::kLong) + 100 * ctx.rank;
  for (int round = 0; round < 2; ++round) {
    transfer(ctx, 0, small, round + 1);  // rank 0 listens on tag 0's slot
    if (ctx.rank == 1) {
      raw_send(ctx, mine, 0, patience);
      const at::Tensor got = raw_recv(ctx, 64, 0, patience);
      TD_CHECK(at::from_blob(got.data_ptr(), {8}, at::kLong).equal(at::arange(8, at::kLong)));
    } else {
      const at::Tensor got = raw_recv(ctx, 64, 0, patience);
      TD_CHECK(at::from_blob(got.data_ptr(), {8}, at::kLong).equal(at::arange(8, at::kLong) + 100));
      raw_send(ctx, mine, 0, patience);
    }
    transfer(ctx, 1, small, round + 10);
  }
}

TD_SCENARIO(listening_receive_serves_swapped_roles) {
  // After each send the sender listens for its peer's next first message on
  // the tag; when the roles swap, the sender's header (and a one-buffer
  // transfer of up to 4 MiB) lands in that receive. Every kind of transfer,
  // every failure that keeps the group in step, and the 6 MB one-buffer
  // transfer that does not fit (its buffer comes in a message of its own).
  auto make = [](int seed) { return rich(seed); };
  auto wide = [](int seed) { return rich(seed, 6, true); };
  td::TransferOptions per_leaf;
  per_leaf.mode = td::TransferMode::PerLeaf;
  td::TransferOptions flat;
  flat.mode = td::TransferMode::Consolidated;
  const int peer = 1 - ctx.rank;

  transfer(ctx, 0, make, 1);
  transfer(ctx, 0, make, 2);
  transfer(ctx, 1, make, 3);  // lands in rank 0's listening receive
  transfer(ctx, 0, make, 4);  // in rank 1's
  transfer(ctx, 1, make, 5, per_leaf);
  transfer(ctx, 0, wide, 6, flat);  // 6 MB: the header alone, then the buffer
  transfer(ctx, 1, wide, 7, flat);
  transfer(ctx, 0, wide, 8);  // Auto: per leaf above 4 MiB
  auto empty = [](int) { return td::TensorDict(std::vector<int64_t>{}); };
  transfer(ctx, 1, empty, 0);
  transfer(ctx, 0, empty, 0);

  // A structure mismatch in the listening receive: both throw, nothing is
  // written, the group stays in step.
  if (ctx.rank == 1) {
    std::string what = TD_EXPECT_THROW(td::send(rich(9, 2), *ctx.pg, 0), td::StructureError);
    TD_CHECK(what.find("send to rank 0") != std::string::npos);
  } else {
    td::TensorDict t = make(0);
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 1), td::StructureError);
    TD_CHECK(what.find("root batch") != std::string::npos);
    expect_equal(t, make(0));
  }
  transfer(ctx, 1, make, 10);
  transfer(ctx, 0, make, 11);  // rank 0 listens

  // Both ranks receive (rank 0 in its listening receive): both throw.
  {
    td::TensorDict t = make(0);
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, peer), td::ValueError);
    TD_CHECK(what.find("called recv()") != std::string::npos);
    expect_equal(t, make(0));
  }
  transfer(ctx, 0, make, 12);  // rank 0 listens

  // from_remote_init in the listening receive, a recv in it refusing
  // init_remote, a from_remote_init in it refusing send.
  if (ctx.rank == 1) {
    td::init_remote(make(13), *ctx.pg, 0);
  } else {
    expect_equal(td::from_remote_init(*ctx.pg, 1), make(13));
  }
  transfer(ctx, 0, make, 14);  // rank 0 listens
  if (ctx.rank == 1) {
    std::string what = TD_EXPECT_THROW(td::init_remote(make(15), *ctx.pg, 0), td::ValueError);
    TD_CHECK(what.find("called recv()") != std::string::npos);
  } else {
    td::TensorDict t = make(0);
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 1), td::ValueError);
    TD_CHECK(what.find("called init_remote()") != std::string::npos);
  }
  transfer(ctx, 0, make, 16);  // rank 0 listens
  if (ctx.rank == 1) {
    std::string what = TD_EXPECT_THROW(td::send(make(17), *ctx.pg, 0), td::ValueError);
    TD_CHECK(what.find("called from_remote_init()") != std::string::npos);
  } else {
    std::string what = TD_EXPECT_THROW(td::from_remote_init(*ctx.pg, 1), td::ValueError);
    TD_CHECK(what.find("called send()") != std::string::npos);
  }
  transfer(ctx, 1, make, 18);

  // Two tags at once, one each way, then the directions swapped: each rank
  // listens on one tag while it receives on the other.
  td::TransferOptions tag1, tag2;
  tag1.tag = 1;
  tag2.tag = 2;
  for (int round = 0; round < 4; ++round) {
    const bool forward = round < 2;
    const int sends_on = (ctx.rank == 0) == forward ? 1 : 2;
    td::TensorDict got = make(0);
    td::Work out =
        td::isend(make(20 + round * 2 + ctx.rank), *ctx.pg, peer, sends_on == 1 ? tag1 : tag2);
    td::Work in = td::irecv(got, *ctx.pg, peer, sends_on == 1 ? tag2 : tag1);
    out.wait();
    in.wait();
    expect_equal(got, make(20 + round * 2 + peer));
  }
  transfer(ctx, 0, make, 30);
  transfer(ctx, 1, make, 31);
}

namespace {

c10::intrusive_ptr<c10d::ProcessGroup> another_group(tdtest::Ctx& ctx, const std::string& name) {
  auto store = c10::make_intrusive<c10d::PrefixStore>(name, ctx.store);
  return td_test::make_gloo_group(store, ctx.rank, ctx.world, std::chrono::seconds(60));
}

}  // namespace

TD_SCENARIO(listening_receive_goes_with_its_group) {
  // Rank 0 sends in a group and destroys it while it listens; groups made
  // after it start without that receive: their transfers, whichever rank
  // sends first, do not wait on a receive of a dead group. (An entry holds a
  // weak reference to its group, which keeps the group's memory: no later
  // group has its address while the entry is there.)
  for (int g = 0; g < 3; ++g) {
    auto pg = another_group(ctx, "group" + std::to_string(g));
    if (ctx.rank == 0) {
      td::send(small(g), *pg, 1);
    } else {
      td::TensorDict t = small(0);
      td::recv(t, *pg, 0);
      expect_equal(t, small(g));
    }
    pg->barrier()->wait();
  }
  for (int g = 3; g < 6; ++g) {
    auto pg = another_group(ctx, "group" + std::to_string(g));
    td::TransferOptions quick;
    quick.timeout = std::chrono::seconds(20);
    // Rank 1 sends first here: rank 0's recv would land in a stale receive.
    if (ctx.rank == 1) {
      td::send(small(g), *pg, 0, quick);
    } else {
      td::TensorDict t = small(0);
      td::recv(t, *pg, 1, quick);
      expect_equal(t, small(g));
      td::send(small(g + 10), *pg, 1, quick);
    }
    if (ctx.rank == 1) {
      td::TensorDict t = small(0);
      td::recv(t, *pg, 0, quick);
      expect_equal(t, small(g + 10));
    }
    pg->barrier()->wait();
  }
}
