// The scenarios the workers run (see harness.h). Each rank builds what it
// sends and what it expects from seeds, so no data is shared but the wire.

#include "harness.h"
#include "helpers.h"

#include <tensordict/distributed.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/stack.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

#include <chrono>
#include <string>
#include <vector>

namespace td = tensordict;
using nlohmann::json;
using tdtest::expect_equal;

namespace {

const std::vector<at::ScalarType> kDtypes = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kChar,         at::kShort,
    at::kInt,   at::kLong,   at::kByte, at::kBool,     at::kComplexFloat, at::kComplexDouble};

at::Tensor values(std::vector<int64_t> shape, at::ScalarType dtype, int seed) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  at::Tensor t = (at::arange(n, at::kDouble) * (seed + 1) + seed).remainder(97).reshape(shape);
  if (dtype == at::kBool) return t.remainder(2).to(at::kBool);
  return t.to(dtype);
}

// Nested, every dtype, non-tensor entries; `seed` changes every value.
td::TensorDict make_td(int seed, int64_t b = 3) {
  td::TensorDict data(std::vector<int64_t>{b});
  int i = 0;
  for (at::ScalarType dtype : kDtypes) {
    const std::string key = "leaf" + std::to_string(i++);
    if (i % 3 == 0)
      data.set({"nested", "deeper", key}, values({b, 2, 2}, dtype, seed));
    else if (i % 3 == 1)
      data.set({"nested", key}, values({b, 4}, dtype, seed));
    else
      data.set(key, values({b}, dtype, seed));
  }
  data.set_non_tensor("name", json("run-" + std::to_string(seed)));
  json tags = json::array();
  for (int64_t k = 0; k < b; ++k) tags.push_back("tag" + std::to_string(k + seed));
  data.set_non_tensor_stack({"nested", "tags"}, tags);
  return data;
}

// Same tensor leaves (keys, dtypes, values); non-tensors not compared.
void expect_same_tensors(const td::TensorDictBase& got, const td::TensorDictBase& want) {
  TD_CHECK(got.keys(true, true) == want.keys(true, true));
  for (const auto& key : want.keys(true, true))
    if (!got.get(key).equal(want.get(key)))
      throw std::runtime_error("leaf " + key.repr() + " differs");
}

// Rank 0's two isends of make_td(seed1) with t1 and make_td(seed2) with t2,
// received at once (posted in the other order than the sends).
void recv_two_at_once(tdtest::Ctx& ctx, const td::TransferOptions& t1,
                      const td::TransferOptions& t2, int seed1, int seed2) {
  td::TensorDict a = make_td(0), b = make_td(0);
  td::Work w2 = td::irecv(b, *ctx.pg, 0, t2);
  td::Work w1 = td::irecv(a, *ctx.pg, 0, t1);
  w1.wait();
  w2.wait();
  expect_equal(a, make_td(seed1));
  expect_equal(b, make_td(seed2));
}

}  // namespace

TD_SCENARIO(send_recv_every_dtype) {
  if (ctx.rank == 0) {
    td::send(make_td(7), *ctx.pg, 1);
  } else {
    td::TensorDict target = make_td(0);
    const at::Tensor before = target.get({"nested", "leaf0"});
    td::recv(target, *ctx.pg, 0);
    expect_equal(target, make_td(7));
    // In place: the leaf is the same tensor, now holding the data.
    TD_CHECK(target.get({"nested", "leaf0"}).data_ptr() == before.data_ptr());
    TD_CHECK(target.get_non_tensor("name") == json("run-7"));
  }
}

TD_SCENARIO(send_recv_each_mode) {
  for (td::TransferMode mode :
       {td::TransferMode::Consolidated, td::TransferMode::PerLeaf, td::TransferMode::Auto}) {
    td::TransferOptions opts;
    opts.mode = mode;
    const int seed = 10 + static_cast<int>(mode);
    if (ctx.rank == 0) {
      td::send(make_td(seed, 5), *ctx.pg, 1, opts);
    } else {
      td::TensorDict target = make_td(0, 5);
      if (mode == td::TransferMode::PerLeaf) {
        // In-place writes only: allowed on a locked tensordict, which keeps
        // its own non-tensor values.
        target.lock_();
        td::recv(target, *ctx.pg, 0, opts);
        target.unlock_();
        expect_same_tensors(target, make_td(seed, 5));
        TD_CHECK(target.get_non_tensor("name") == json("run-0"));
      } else {
        td::recv(target, *ctx.pg, 0, opts);
        expect_equal(target, make_td(seed, 5));
      }
    }
  }
  // Auto above and below the threshold: a large leaf goes per leaf, and a
  // non-contiguous source leaf is sent by value.
  td::TransferOptions small;
  small.flat_max_bytes = 1024;
  at::Tensor big = values({64, 100}, at::kFloat, 3);
  if (ctx.rank == 0) {
    td::TensorDict src2({{"big", big}, {"view", big.t()}}, {});
    TD_CHECK(!src2.get("view").is_contiguous());
    td::send(src2, *ctx.pg, 1, small);
    td::send(src2, *ctx.pg, 1);
  } else {
    for (int k = 0; k < 2; ++k) {
      td::TensorDict target({{"big", at::zeros({64, 100})}, {"view", at::zeros({100, 64})}}, {});
      td::recv(target, *ctx.pg, 0, k == 0 ? small : td::TransferOptions{});
      TD_CHECK(target.get("big").equal(big));
      TD_CHECK(target.get("view").equal(big.t()));
    }
  }
}

