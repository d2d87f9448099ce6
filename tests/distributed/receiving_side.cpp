// The receiving side against tensordicts it cannot write and peers that
// misbehave: expanded leaves (every receive path), a peer announcing absurd
// counts or taking its messages slowly, a peer that dies in the middle of a
// transfer.

#include "harness.h"
#include "helpers.h"
#include "wire.h"

#include <tensordict/distributed.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace td = tensordict;
using tdtest::expect_equal;
using namespace tdtest::wire;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

namespace {

// small() with "a" expanded: 4 rows sharing one element's memory.
td::TensorDict expanded() {
  td::TensorDict t = tdtest::small(0);
  t.set("a", at::full({1}, 5.0f).expand({4}));
  return t;
}

// `stmt` throws ValueError naming the transfer and the expanded leaf 'a',
// and leaves `t` as it was.
template <class F>
void refuses_expanded(td::TensorDict& t, const std::string& transfer, F stmt) {
  const td::TensorDictBase before = t.clone();
  const std::string what = TD_EXPECT_THROW(stmt(), td::ValueError);
  if (what.find(transfer) == std::string::npos || what.find("'a'") == std::string::npos ||
      what.find("expanded") == std::string::npos)
    throw std::runtime_error("unexpected error: " + what);
  expect_equal(t, before);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TD_SCENARIO(expanded_leaf_refuses_to_receive) {
  // recv, irecv, both protocols and both wires: a ValueError naming the key,
  // before anything is written. Checked on both sides, the receiver refuses
  // before its first message (rank 0 does not send); with
  // StructureCheck::Receiver the sender has sent already, so the receiver
  // takes its messages first and the group stays in step.
  td::TransferOptions eager;
  eager.check = td::StructureCheck::Receiver;
  td::TransferOptions eager_per_leaf = eager;
  eager_per_leaf.mode = td::TransferMode::PerLeaf;
  td::TransferOptions python;
  python.wire = td::Wire::Python;
  if (ctx.rank == 1) {
    td::TensorDict t = expanded();
    refuses_expanded(t, "recv from rank 0", [&] { td::recv(t, *ctx.pg, 0); });
    refuses_expanded(t, "recv from rank 0", [&] { td::irecv(t, *ctx.pg, 0).wait(); });
    refuses_expanded(t, "recv from rank 0 (Python's wire)",
                     [&] { td::recv(t, *ctx.pg, 0, python); });
    refuses_expanded(t, "recv from rank 0", [&] { td::recv(t, *ctx.pg, 0, eager); });
    refuses_expanded(t, "recv from rank 0", [&] { td::recv(t, *ctx.pg, 0, eager_per_leaf); });
    // In step: genuine transfers of both protocols.
    td::TensorDict fine = tdtest::small(0);
    td::recv(fine, *ctx.pg, 0, eager);
    expect_equal(fine, tdtest::small(7));
    td::recv(fine, *ctx.pg, 0);
    expect_equal(fine, tdtest::small(8));
    return;
  }
  td::send(tdtest::small(1), *ctx.pg, 1, eager);
  td::send(tdtest::small(2), *ctx.pg, 1, eager_per_leaf);
  td::send(tdtest::small(7), *ctx.pg, 1, eager);
  td::send(tdtest::small(8), *ctx.pg, 1);
}

TD_SCENARIO(expanded_leaf_in_collectives) {
  // broadcast, all_reduce, reduce: the rank whose leaf is expanded refuses in
  // the structure check every rank takes part in, so every rank throws
  // ValueError before any data moves; a rank that does not receive (the
  // root of a broadcast, the other ranks of a reduce) may hold one.
  td::TensorDict t = ctx.rank == 1 ? expanded() : tdtest::small(ctx.rank);
  const td::TensorDictBase before = t.clone();
  auto all_refuse = [&](auto stmt, const std::string& transfer) {
    const std::string what = TD_EXPECT_THROW(stmt(), td::ValueError);
    if (what.find(transfer) == std::string::npos ||
        (ctx.rank == 1 ? what.find("'a'") : what.find("rank 1 cannot receive")) ==
            std::string::npos)
      throw std::runtime_error("unexpected error: " + what);
    expect_equal(t, before);
  };
  all_refuse([&] { td::broadcast(t, *ctx.pg, 0); }, "broadcast from rank 0");
  all_refuse([&] { td::all_reduce(t, *ctx.pg, c10d::ReduceOp::SUM); }, "all_reduce");
  all_refuse([&] { td::reduce(t, *ctx.pg, 1, c10d::ReduceOp::SUM); }, "reduce to rank 1");
  // Rank 1 sends, rank 0 receives: fine.
  td::broadcast(t, *ctx.pg, 1);
  td::reduce(t, *ctx.pg, 0, c10d::ReduceOp::SUM);
  if (ctx.rank == 0) {
    td::TensorDict want = expanded();
    want.set("a", want.get("a").contiguous() * 2);
    want.set("b", want.get("b") * 2);
    expect_equal(t, want);
  }
}

TD_SCENARIO(absurd_leaf_receive_count) {
  // A peer whose expectation announces 2^24 leaf receives posted ahead (a
  // recv() posts one per leaf of its own structure): the sender refuses at
  // once with a FormatError naming the rank, instead of queueing 16 million
  // messages before its first wait.
  if (ctx.rank == 1) {
    at::Tensor e = at::zeros({8}, at::kLong);
    int64_t* x = words(e);
    x[kEMagic] = kExpectMagic;
    x[kEKind] = kExpectRecv;
    x[kEHash] = 12345;  // not rank 0's structure
    x[kEMode] = kModeConsolidated;
    x[kELeaves] = int64_t{1} << 24;
    x[kEPosted] = int64_t{1} << 24;
    raw_send(ctx, e, kCheckedTag);
    const at::Tensor header = raw_recv(ctx, 64, kCheckedTag);
    TD_CHECK(words(header)[kHKind] == kSendMismatch);
    // Then a count within the structure's leaves but past the limit.
    x[kELeaves] = int64_t{1} << 22;
    x[kEPosted] = int64_t{1} << 22;
    raw_send(ctx, e, kCheckedTag);
    raw_recv(ctx, 64, kCheckedTag);
    td::TensorDict t = tdtest::small(0);
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, tdtest::small(3));
    return;
  }
  td::TransferOptions opts;
  opts.timeout = seconds(30);
  for (const char* count : {"16777216", "4194304"}) {
    const auto start = Clock::now();
    const std::string what =
        TD_EXPECT_THROW(td::send(tdtest::small(1), *ctx.pg, 1, opts), td::FormatError);
    if (what.find("send to rank 1") == std::string::npos ||
        what.find("rank 1 announces " + std::string(count) + " leaf receives") == std::string::npos)
      throw std::runtime_error("unexpected error: " + what);
    TD_CHECK(seconds_since(start) < 10);
  }
  td::send(tdtest::small(3), *ctx.pg, 1);
}

TD_SCENARIO(slow_peer_filling_leaf_receives) {
  // A peer announcing 1,000 leaf receives (within its structure's) that takes
  // one empty message every 2 s and keeps the connection open: the sender's
  // TimeoutError comes within its timeout for all of them (3 s), not after
  // 1,000 x 2 s.
  if (ctx.rank == 1) {
    ctx.skip_final_barrier = true;  // the timeout closes the group
    at::Tensor e = at::zeros({8}, at::kLong);
    int64_t* x = words(e);
    x[kEMagic] = kExpectMagic;
    x[kEKind] = kExpectRecv;
    x[kEHash] = 12345;
    x[kEMode] = kModePerLeaf;
    x[kELeaves] = 1000;
    x[kEPosted] = 1000;
    raw_send(ctx, e, kCheckedTag);
    raw_recv(ctx, 64, kCheckedTag);
    try {
      for (int i = 0; i < 6; ++i) {
        std::this_thread::sleep_for(seconds(2));
        raw_recv(ctx, 0, kCheckedTag);
      }
    } catch (const std::exception&) {  // the sender closed the group: expected
    }
    return;
  }
  ctx.skip_final_barrier = true;
  td::TransferOptions opts;
  opts.timeout = seconds(3);
  const auto start = Clock::now();
  const std::string what =
      TD_EXPECT_THROW(td::send(tdtest::small(1), *ctx.pg, 1, opts), td::TimeoutError);
  TD_CHECK(what.find("send to rank 1") != std::string::npos);
  const double took = seconds_since(start);
  if (took > 8)
    throw std::runtime_error("the TimeoutError came after " + std::to_string(took) + " s");
}

namespace {

// Rank 0 answers a per-leaf recv of {"a": 4 floats, "b": 32M floats, "c": 4
// floats} by hand: the header, "a", then it starts "b" (128 MB) and dies a
// few milliseconds later, in the middle of it.
constexpr int64_t kBigLeaf = int64_t{32} << 20;

td::TensorDict three_leaves() {
  return td::TensorDict(
      {{"a", at::zeros({4})}, {"b", at::zeros({4, kBigLeaf / 4})}, {"c", at::zeros({4})}}, {4});
}

[[noreturn]] void die_in_the_middle(tdtest::Ctx& ctx) {
  const at::Tensor e = raw_recv(ctx, 64, kCheckedTag);
  TD_CHECK(words(e)[kEMode] == kModePerLeaf && words(e)[kEPosted] == 3);
  raw_send(ctx, ok_header(e, kModePerLeaf), kCheckedTag);
  raw_send(ctx, at::full({4}, 9.0f), kCheckedTag);  // "a"
  std::vector<at::Tensor> b{at::full({kBigLeaf}, 9.0f)};
  auto sending = ctx.pg->send(b, 1, kCheckedTag);
  std::this_thread::sleep_for(milliseconds(5));
  std::_Exit(0);
}

}  // namespace

TD_SCENARIO(peer_dies_during_staged_recv) {
  // TransferOptions::stage_leaves: the receiver notices the closed connection
  // at once (long before its 60 s timeout: it waits for the last leaf's
  // receive first, which Gloo fails as soon as the connection closes), and
  // its tensordict is as it was: the leaves were received into a staging
  // buffer, to be copied in only once all had arrived.
  ctx.skip_final_barrier = true;
  if (ctx.rank == 0) die_in_the_middle(ctx);
  td::TransferOptions opts;
  opts.mode = td::TransferMode::PerLeaf;
  opts.timeout = seconds(60);
  opts.stage_leaves = true;
  td::TensorDict t = three_leaves();
  const auto start = Clock::now();
  const std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, opts), td::ConnectionError);
  const double took = seconds_since(start);
  if (what.find("recv from rank 0") == std::string::npos || took > 20)
    throw std::runtime_error("after " + std::to_string(took) + " s: " + what);
  TD_CHECK(t.get("a").count_nonzero().item<int64_t>() == 0);
  TD_CHECK(t.get("b").count_nonzero().item<int64_t>() == 0);
}

