// The storage contract suite: what the core asks of a storage per user
// operation, counted. Every storage of the conformance suite is wrapped in a
// CountingNode (tests/support/counting_node.h), which the core must treat as
// a storage outside the process; the tests pin the contract of node.h:
//
//   - one batched call per operation: td[i] over 10 leaves is one read_leaves
//     call reading one row of each leaf; td[i] = row is one write_leaves_ call;
//     update_, to_tensordict, clone, set_at_, get_at, allocate_schema likewise;
//   - no per-leaf storage calls from the core (read_at, write_at_, write_);
//   - metadata only: set_batch_size, keys, repr, is_empty, empty(true),
//     get_item_shape and the shape checks of set_ / update_ / index_put_ read
//     zero bytes;
//   - storage errors reach the caller with the key path and their own type.
//
// A storage joins this suite as it joins the conformance suite: one line,
//   INSTANTIATE_TEST_SUITE_P(H5, StorageContract, ::testing::Values(h5()),
//                            conformance::storage_name);
#include "conformance.h"
#include "support/counting_node.h"

#include <tensordict/schema.h>

namespace conformance {
namespace {

using td_test::CountingNode;
using td_test::StorageCounters;
using namespace torch::indexing;

constexpr int64_t kRows = 16;
// One row of every leaf, in bytes (see contract_data).
constexpr int64_t kRowBytes = 8 * 4 + 4 * 4 + 4 + 1 + 8 + 2 * 4 + 3 + (8 * 4 + 4 + 1);
constexpr int64_t kLeaves = 10;

/// 10 tensor leaves over two levels, every dtype family, and a non-tensor.
/// Row r holds values derived from r (checked after reads and writes).
td::TensorDict contract_data(double offset = 0) {
  auto r = torch::arange(kRows, torch::kDouble) + offset;
  td::TensorDict next({{"obs", (r.unsqueeze(1) * 10 + torch::arange(8)).to(torch::kFloat)},
                       {"reward", r.to(torch::kFloat)},
                       {"done", r.remainder(2).to(torch::kBool)}},
                      {kRows});
  td::TensorDict data(
      {{"obs", (r.unsqueeze(1) * 100 + torch::arange(8)).to(torch::kFloat)},
       {"action", r.unsqueeze(1).expand({kRows, 4}).to(torch::kFloat).contiguous()},
       {"reward", r.to(torch::kFloat)},
       {"done", r.remainder(3).eq(0)},
       {"step", r.to(torch::kLong)},
       {"id", r.unsqueeze(1).expand({kRows, 2}).to(torch::kInt).contiguous()},
       {"pixels", r.unsqueeze(1).expand({kRows, 3}).remainder(256).to(torch::kByte).contiguous()},
       {"next", next}},
      {kRows});
  return data;
}

class StorageContract : public ::testing::TestWithParam<StorageCase> {
 protected:
  void SetUp() override {
    made_ = GetParam().make(contract_data(), scratch_);
    counters_ = std::make_shared<StorageCounters>();
    store_ = CountingNode::wrap(made_, counters_);
  }
  const StorageCounters& c() const { return *counters_; }
  void reset() { counters_->reset(); }
  /// Nothing was read from or written to the storage's data.
  void expect_metadata_only(const char* what) {
    EXPECT_EQ(c().bytes_read, 0) << what;
    EXPECT_EQ(c().bytes_written, 0) << what;
    EXPECT_EQ(c().data_calls(), 0) << what;
  }