TD_SCENARIO(empty_batch_and_empty_leaves) {
  // Batch [], a zero-row batch, and a tensordict with no leaf at all.
  auto scalar_td = [](int seed) {
    td::TensorDict t({{"x", values({2, 3}, at::kFloat, seed)}, {"s", values({}, at::kLong, seed)}},
                     {});
    t.set({"sub", "y"}, values({4}, at::kInt, seed));
    return t;
  };
  auto zero_rows = [](int seed) {
    return td::TensorDict({{"x", values({0, 3}, at::kFloat, seed)},
                           {"n", td::TensorDict({{"m", values({0}, at::kLong, seed)}}, {0})}},
                          {0});
  };
  auto no_leaves = [] {
    td::TensorDict t(std::vector<int64_t>{2});
    t.create_nested("empty");
    return t;
  };
  if (ctx.rank == 0) {
    td::send(scalar_td(4), *ctx.pg, 1);
    td::send(zero_rows(4), *ctx.pg, 1);
    td::send(no_leaves(), *ctx.pg, 1);
    td::init_remote(no_leaves(), *ctx.pg, 1);
    td::init_remote(scalar_td(5), *ctx.pg, 1);
  } else {
    td::TensorDict a = scalar_td(0);
    td::recv(a, *ctx.pg, 0);
    expect_equal(a, scalar_td(4));
    td::TensorDict b = zero_rows(0);
    td::recv(b, *ctx.pg, 0);
    expect_equal(b, zero_rows(4));
    td::TensorDict c = no_leaves();
    td::recv(c, *ctx.pg, 0);
    TD_CHECK(c.contains("empty"));
    td::TensorDictBase d = td::from_remote_init(*ctx.pg, 0);
    TD_CHECK(d.batch_size().vec() == std::vector<int64_t>{2});
    TD_CHECK(d.contains("empty"));
    expect_equal(td::from_remote_init(*ctx.pg, 0), scalar_td(5));
  }
}

TD_SCENARIO(init_remote_builds_the_tensordict) {
  if (ctx.rank == 0) {
    td::init_remote(make_td(21), *ctx.pg, 1);
    // Already consolidated: its own buffer is sent.
    td::TensorDictBase c = make_td(22).consolidate();
    td::init_remote(c, *ctx.pg, 1);
  } else {
    td::TensorDictBase got = td::from_remote_init(*ctx.pg, 0);
    TD_CHECK(got.type_name() == "TensorDict");
    expect_equal(got, make_td(21));
    // The received tensordict then takes recv() like any other.
    expect_equal(td::from_remote_init(*ctx.pg, 0), make_td(22));
  }
}

TD_SCENARIO(lazy_stack) {
  // Members with the same keys; sent densified (each stacked leaf is one
  // tensor); received into a lazy stack member by member through set_.
  auto members = [](int seed) {
    std::vector<td::TensorDictBase> m;
    for (int k = 0; k < 3; ++k)
      m.push_back(
          td::TensorDict({{"obs", values({2, 5}, at::kFloat, seed + k)},
                          {"n", td::TensorDict({{"r", values({2}, at::kLong, seed + k)}}, {2})}},
                         {2}));
    return m;
  };
  if (ctx.rank == 0) {
    td::send(td::lazy_stack(members(30), 0), *ctx.pg, 1);
    td::send(td::lazy_stack(members(40), 0), *ctx.pg, 1);
    td::init_remote(td::lazy_stack(members(50), 1), *ctx.pg, 1);
  } else {
    // Into a lazy stack: each member receives its slice.
    auto target_members = members(0);
    td::LazyStackedTensorDict target = td::lazy_stack(target_members, 0);
    td::recv(target, *ctx.pg, 0);
    expect_equal(target.to_tensordict(), td::stack(members(30), 0));
    for (int k = 0; k < 3; ++k)
      TD_CHECK(target_members[k].get("obs").equal(values({2, 5}, at::kFloat, 30 + k)));
    // Into a dense tensordict of the stacked shape.
    td::TensorDict dense = td::stack(members(0), 0);
    td::recv(dense, *ctx.pg, 0);
    expect_equal(dense, td::stack(members(40), 0));
    // init_remote keeps the class.
    td::TensorDictBase got = td::from_remote_init(*ctx.pg, 0);
    TD_CHECK(got.type_name() == "LazyStackedTensorDict");
    expect_equal(got.to_tensordict(), td::stack(members(50), 1));
  }
}

