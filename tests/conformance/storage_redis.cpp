// The Redis storage (tensordict::redis) in both suites: a store on a
// redis-server this test process starts (one per process, on a free port and
// a Unix socket in its own temporary directory), reopened through
// redis::from_store as another process would.
#include "conformance.h"
#include "support/redis_server.h"

#include <tensordict/storage/redis.h>

#include <memory>

namespace conformance {
namespace {

const td_test::RedisServer& server() {
  static const auto s = std::make_unique<td_test::RedisServer>();
  return *s;
}

td::storage::Redis on_server(std::string td_id = {}) {
  td::storage::Redis r;
  r.unix_socket = server().socket();
  r.td_id = std::move(td_id);
  return r;
}

}  // namespace

StorageCase redis_store() {
  return {.id = "redis",
          .label = "`TensorDictStore` (Redis)",
          .rank = 80,
          .make = [](const td::TensorDictBase& data,
                     Scratch&) { return td::redis::from_tensordict(data, on_server()); },
          .reopen =
              [](const td::TensorDictBase& made) {
                return td::redis::from_store(on_server(td::redis::td_id(made)));
              },
          .index_is_live = false};
}

// The StorageContract instantiation is in storage_contract.cpp (its fixture
// is local to that file).
INSTANTIATE_TEST_SUITE_P(Redis, Conformance, ::testing::Values(redis_store()), storage_name);

}  // namespace conformance