  Scratch scratch_;
  td::TensorDictBase made_;
  std::shared_ptr<StorageCounters> counters_;
  td::TensorDictBase store_;
};

TEST_P(StorageContract, RowReadIsOneBatchedCall) {
  td::TensorDictBase row = store_[3];
  EXPECT_EQ(c().read_leaves_calls, 1);
  EXPECT_EQ(c().leaves_read, kLeaves);
  EXPECT_EQ(c().bytes_read, kRowBytes);
  EXPECT_EQ(c().per_leaf_calls, 0);
  EXPECT_EQ(c().whole_leaf_reads, 0);
  EXPECT_TRUE(row.equal(contract_data()[3]));
}

TEST_P(StorageContract, SliceStepRead) {
  td::TensorDictBase rows = store_.index({Slice(2, 11, 3)});
  EXPECT_EQ(c().read_leaves_calls, 1);
  EXPECT_EQ(c().bytes_read, 3 * kRowBytes);
  EXPECT_EQ(c().per_leaf_calls + c().whole_leaf_reads, 0);
  EXPECT_TRUE(rows.equal(contract_data().index({Slice(2, 11, 3)})));
}

TEST_P(StorageContract, UnsortedRepeatedRowsRead) {
  auto idx = torch::tensor({9, 2, 9, -1, 0}, torch::kLong);
  td::TensorDictBase rows = store_.index({idx});
  EXPECT_EQ(c().read_leaves_calls, 1);
  EXPECT_EQ(c().bytes_read, 5 * kRowBytes);
  EXPECT_EQ(c().per_leaf_calls + c().whole_leaf_reads, 0);
  EXPECT_TRUE(rows.equal(contract_data().index({idx})));
}

TEST_P(StorageContract, MaskRead) {
  auto mask = torch::arange(kRows).remainder(4).eq(1);
  td::TensorDictBase rows = store_.index({mask});
  EXPECT_EQ(c().read_leaves_calls, 1);
  EXPECT_EQ(c().bytes_read, 4 * kRowBytes);
  EXPECT_TRUE(rows.equal(contract_data().index({mask})));
}

// The storage receives the index resolved: ranges for ints and slices (ints
// wrapped and marked), row numbers for long indices and masks (negatives
// wrapped, order and repeats kept, flags computed), All for whole leaves.
TEST_P(StorageContract, StoragesReceiveResolvedSelections) {
  using Kind = td::RowSelection::Kind;
  const auto& s = c().last;
  (void)store_[-2];
  EXPECT_EQ(s.kind, Kind::Box);
  ASSERT_EQ(s.ranges.size(), 1u);
  EXPECT_EQ(s.ranges[0].start, kRows - 2);
  EXPECT_EQ(s.ranges[0].count(), 1);
  EXPECT_TRUE(s.ranges[0].drop);
  EXPECT_TRUE(s.batch.empty());
  (void)store_.index({Slice(2, 100, 3)});
  EXPECT_EQ(s.kind, Kind::Box);
  ASSERT_EQ(s.ranges.size(), 1u);
  EXPECT_EQ(s.ranges[0].start, 2);
  EXPECT_EQ(s.ranges[0].stop, kRows);  // clamped
  EXPECT_EQ(s.ranges[0].step, 3);
  EXPECT_FALSE(s.ranges[0].drop);
  EXPECT_EQ(s.batch, (std::vector<int64_t>{5}));
  (void)store_.index({torch::tensor({9, 2, 9, -1, 0}, torch::kLong)});
  EXPECT_EQ(s.kind, Kind::Rows);
  EXPECT_TRUE(s.rows.equal(torch::tensor(std::vector<int64_t>{9, 2, 9, kRows - 1, 0})));
  EXPECT_FALSE(s.rows_sorted);
  EXPECT_FALSE(s.rows_unique);
  (void)store_.index({torch::arange(kRows).remainder(4).eq(1)});
  EXPECT_EQ(s.kind, Kind::Rows);
  EXPECT_TRUE(s.rows.equal(torch::tensor({1, 5, 9, 13}, torch::kLong)));
  EXPECT_TRUE(s.rows_sorted);
  EXPECT_TRUE(s.rows_unique);
  (void)store_.index({None, Slice(0, 2)});
  EXPECT_EQ(s.kind, Kind::General);
  EXPECT_EQ(s.batch, (std::vector<int64_t>{1, 2}));
  store_.update_(contract_data());
  EXPECT_EQ(s.kind, Kind::All);
  EXPECT_EQ(s.batch, (std::vector<int64_t>{kRows}));
  EXPECT_THROW(store_.index({torch::tensor({kRows}, torch::kLong)}), td::IndexError);
}

TEST_P(StorageContract, RowWriteIsOneBatchedCall) {
  td::TensorDict row = contract_data(1000)[0];
  store_.index_put_({5}, row);
  EXPECT_EQ(c().write_leaves_calls, 1);
  EXPECT_EQ(c().leaves_written, kLeaves);
  EXPECT_EQ(c().bytes_written, kRowBytes);
  EXPECT_EQ(c().bytes_read, 0);
  EXPECT_EQ(c().per_leaf_calls + c().whole_leaf_reads, 0);
  reset();
  EXPECT_TRUE(made_[5].equal(row));
  EXPECT_TRUE(made_[4].equal(contract_data()[4]));
}

TEST_P(StorageContract, RowsWriteAtLongIndexIsOneBatchedCall) {
  auto idx = torch::tensor({7, 1, 12}, torch::kLong);
  td::TensorDict rows = contract_data(500).index({Slice(0, 3)});
  store_.update_at_(rows, {idx});
  EXPECT_EQ(c().write_leaves_calls, 1);
  EXPECT_EQ(c().bytes_written, 3 * kRowBytes);
  EXPECT_EQ(c().bytes_read, 0);
  EXPECT_TRUE(made_.index({idx}).equal(rows));
}

TEST_P(StorageContract, TensorBroadcastWriteIsOneBatchedCall) {
  store_.index_put_({Slice(0, 2)}, torch::tensor(1));
  EXPECT_EQ(c().write_leaves_calls, 1);
  EXPECT_EQ(c().leaves_written, kLeaves);
  EXPECT_EQ(c().bytes_read, 0);
  EXPECT_EQ(made_.get("step")[1].item<int64_t>(), 1);
  EXPECT_EQ(made_.get({"next", "reward"})[0].item<float>(), 1.0f);
}

TEST_P(StorageContract, WholeUpdateIsOneBatchedCall) {
  td::TensorDict other = contract_data(7);
  store_.update_(other);
  EXPECT_EQ(c().write_leaves_calls, 1);
  EXPECT_EQ(c().leaves_written, kLeaves);
  EXPECT_EQ(c().bytes_written, kRows * kRowBytes);
  EXPECT_EQ(c().bytes_read, 0);
  EXPECT_EQ(c().per_leaf_calls + c().whole_leaf_reads, 0);
  EXPECT_TRUE(made_.equal(other));
}

TEST_P(StorageContract, SetInPlaceChecksShapeWithoutReading) {
  EXPECT_THROW(store_.set_("obs", torch::zeros({kRows, 7})), td::ShapeError);
  expect_metadata_only("refused set_");
  store_.set_({"next", "reward"}, torch::full({kRows}, 2.0));
  EXPECT_EQ(c().write_leaves_calls, 1);
  EXPECT_EQ(c().bytes_read, 0);
  EXPECT_EQ(made_.get({"next", "reward"}).sum().item<float>(), 2.0f * kRows);
}

TEST_P(StorageContract, RefusedWritesTouchNothing) {
  td::TensorDict bad({{"obs", torch::zeros({3})}}, {});  // wrong feature shape
  EXPECT_THROW(store_.index_put_({0}, bad), td::ShapeError);
  td::TensorDict bad_second = contract_data();
  bad_second.set("step", torch::zeros({kRows, 2}, torch::kLong));  // second key wrong
  EXPECT_THROW(store_.update_(bad_second), td::ShapeError);
  expect_metadata_only("refused writes");
  EXPECT_TRUE(made_.equal(contract_data()));
}

TEST_P(StorageContract, ReadAllIsOneBatchedCall) {
  td::TensorDict dense = store_.to_tensordict();
  EXPECT_EQ(c().read_leaves_calls, 1);
  EXPECT_EQ(c().leaves_read, kLeaves);
  EXPECT_EQ(c().bytes_read, kRows * kRowBytes);
  EXPECT_EQ(c().per_leaf_calls + c().whole_leaf_reads, 0);
  EXPECT_TRUE(dense.equal(contract_data()));
  reset();
  td::TensorDictBase copy = store_.clone();
  EXPECT_EQ(c().read_leaves_calls, 1);
  EXPECT_EQ(c().whole_leaf_reads, 0);
  copy.set_("step", torch::zeros({kRows}, torch::kLong));  // a clone shares nothing
  EXPECT_TRUE(made_.equal(contract_data()));
}

TEST_P(StorageContract, SingleLeafRowsAreOneCall) {
  at::Tensor obs = store_.get_at({"next", "obs"}, {Slice(0, 2)});
  EXPECT_EQ(c().read_leaves_calls, 1);
  EXPECT_EQ(c().bytes_read, 2 * 8 * 4);
  EXPECT_TRUE(obs.equal(contract_data().get({"next", "obs"}).index({Slice(0, 2)})));
  reset();
  store_.set_at_("step", torch::tensor(-4), {Slice(0, 3)});
  EXPECT_EQ(c().write_leaves_calls, 1);
  EXPECT_EQ(c().bytes_written, 3 * 8);
  EXPECT_EQ(c().bytes_read, 0);
  EXPECT_EQ(made_.get("step")[2].item<int64_t>(), -4);
}

TEST_P(StorageContract, MetadataOperationsReadNothing) {
  (void)store_.keys(/*include_nested=*/true, /*leaves_only=*/true);
  (void)store_.repr();
  (void)store_.is_empty();
  (void)store_.empty(/*recurse=*/true);
  EXPECT_EQ(store_.get_item_shape({"next", "obs"}), (std::vector<int64_t>{kRows, 8}));
  EXPECT_EQ(store_.entry_kind({"next", "done"}), td::EntryKind::Tensor);
  expect_metadata_only("keys, repr, is_empty, empty, get_item_shape, entry_kind");
  EXPECT_GT(c().metadata_calls, 0);
}

TEST_P(StorageContract, SetBatchSizeReadsNothing) {
  EXPECT_THROW(store_.set_batch_size({kRows, 3}), td::ShapeError);
  expect_metadata_only("refused set_batch_size");
  if (made_.node().is_lazy_stack()) {
    // A lazy stack's batch size follows its members: refused, still unread.
    EXPECT_THROW(store_.set_batch_size({kRows}), td::Error);
  } else {
    store_.set_batch_size({kRows});
  }
  expect_metadata_only("set_batch_size");
}

TEST_P(StorageContract, StorageErrorsNameTheKeyAndKeepTheirType) {
  counters_->fail_next_write = [] { throw td::ConnectionError("server went away"); };
  try {
    store_.set_({"next", "obs"}, torch::zeros({kRows, 8}));
    FAIL() << "no error";
  } catch (const td::ConnectionError& e) {
    EXPECT_EQ(e.key_path(), "('next', 'obs')");
    EXPECT_NE(std::string(e.what()).find("('next', 'obs')"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("server went away"), std::string::npos) << e.what();
    try {
      std::rethrow_if_nested(e);
      FAIL() << "the storage's error is not nested";
    } catch (const td::ConnectionError& inner) {
      EXPECT_STREQ(inner.what(), "server went away");
    }
  }
  EXPECT_TRUE(made_.equal(contract_data()));
}

}  // namespace

// Pre-allocation: from_schema's allocate_schema creates every leaf with one
// create_leaves call (on an empty in-memory tensordict seen as a storage).
TEST(StorageContractAllocate, SchemaIsOneCreateCall) {
  auto counters = std::make_shared<StorageCounters>();
  td::TensorDictBase store =
      CountingNode::wrap(td::TensorDict(std::vector<int64_t>{kRows}), counters);
  td::Schema schema{{"obs", {{84, 84, 3}, torch::kByte}},
                    {"action", {{4}, torch::kFloat}},
                    {td::NestedKey({"next", "obs"}), {{84, 84, 3}, torch::kByte}},
                    {td::NestedKey({"next", "reward"}), {{}, torch::kFloat}}};
  td::allocate_schema(store, schema);
  EXPECT_EQ(counters->create_leaves_calls, 1);
  EXPECT_EQ(counters->per_leaf_calls, 0);
  EXPECT_EQ(store.get_item_shape({"next", "obs"}), (std::vector<int64_t>{kRows, 84, 84, 3}));
  EXPECT_EQ(store.keys(true, true).size(), 4u);
}

// Every storage of the conformance suite (storages.cpp) honours the contract.
INSTANTIATE_TEST_SUITE_P(InMemory, StorageContract, ::testing::Values(in_memory()), storage_name);
INSTANTIATE_TEST_SUITE_P(LazyStacked, StorageContract, ::testing::Values(lazy_stacked()),
                         storage_name);
INSTANTIATE_TEST_SUITE_P(Memmap, StorageContract, ::testing::Values(memmap()), storage_name);
INSTANTIATE_TEST_SUITE_P(SharedMemory, StorageContract, ::testing::Values(shared_memory()),
                         storage_name);
#ifdef TD_CONFORMANCE_HDF5
// StorageContract is local to this file: the component storages that are
// built instantiate it here (their StorageCase is in storage_<name>.cpp).
INSTANTIATE_TEST_SUITE_P(H5, StorageContract, ::testing::Values(h5()), storage_name);
#endif
#ifdef TENSORDICT_TEST_REDIS
// storage_redis.cpp (built with tensordict::redis).
INSTANTIATE_TEST_SUITE_P(Redis, StorageContract, ::testing::Values(redis_store()), storage_name);
INSTANTIATE_TEST_SUITE_P(RedisSharded, StorageContract, ::testing::Values(redis_sharded()),
                         storage_name);
INSTANTIATE_TEST_SUITE_P(RedisCluster, StorageContract, ::testing::Values(redis_cluster()),
                         storage_name);
INSTANTIATE_TEST_SUITE_P(RedisClusterSharded, StorageContract,
                         ::testing::Values(redis_cluster_sharded()), storage_name);
#endif

}  // namespace conformance