TD_SCENARIO(memmap_data) {
  // Each rank has its own memmap directory; the data travels, the files don't.
  const std::string prefix = ctx.dir + "/memmap-rank" + std::to_string(ctx.rank);
  if (ctx.rank == 0) {
    td::TensorDictBase mm = make_td(60).memmap(prefix);
    TD_CHECK(mm.is_memmap());
    td::send(mm, *ctx.pg, 1);
    td::TransferOptions per_leaf;
    per_leaf.mode = td::TransferMode::PerLeaf;
    td::send(mm, *ctx.pg, 1, per_leaf);
  } else {
    // A memmap tensordict is locked: its non-tensor values stay its own.
    td::TensorDictBase mm = make_td(0).memmap(prefix);
    td::recv(mm, *ctx.pg, 0);
    expect_same_tensors(mm, make_td(60));
    expect_same_tensors(td::load_memmap(prefix), make_td(60));
    TD_CHECK(td::load_memmap(prefix).get_non_tensor("name") == json("run-0"));
    mm.zero_();
    td::TransferOptions per_leaf;
    per_leaf.mode = td::TransferMode::PerLeaf;
    td::recv(mm, *ctx.pg, 0, per_leaf);
    expect_same_tensors(td::load_memmap(prefix), make_td(60));
  }
}

TD_SCENARIO(structure_mismatch_both_sides) {
  // 'b' on the sender where the receiver has 'c': both name them, in both
  // modes; then a dtype difference; then the group still works.
  for (td::TransferMode mode : {td::TransferMode::Consolidated, td::TransferMode::PerLeaf}) {
    td::TransferOptions opts;
    opts.mode = mode;
    if (ctx.rank == 0) {
      td::TensorDict src({{"a", at::ones({2})}, {"b", at::ones({2})}}, {2});
      std::string what = TD_EXPECT_THROW(td::send(src, *ctx.pg, 1, opts), td::StructureError);
      TD_CHECK(what.find("here 'b': Tensor(dtype=torch.float32, shape=[2])") != std::string::npos);
      TD_CHECK(what.find("on rank 1 'c'") != std::string::npos);
    } else {
      td::TensorDict dst({{"a", at::zeros({2})}, {"c", at::zeros({2})}}, {2});
      try {
        td::recv(dst, *ctx.pg, 0, opts);
        throw std::runtime_error("recv did not throw");
      } catch (const td::StructureError& e) {
        const std::string what = e.what();
        TD_CHECK(what.find("here 'c'") != std::string::npos);
        TD_CHECK(what.find("on rank 0 'b'") != std::string::npos);
        TD_CHECK(e.key() == td::NestedKey("b"));
      }
      // Nothing was written.
      TD_CHECK(dst.get("a").equal(at::zeros({2})));
    }
  }
  if (ctx.rank == 0) {
    td::TensorDict src({{"n", td::TensorDict({{"x", at::ones({2, 3}, at::kInt)}}, {2})}}, {2});
    std::string what = TD_EXPECT_THROW(td::send(src, *ctx.pg, 1), td::StructureError);
    TD_CHECK(what.find("('n', 'x'): Tensor(dtype=torch.int32") != std::string::npos);
    TD_CHECK(what.find("('n', 'x'): Tensor(dtype=torch.int64") != std::string::npos);
    td::send(make_td(70), *ctx.pg, 1);
  } else {
    td::TensorDict dst({{"n", td::TensorDict({{"x", at::zeros({2, 3}, at::kLong)}}, {2})}}, {2});
    std::string what = TD_EXPECT_THROW(td::recv(dst, *ctx.pg, 0), td::StructureError);
    TD_CHECK(what.find("here ('n', 'x'): Tensor(dtype=torch.int64") != std::string::npos);
    td::TensorDict ok = make_td(0);
    td::recv(ok, *ctx.pg, 0);
    expect_equal(ok, make_td(70));
  }
}

TD_SCENARIO(mismatch_across_sizes_and_modes) {
  // Structures of other flat sizes (one buffer below 4 MiB, one message per
  // leaf above, an empty tensordict), either mode on the receiver: no message
  // overflows its receive, both sides name the difference, and the group
  // stays in step.
  const int64_t big_rows = 3 << 18;  // 6 MiB of float
  auto small = [](int seed) {
    td::TensorDict t({{"x", values({4, 8}, at::kFloat, seed)}}, {4});
    t.set_non_tensor("name", json("run " + std::to_string(seed)));
    return t;
  };
  auto big = [&](int seed) {
    return td::TensorDict({{"x", values({big_rows, 2}, at::kFloat, seed)}}, {big_rows});
  };
  td::TransferOptions per_leaf;
  per_leaf.mode = td::TransferMode::PerLeaf;
  if (ctx.rank == 0) {
    // Small against big (Auto: per leaf, and one buffer): both throw.
    std::string what = TD_EXPECT_THROW(td::send(small(1), *ctx.pg, 1), td::StructureError);
    TD_CHECK(what.find("root batch [4], on rank 1") != std::string::npos);
    TD_CHECK(what.find("root batch [786432]") != std::string::npos);
    TD_EXPECT_THROW(td::send(small(2), *ctx.pg, 1), td::StructureError);
    // Small against an empty tensordict, then big against small.
    TD_EXPECT_THROW(td::send(small(3), *ctx.pg, 1), td::StructureError);
    TD_EXPECT_THROW(td::send(big(4), *ctx.pg, 1), td::StructureError);
    // Matching, the receiver asking for one message per leaf (the sender follows).
    td::send(small(5), *ctx.pg, 1);
    td::send(big(6), *ctx.pg, 1);
    td::send(small(7), *ctx.pg, 1);
  } else {
    td::TensorDict b = big(0);
    std::string what = TD_EXPECT_THROW(td::recv(b, *ctx.pg, 0), td::StructureError);
    TD_CHECK(what.find("root batch [786432], on rank 0") != std::string::npos);
    td::TransferOptions flat;
    flat.mode = td::TransferMode::Consolidated;
    TD_EXPECT_THROW(td::recv(b, *ctx.pg, 0, flat), td::StructureError);
    TD_CHECK(b.get("x").equal(big(0).get("x")));  // nothing written
    td::TensorDict empty(std::vector<int64_t>{});
    TD_EXPECT_THROW(td::recv(empty, *ctx.pg, 0), td::StructureError);
    td::TensorDict s = small(0);
    TD_EXPECT_THROW(td::recv(s, *ctx.pg, 0), td::StructureError);
    td::recv(s, *ctx.pg, 0, per_leaf);
    expect_equal(s, small(5));
    td::recv(b, *ctx.pg, 0);
    expect_equal(b, big(6));
    td::recv(s, *ctx.pg, 0);
    expect_equal(s, small(7));
  }
}

