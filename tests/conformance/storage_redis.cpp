// The Redis storage (tensordict::redis) in the suites: a store on a
// redis-server this test process starts (one per process, on a free port and
// a Unix socket in its own temporary directory), reopened through
// redis::from_store as another process would; a sharded store on that server;
// and both on a 3-master Redis Cluster this process starts (once, when a test
// of those cases first runs).
#include "conformance.h"
#include "support/redis_cluster.h"
#include "support/redis_server.h"

#include <tensordict/lazy_stack.h>
#include <tensordict/storage/redis.h>
#include <tensordict/storage/redis_lazy_stack.h>

#include <memory>

namespace conformance {
namespace {

const td_test::RedisServer& server() {
  static const auto s = std::make_unique<td_test::RedisServer>();
  return *s;
}

const td_test::RedisCluster& cluster() {
  static const auto c = std::make_unique<td_test::RedisCluster>();
  return *c;
}

/// Where a handle of a store goes: handle 0 makes the store, handle 1 is the
/// second handle of StorageCase::reopen.
using Where = td::storage::Redis (*)(std::size_t handle, std::string td_id);

td::storage::Redis on_server(std::size_t /*handle*/, std::string td_id) {
  td::storage::Redis r;
  r.unix_socket = server().socket();
  r.td_id = std::move(td_id);
  return r;
}

/// Each handle reads the slot map through its own master.
td::storage::Redis on_cluster(std::size_t handle, std::string td_id) {
  td::storage::Redis r;
  r.host = "127.0.0.1";
  r.port = cluster().port(handle);
  r.cluster = true;
  r.td_id = std::move(td_id);
  return r;
}

/// A store made where `where` says, reopened from its td_id alone (a sharded
/// store is found by its manifest). Sharded stores are split into blocks of
/// 2 rows, so that the suites' indices span several blocks (on a cluster,
/// blocks on every master).
StorageCase redis_case(std::string id, std::string label, int rank, Where where, bool sharded) {
  return {.id = std::move(id),
          .label = std::move(label),
          .rank = rank,
          .make =
              [where, sharded](const td::TensorDictBase& data, Scratch&) {
                td::storage::Redis r = where(0, {});
                r.sharded = sharded;
                if (sharded) r.block_rows = 2;
                return td::redis::from_tensordict(data, r);
              },
          .reopen =
              [where](const td::TensorDictBase& made) {
                return td::redis::from_store(where(1, td::redis::td_id(made)));
              },
          .index_is_live = false};
}

}  // namespace

StorageCase redis_store() {
  return redis_case("redis", "`TensorDictStore` (Redis)", 80, on_server, false);
}
StorageCase redis_sharded() {
  return redis_case("redis_sharded", "`TensorDictStore` (Redis, sharded)", 90, on_server, true);
}
/// Python's LazyStackedTensorDictStore: members of batch [] (the rows), one
/// store each, on the single server. It stores tensors only (as Python's).
StorageCase redis_lazy_stack() {
  auto upload = [](std::vector<td::TensorDictBase> members) -> td::TensorDictBase {
    return td::LazyStackedTensorDictStore::from_lazy_stack(td::lazy_stack(std::move(members)),
                                                           on_server(0, {}));
  };
  return {
      .id = "redis_lazy_stack",
      .label = "`LazyStackedTensorDictStore` (Redis)",
      .rank = 120,
      .make =
          [upload](const td::TensorDictBase& data, Scratch&) {
            std::vector<td::TensorDictBase> members;
            for (const auto& row : data.unbind(0)) members.push_back(row.clone());
            return upload(std::move(members));
          },
      .reopen =
          [](const td::TensorDictBase& made) {
            return td::redis::from_store(on_server(1, td::redis::td_id(made)));
          },
      .index_is_live = false,
      .make_ragged =
          [upload](Scratch&) {
            std::vector<td::TensorDictBase> members;
            for (int64_t i = 0; i < kN; ++i)
              members.push_back(td::TensorDict({{"a", torch::full({i + 1}, static_cast<double>(i))},
                                                {"b", torch::full({5}, i, torch::kLong)}},
                                               {}));
            return upload(std::move(members));
          },
      // Gap (docs/redis.md): rows of a ragged store are written member by
      // member, not by one index_put_ across members of different shapes.
      .ragged_writes = false,
      .non_tensors = false};
}

StorageCase redis_cluster() {
  return redis_case("redis_cluster", "`TensorDictStore` (Redis Cluster)", 100, on_cluster, false);
}
StorageCase redis_cluster_sharded() {
  return redis_case("redis_cluster_sharded", "`TensorDictStore` (Redis Cluster, sharded)", 110,
                    on_cluster, true);
}

// The StorageContract instantiation is in storage_contract.cpp (its fixture
// is local to that file); the behaviour suite takes every case from
// all_storages() (storages.cpp).
INSTANTIATE_TEST_SUITE_P(Redis, Conformance, ::testing::Values(redis_store()), storage_name);
INSTANTIATE_TEST_SUITE_P(RedisSharded, Conformance, ::testing::Values(redis_sharded()),
                         storage_name);
INSTANTIATE_TEST_SUITE_P(RedisCluster, Conformance, ::testing::Values(redis_cluster()),
                         storage_name);
INSTANTIATE_TEST_SUITE_P(RedisClusterSharded, Conformance,
                         ::testing::Values(redis_cluster_sharded()), storage_name);

}  // namespace conformance