TD_SCENARIO(peer_dies_during_in_place_recv) {
  // The default receives in-memory leaves in place: the error says which
  // leaves were written before the failure ("a"), which may be partly
  // written, and that the others are as they were ("c").
  ctx.skip_final_barrier = true;
  if (ctx.rank == 0) die_in_the_middle(ctx);
  td::TransferOptions opts;
  opts.mode = td::TransferMode::PerLeaf;
  opts.timeout = seconds(5);  // "b" is read into when the connection closes: its timeout
  td::TensorDict t = three_leaves();
  const std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, opts), td::StorageError);
  if (what.find("recv from rank 0") == std::string::npos ||
      what.find("written before the failure: 'a'") == std::string::npos ||
      what.find("the other leaves are as they were") == std::string::npos)
    throw std::runtime_error("unexpected error: " + what);
  TD_CHECK(t.get("a").equal(at::full({4}, 9.0f)));
  TD_CHECK(t.get("c").count_nonzero().item<int64_t>() == 0);
}

TD_SCENARIO(oversized_raw_messages) {
  // 8 MiB raw messages from rank 0 on a transfer's tag, where rank 1 expects
  // a smaller one: the first message of a recv (checked on both sides, and
  // eager), the JSON after a header, the expectation a send waits for, the
  // listening receive a sender leaves posted. Gloo would abort the process on
  // a message longer than its receive; every receive here has room behind it,
  // so each is a FormatError naming rank 0, the tensordict stays as it was,
  // and the group goes on working.
  td::TransferOptions eager;
  eager.check = td::StructureCheck::Receiver;
  const std::string longer = "rank 0 sent a message longer than";
  if (ctx.rank == 1) {
    auto refused = [&](td::TensorDict& t, const td::TransferOptions& opts,
                       const std::string& needle) {
      const td::TensorDictBase before = t.clone();
      const std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, opts), td::FormatError);
      if (what.find("recv from rank 0: " + longer + " " + needle) == std::string::npos)
        throw std::runtime_error("unexpected error: " + what);
      expect_equal(t, before);
    };
    td::TensorDict t = tdtest::small(0);
    refused(t, {}, "the first message's receive");
    refused(t, eager, "the first message's receive");
    td::TensorDict with_json = tdtest::small(0);
    with_json.set_non_tensor("name", nlohmann::json("x"));
    refused(with_json, {}, "a message of JSON");
    const std::string what =
        TD_EXPECT_THROW(td::send(tdtest::small(5), *ctx.pg, 0), td::FormatError);
    if (what.find("send to rank 0: rank 0 sent a message longer than") == std::string::npos)
      throw std::runtime_error("unexpected error: " + what);
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, tdtest::small(6));
    td::send(tdtest::small(7), *ctx.pg, 0);  // then listens for rank 0's next first message
    refused(t, {}, "the first message's receive");
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, tdtest::small(8));
    return;
  }
  const at::Tensor big = at::ones({int64_t{8} << 20}, at::kByte);
  raw_recv(ctx, 64, kCheckedTag);  // the expectation
  raw_send(ctx, big, kCheckedTag);
  raw_send(ctx, big, kEagerTag);
  {
    const at::Tensor e = raw_recv(ctx, 64, kCheckedTag);
    raw_send(ctx, ok_header(e, kModeConsolidated, 10, words(e)[kEFlatBytes]), kCheckedTag);
    raw_send(ctx, big, kCheckedTag);  // where 10 bytes of JSON are expected
  }
  raw_send(ctx, big, kCheckedTag);  // where rank 1's send expects an expectation
  td::send(tdtest::small(6), *ctx.pg, 1);
  td::TensorDict t = tdtest::small(0);
  td::recv(t, *ctx.pg, 1);
  expect_equal(t, tdtest::small(7));
  raw_send(ctx, big, kCheckedTag);  // into rank 1's listening receive
  raw_recv(ctx, 64, kCheckedTag);   // rank 1's expectation, sent before it looked
  td::send(tdtest::small(8), *ctx.pg, 1);
}