TD_SCENARIO(isend_irecv) {
  // Two transfers at once: distinct tags, one of them per leaf.
  td::TransferOptions t1, t2;
  t1.tag = 1;
  t2.tag = 2;
  t2.mode = td::TransferMode::PerLeaf;
  if (ctx.rank == 0) {
    td::TensorDict a = make_td(80), b = make_td(81);
    td::Work w1 = td::isend(a, *ctx.pg, 1, t1);
    td::Work w2 = td::isend(b, *ctx.pg, 1, t2);
    w2.wait();
    w1.wait();
    TD_CHECK(w1.is_completed() && w2.is_completed());
  } else {
    recv_two_at_once(ctx, t1, t2, 80, 81);
    // An error travels through wait().
    td::TensorDict wrong({{"zzz", at::zeros({3})}}, {3});
    td::Work bad = td::irecv(wrong, *ctx.pg, 0, t1);
    TD_EXPECT_THROW(bad.wait(), td::StructureError);
  }
  if (ctx.rank == 0) {
    TD_EXPECT_THROW(td::isend(make_td(82), *ctx.pg, 1, t1).wait(), td::StructureError);
  }
}

TD_SCENARIO(ring_of_four) {
  // Each rank sends to the next and receives from the previous, concurrently.
  const int next = (ctx.rank + 1) % ctx.world;
  const int prev = (ctx.rank + ctx.world - 1) % ctx.world;
  td::TensorDict mine = make_td(90 + ctx.rank);
  td::TensorDict got = make_td(0);
  td::Work s = td::isend(mine, *ctx.pg, next);
  td::recv(got, *ctx.pg, prev);
  s.wait();
  expect_equal(got, make_td(90 + prev));
}

TD_SCENARIO(broadcast) {
  for (td::TransferMode mode : {td::TransferMode::Consolidated, td::TransferMode::PerLeaf}) {
    td::TransferOptions opts;
    opts.mode = mode;
    td::TensorDict data = make_td(ctx.rank == 1 ? 100 : ctx.rank);
    td::broadcast(data, *ctx.pg, 1, opts);
    expect_equal(data, make_td(100));
  }
}

TD_SCENARIO(broadcast_mismatch) {
  td::TensorDict data({{"a", at::ones({2})}, {"b", at::ones({2})}}, {2});
  if (ctx.rank == 2) data = td::TensorDict({{"a", at::ones({2})}, {"c", at::ones({2})}}, {2});
  std::string what = TD_EXPECT_THROW(td::broadcast(data, *ctx.pg, 0), td::StructureError);
  TD_CHECK(what.find(ctx.rank == 2 ? "on rank 0 'b'" : "on rank 2 'c'") != std::string::npos);
  TD_CHECK(what.find("'b'") != std::string::npos && what.find("'c'") != std::string::npos);
  // Still in step: a good broadcast follows.
  td::TensorDict good = make_td(ctx.rank == 0 ? 110 : 0);
  td::broadcast(good, *ctx.pg, 0);
  expect_equal(good, make_td(110));
}

TD_SCENARIO(all_reduce) {
  td::TensorDict data({{"f", at::full({3, 2}, ctx.rank + 1.0)},
                       {"n", td::TensorDict({{"i", at::full({3}, ctx.rank + 1, at::kLong)},
                                             {"d", at::full({3, 4}, 0.5, at::kDouble)}},
                                            {3})}},
                      {3});
  data.set_non_tensor("note", json("rank" + std::to_string(ctx.rank)));
  td::all_reduce(data, *ctx.pg);
  const double sum = ctx.world * (ctx.world + 1) / 2.0;
  TD_CHECK(data.get("f").equal(at::full({3, 2}, sum)));
  TD_CHECK(data.get({"n", "i"}).equal(at::full({3}, static_cast<int64_t>(sum), at::kLong)));
  TD_CHECK(data.get({"n", "d"}).equal(at::full({3, 4}, 0.5 * ctx.world, at::kDouble)));
  TD_CHECK(data.get_non_tensor("note") == json("rank" + std::to_string(ctx.rank)));
  td::TensorDict m({{"f", at::full({2}, static_cast<double>(ctx.rank))}}, {2});
  td::all_reduce(m, *ctx.pg, c10d::ReduceOp::MAX);
  TD_CHECK(m.get("f").equal(at::full({2}, ctx.world - 1.0)));
  td::TensorDict flags({{"f", at::ones({2}, at::kBool)}}, {2});
  std::string what = TD_EXPECT_THROW(td::all_reduce(flags, *ctx.pg), td::TypeError);
  TD_CHECK(what.find("'f'") != std::string::npos);
}

TD_SCENARIO(all_gather) {
  td::TensorDict data = make_td(120 + ctx.rank);
  td::TensorDict all = td::all_gather(data, *ctx.pg);
  TD_CHECK(all.batch_size().vec() == (std::vector<int64_t>{ctx.world, 3}));
  for (int r = 0; r < ctx.world; ++r) {
    td::TensorDictBase row = all[r];
    for (const auto& key : make_td(0).keys(true, true))
      TD_CHECK(row.get(key).equal(make_td(120 + r).get(key)));
  }
  // The names differ between ranks: one per rank.
  TD_CHECK(all.get_non_tensor("name")[2][0] == json("run-122"));
}

TD_SCENARIO(timeout_and_bad_ranks) {
  td::TensorDict t = make_td(0);
  TD_EXPECT_THROW(td::send(t, *ctx.pg, ctx.rank), td::ValueError);
  TD_EXPECT_THROW(td::recv(t, *ctx.pg, 5), td::ValueError);
  TD_EXPECT_THROW(td::broadcast(t, *ctx.pg, -1), td::ValueError);
  TD_EXPECT_THROW(td::send(td::TensorDictBase(), *ctx.pg, 1 - ctx.rank), td::ValueError);
  // Gloo closes the connection on a timeout: the group is unusable after
  // it, so the ranks meet in the store instead.
  ctx.skip_final_barrier = true;
  if (ctx.rank == 1) {
    td::TransferOptions opts;
    opts.timeout = std::chrono::milliseconds(300);
    const auto start = std::chrono::steady_clock::now();
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, opts), td::TimeoutError);
    TD_CHECK(what.find("recv from rank 0") != std::string::npos);
    TD_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
    ctx.store->set("timed_out", std::vector<uint8_t>{1});
  } else {
    ctx.store->wait({"timed_out"});
  }
}

TD_SCENARIO(protocol_misuse) {
  // init_remote answered by recv, send answered by from_remote_init: both
  // sides throw, and the group stays in step.
  if (ctx.rank == 0) {
    std::string what = TD_EXPECT_THROW(td::init_remote(make_td(130), *ctx.pg, 1), td::ValueError);
    TD_CHECK(what.find("called recv()") != std::string::npos);
    what = TD_EXPECT_THROW(td::send(make_td(131), *ctx.pg, 1), td::ValueError);
    TD_CHECK(what.find("called from_remote_init()") != std::string::npos);
    td::send(make_td(132), *ctx.pg, 1);
  } else {
    td::TensorDict t = make_td(0);
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0), td::ValueError);
    TD_CHECK(what.find("called init_remote()") != std::string::npos);
    what = TD_EXPECT_THROW(td::from_remote_init(*ctx.pg, 0), td::ValueError);
    TD_CHECK(what.find("called send()") != std::string::npos);
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, make_td(132));
  }
}

TD_SCENARIO(both_ranks_receive) {
  // Both ranks call recv (or one recv and one from_remote_init): each finds
  // the other's expectation where it waits for the sender's header, both throw
  // ValueError naming what the other called, nothing is written, and the
  // group stays in step. Empty tensordicts too (their data receive is the
  // header alone: the expectation must fit in it).
  const int peer = 1 - ctx.rank;
  for (int seed : {0, -1}) {
    td::TensorDict t = seed == 0 ? make_td(0) : td::TensorDict(std::vector<int64_t>{});
    const std::string before = t.repr();
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, peer), td::ValueError);
    TD_CHECK(what.find("called recv()") != std::string::npos);
    TD_CHECK(t.repr() == before);
    if (seed == 0) expect_equal(t, make_td(0));
  }
  td::TensorDict t = make_td(0);
  if (ctx.rank == 0) {
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, peer), td::ValueError);
    TD_CHECK(what.find("called from_remote_init()") != std::string::npos);
    td::send(make_td(154), *ctx.pg, peer);
  } else {
    std::string what = TD_EXPECT_THROW(td::from_remote_init(*ctx.pg, peer), td::ValueError);
    TD_CHECK(what.find("called recv()") != std::string::npos);
    td::recv(t, *ctx.pg, peer);
    expect_equal(t, make_td(154));
  }
}

TD_SCENARIO(consolidated_buffer_reuse) {
  // One-buffer transfers reuse their message buffers (a pool keyed by size):
  // every transfer must still carry its own values, whatever the previous
  // one left in the buffer.
  td::TransferOptions flat;
  flat.mode = td::TransferMode::Consolidated;
  td::release_transfer_buffers();
  TD_CHECK(td::transfer_buffer_bytes() == 0);
  // Same size, other structure: 'a' [4, 6] float, or 'b' [6, 4] int32.
  auto renamed = [](int seed) {
    return td::TensorDict(
        {{"b", values({6, 4}, at::kInt, seed)}, {"n", values({2, 2}, at::kDouble, seed)}}, {});
  };
  auto original = [](int seed) {
    return td::TensorDict(
        {{"a", values({4, 6}, at::kFloat, seed)}, {"n", values({2, 2}, at::kDouble, seed)}}, {});
  };
  // Two transfers of the same size at once (distinct tags); no reuse.
  td::TransferOptions t1 = flat, t2 = flat, fresh = flat;
  t1.tag = 5;
  t2.tag = 6;
  fresh.reuse_buffers = false;
  if (ctx.rank == 0) {
    // Two consecutive sends of different values.
    td::send(make_td(140), *ctx.pg, 1, flat);
    TD_CHECK(td::transfer_buffer_bytes() > 0);
    td::send(make_td(141), *ctx.pg, 1, flat);
    // The structure changes between sends (same flat size).
    td::send(original(142), *ctx.pg, 1, flat);
    td::send(renamed(143), *ctx.pg, 1, flat);
    // The receiver's structure differs: both throw, the next transfer works.
    TD_EXPECT_THROW(td::send(original(144), *ctx.pg, 1, flat), td::StructureError);
    td::send(original(145), *ctx.pg, 1, flat);
    // isend, wait, modify in place, isend again: the second carries the change.
    td::TensorDict src = make_td(146);
    td::isend(src, *ctx.pg, 1, flat).wait();
    src.get({"nested", "leaf0"}).fill_(7);
    src.set_non_tensor("name", json("changed"));
    td::isend(src, *ctx.pg, 1, flat).wait();
    // Two transfers of the same size at once (distinct tags): distinct buffers.
    td::TensorDict a = make_td(147), b = make_td(148);
    td::Work w1 = td::isend(a, *ctx.pg, 1, t1);
    td::Work w2 = td::isend(b, *ctx.pg, 1, t2);
    w1.wait();
    w2.wait();
    // Without reuse nothing is kept.
    td::release_transfer_buffers();
    td::send(make_td(149), *ctx.pg, 1, fresh);
    TD_CHECK(td::transfer_buffer_bytes() == 0);
  } else {
    td::TensorDict target = make_td(0);
    const at::Tensor leaf = target.get({"nested", "leaf0"});
    td::recv(target, *ctx.pg, 0, flat);
    expect_equal(target, make_td(140));
    TD_CHECK(td::transfer_buffer_bytes() > 0);
    td::recv(target, *ctx.pg, 0, flat);
    expect_equal(target, make_td(141));
    TD_CHECK(target.get({"nested", "leaf0"}).data_ptr() == leaf.data_ptr());
    td::TensorDict o = original(0);
    td::recv(o, *ctx.pg, 0, flat);
    expect_equal(o, original(142));
    td::TensorDict r = renamed(0);
    td::recv(r, *ctx.pg, 0, flat);
    expect_equal(r, renamed(143));
    td::TensorDict wrong = renamed(0);
    TD_EXPECT_THROW(td::recv(wrong, *ctx.pg, 0, flat), td::StructureError);
    TD_CHECK(wrong.get("b").equal(renamed(0).get("b")));  // nothing written
    td::recv(o, *ctx.pg, 0, flat);
    expect_equal(o, original(145));
    td::irecv(target, *ctx.pg, 0, flat).wait();
    expect_equal(target, make_td(146));
    td::irecv(target, *ctx.pg, 0, flat).wait();
    TD_CHECK(target.get({"nested", "leaf0"}).eq(7).all().item<bool>());
    TD_CHECK(target.get_non_tensor("name") == json("changed"));
    recv_two_at_once(ctx, t1, t2, 147, 148);
    td::release_transfer_buffers();
    TD_CHECK(td::transfer_buffer_bytes() == 0);
    td::recv(target, *ctx.pg, 0, fresh);
    expect_equal(target, make_td(149));
    TD_CHECK(td::transfer_buffer_bytes() == 0);
  }
}

TD_SCENARIO(reduce_to_one_rank) {
  auto data = [&] {
    return td::TensorDict(
        {{"f", at::full({3, 2}, ctx.rank + 1.0)},
         {"n", td::TensorDict({{"i", at::full({3}, ctx.rank + 1, at::kLong)}}, {3})}},
        {3});
  };
  td::TensorDict d = data();
  td::reduce(d, *ctx.pg, /*dst=*/1);
  if (ctx.rank == 1) {
    const double sum = ctx.world * (ctx.world + 1) / 2.0;
    TD_CHECK(d.get("f").equal(at::full({3, 2}, sum)));
    TD_CHECK(d.get({"n", "i"}).equal(at::full({3}, static_cast<int64_t>(sum), at::kLong)));
  } else {
    expect_equal(d, data());  // the other ranks keep their own
  }
  td::TensorDict m({{"f", at::full({2}, static_cast<double>(ctx.rank))}}, {2});
  td::reduce(m, *ctx.pg, 0, c10d::ReduceOp::MAX);
  TD_CHECK(m.get("f").equal(at::full({2}, ctx.rank == 0 ? ctx.world - 1.0 : ctx.rank)));
  TD_EXPECT_THROW(td::reduce(m, *ctx.pg, ctx.world), td::ValueError);
  // A structure mismatch is named on every rank.
  td::TensorDict odd({{ctx.rank == 2 ? "g" : "f", at::ones({2})}}, {2});
  TD_EXPECT_THROW(td::reduce(odd, *ctx.pg, 0), td::StructureError);
}

TD_SCENARIO(gather_and_stack_onto_dst) {
  // Rank 1 receives ranks 0 and 2 in its rows 0 and 1 (its own is not part of it).
  if (ctx.rank == 1) {
    td::TensorDict all = td::stack({make_td(0), make_td(0)}, 0);
    td::gather_and_stack(all, *ctx.pg, 1);
    for (const auto& key : make_td(0).keys(true, true)) {
      TD_CHECK(all.get(key)[0].equal(make_td(150).get(key)));
      TD_CHECK(all.get(key)[1].equal(make_td(152).get(key)));
    }
    // Rows for world_size - 1 ranks, or a ShapeError before any message.
    td::TensorDict wrong = make_td(0);
    TD_EXPECT_THROW(td::gather_and_stack(wrong, *ctx.pg, 1), td::ShapeError);
  } else {
    td::gather_and_stack(make_td(150 + ctx.rank), *ctx.pg, 1);
  }
}

TD_SCENARIO(receiver_checks) {
  // StructureCheck::Receiver: the sender sends at once. Every dtype, nested,
  // non-tensors, one buffer and per leaf (forced, and above the 4 MiB of one
  // eager message), isend/irecv; then mismatches: the receiver names the
  // first difference, writes nothing, takes the sender's messages (which
  // returns normally), and the group stays in step for both kinds of check.
  td::TransferOptions eager;
  eager.check = td::StructureCheck::Receiver;
  td::TransferOptions eager_per_leaf = eager;
  eager_per_leaf.mode = td::TransferMode::PerLeaf;
  td::TransferOptions eager_flat = eager;
  eager_flat.mode = td::TransferMode::Consolidated;
  const int64_t big_rows = 3 << 18;  // 6 MiB of float: per leaf even when Consolidated
  auto big = [&](int seed) {
    td::TensorDict t({{"x", values({big_rows, 2}, at::kFloat, seed)},
                      {"y", values({big_rows}, at::kLong, seed)}},
                     {big_rows});
    t.set_non_tensor("name", json("big " + std::to_string(seed)));
    return t;
  };
  auto renamed = [](int seed) {
    td::TensorDict t({{"a", values({3}, at::kFloat, seed)}, {"c", values({3}, at::kFloat, seed)}},
                     {3});
    t.set_non_tensor("name", json("renamed"));
    return t;
  };
  if (ctx.rank == 0) {
    td::send(make_td(200), *ctx.pg, 1, eager);
    td::send(make_td(201), *ctx.pg, 1, eager_per_leaf);
    td::send(big(202), *ctx.pg, 1, eager_flat);
    td::isend(make_td(203), *ctx.pg, 1, eager).wait();
    td::TensorDict empty(std::vector<int64_t>{2});
    td::send(empty, *ctx.pg, 1, eager);
    // Mismatches: the sender is not told.
    td::send(make_td(204), *ctx.pg, 1, eager);
    td::send(big(205), *ctx.pg, 1, eager);
    td::send(renamed(206), *ctx.pg, 1, eager_per_leaf);
    // In step: an eager and a checked transfer follow.
    td::send(make_td(207), *ctx.pg, 1, eager);
    td::send(make_td(208), *ctx.pg, 1);
    TD_EXPECT_THROW(td::send(make_td(0), *ctx.pg, 1,
                             [] {
                               td::TransferOptions o;
                               o.check = td::StructureCheck::Receiver;
                               o.tag = 1 << 30;
                               return o;
                             }()),
                    td::ValueError);
  } else {
    td::TensorDict t = make_td(0);
    const at::Tensor leaf = t.get({"nested", "leaf0"});
    td::recv(t, *ctx.pg, 0, eager);
    expect_equal(t, make_td(200));
    TD_CHECK(t.get({"nested", "leaf0"}).data_ptr() == leaf.data_ptr());
    td::recv(t, *ctx.pg, 0, eager);  // the sender's mode decides
    expect_equal(t, make_td(201));
    td::TensorDict b = big(0);
    td::recv(b, *ctx.pg, 0, eager);
    expect_equal(b, big(202));
    td::irecv(t, *ctx.pg, 0, eager).wait();
    expect_equal(t, make_td(203));
    td::TensorDict empty(std::vector<int64_t>{2});
    td::recv(empty, *ctx.pg, 0, eager);
    TD_CHECK(empty.keys().empty());

    // make_td against renamed: the first differing entry is named.
    td::TensorDict r = renamed(0);
    std::string what = TD_EXPECT_THROW(td::recv(r, *ctx.pg, 0, eager), td::StructureError);
    TD_CHECK(what.find("recv from rank 0: the tensordicts differ; first differing entry: here") !=
             std::string::npos);
    TD_CHECK(what.find("on rank 0") != std::string::npos);
    expect_equal(r, renamed(0));  // nothing written, non-tensors included
    // Big (per leaf, with non-tensor JSON) against small: its leaves are taken.
    std::string big_what = TD_EXPECT_THROW(td::recv(r, *ctx.pg, 0, eager), td::StructureError);
    TD_CHECK(big_what.find("root batch [3], on rank 0") != std::string::npos);
    TD_CHECK(big_what.find("root batch [786432]") != std::string::npos);
    // 'c' against 'x' at the same position, per leaf.
    td::TensorDict other({{"a", at::zeros({3})}, {"x", at::zeros({3})}}, {3});
    try {
      td::recv(other, *ctx.pg, 0, eager);
      throw std::runtime_error("recv did not throw");
    } catch (const td::StructureError& e) {
      TD_CHECK(e.key() == td::NestedKey("c"));
      TD_CHECK(std::string(e.what()).find("here 'x': Tensor(dtype=torch.float32, shape=[3]), on "
                                          "rank 0 'c': Tensor(dtype=torch.float32, shape=[3])") !=
               std::string::npos);
    }
    TD_CHECK(other.get("x").equal(at::zeros({3})));
    td::recv(t, *ctx.pg, 0, eager);
    expect_equal(t, make_td(207));
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, make_td(208));
  }
}

namespace {
// Rank 0 sends with `sender`, rank 1 receives with `receiver`, their checks
// differing: no message lands in the other protocol's receive (Gloo would
// abort the process), both fail with a tensordict error naming their
// operation, nothing is written. The first rank to time out closes the pair
// (Gloo does), so the other gets TimeoutError or, when it is later,
// ConnectionError; the ranks then meet in the store, since the group is
// unusable.
void mixed_checks_fail_on_both_sides(tdtest::Ctx& ctx, td::StructureCheck sender,
                                     td::StructureCheck receiver) {
  td::TransferOptions opts;
  opts.timeout = std::chrono::milliseconds(1500);
  td::TensorDict t = make_td(0);
  ctx.skip_final_barrier = true;
  if (ctx.rank == 0) {
    opts.check = sender;
    std::string what = TD_EXPECT_THROW(td::send(make_td(1), *ctx.pg, 1, opts), td::StorageError);
    TD_CHECK(what.find("send to rank 1") != std::string::npos);
  } else {
    opts.check = receiver;
    std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, opts), td::StorageError);
    TD_CHECK(what.find("recv from rank 0") != std::string::npos);
  }
  expect_equal(t, make_td(0));
  ctx.store->set("failed" + std::to_string(ctx.rank), std::vector<uint8_t>{1});
  ctx.store->wait({"failed0", "failed1"});
}
}  // namespace

TD_SCENARIO(receiver_checks_against_both_sides) {
  // The eager sender's message goes to its own tag slot, never into the
  // checked receiver's smaller receive.
  mixed_checks_fail_on_both_sides(ctx, td::StructureCheck::Receiver, td::StructureCheck::BothSides);
}

TD_SCENARIO(both_sides_against_receiver_checks) {
  // The other way round: the sender waits for an expectation, the receiver
  // for the sender's first message on its own tag slot.
  mixed_checks_fail_on_both_sides(ctx, td::StructureCheck::BothSides, td::StructureCheck::Receiver);
}

TD_SCENARIO(auto_threshold_is_2_mib) {
  // Auto sends one buffer up to TransferOptions::flat_max_bytes (2 MiB by
  // default) and one message per leaf above: seen in the buffer pool, which
  // keeps the one-buffer message (64-byte header + data) on both sides and
  // nothing for a per-leaf transfer.
  TD_CHECK(td::TransferOptions{}.flat_max_bytes == int64_t{2} << 20);
  auto data = [](int64_t floats, int seed) {
    return td::TensorDict({{"x", values({floats}, at::kFloat, seed)}}, {});
  };
  const int64_t at_limit = (int64_t{2} << 20) / 4;  // 2 MiB of float32
  for (int64_t floats : {at_limit, at_limit + 4}) {
    td::release_transfer_buffers();
    const bool flat = floats == at_limit;
    if (ctx.rank == 0) {
      td::send(data(floats, 1), *ctx.pg, 1);
    } else {
      td::TensorDict t = data(floats, 0);
      td::recv(t, *ctx.pg, 0);
      expect_equal(t, data(floats, 1));
    }
    TD_CHECK(td::transfer_buffer_bytes() == (flat ? 64 + floats * 4 : 0));
  }
}
