#pragma once
// Redis storages for the rb suites (test_replay_buffer.cpp, the [env, time]
// suites through env_storages.h): a store on a redis-server this test process
// starts, a sharded store on it, and both on a 3-master Redis Cluster this
// process starts. Each is started once per process, when a test of its kind
// first runs, and dies with the process; no test touches a server it did not
// start. Only "memory" when the Redis component is not built.
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/schema.h>
#include <tensordict/storage/shared.h>

#include <unistd.h>

#ifdef TENSORDICT_RB_TEST_REDIS
#include <tensordict/storage/redis.h>

#include "support/redis_cluster.h"
#include "support/redis_server.h"
#endif

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::rb::test {

#ifdef TENSORDICT_RB_TEST_REDIS

/// The Redis storage kinds: single server, sharded, cluster, sharded over a cluster.
inline std::vector<std::string> redis_storage_kinds() {
  return {"redis", "redis_sharded", "redis_cluster", "redis_cluster_sharded"};
}

inline bool is_redis_kind(const std::string& kind) { return kind.rfind("redis", 0) == 0; }

inline const td_test::RedisServer& redis_server() {
  static const auto server = std::make_unique<td_test::RedisServer>();
  return *server;
}

inline const td_test::RedisCluster& redis_cluster() {
  static const auto cluster = std::make_unique<td_test::RedisCluster>();
  return *cluster;
}

/// Where a store of `kind` lives, as from_schema(..., "redis", options) and
/// the lazy ReplayBuffer(capacity, sampler, "redis", options) take it.
/// Sharded stores take blocks of 2 rows along dim 0, so that the suites'
/// small storages span several blocks (on the cluster, blocks on every master).
inline StorageOptions redis_storage_options(const std::string& kind) {
  StorageOptions options;
  if (kind.find("cluster") != std::string::npos) {
    options = {{"host", "127.0.0.1"}, {"port", redis_cluster().port(0)}, {"cluster", true}};
  } else {
    options = {{"unix_socket", redis_server().socket()}};
  }
  if (kind.find("sharded") != std::string::npos) {
    options["sharded"] = true;
    options["block_rows"] = 2;
  }
  return options;
}

inline storage::Redis redis_options(const std::string& kind) {
  return redis::options_from(redis_storage_options(kind));
}

/// A new zero-filled store of `schema`'s entries of batch size `shape`.
inline TensorDictBase make_redis_storage(const std::string& kind, const Schema& schema,
                                         const std::vector<int64_t>& shape) {
  return from_schema(schema, shape, redis_options(kind));
}

#endif

/// The storages the lazy ReplayBuffer constructor makes at the first write,
/// for the suites that run their hand-computed cases over every storage:
/// memory, memmap, shared memory, HDF5 (when built) and the Redis kinds.
inline std::vector<std::string> lazy_storage_kinds() {
  std::vector<std::string> kinds{"memory", "memmap", "shared"};
#ifdef TENSORDICT_RB_TEST_HDF5
  kinds.emplace_back("h5");
#endif
#ifdef TENSORDICT_RB_TEST_REDIS
  for (std::string& kind : redis_storage_kinds()) kinds.push_back(std::move(kind));
#endif
  return kinds;
}

/// The scratch directory of this test process for memmap and HDF5 storages,
/// removed when the process exits.
inline const std::filesystem::path& lazy_scratch_dir() {
  struct Scratch {
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("td_rb_lazy_" + std::to_string(::getpid()));
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

/// The storage name and options that the lazy ReplayBuffer constructor takes
/// for a kind of lazy_storage_kinds(); memmap and HDF5 storages get a new
/// place each call.
inline std::pair<std::string, StorageOptions> lazy_storage(const std::string& kind) {
#ifdef TENSORDICT_RB_TEST_REDIS
  if (is_redis_kind(kind)) return {"redis", redis_storage_options(kind)};
#endif
  static int made = 0;
  const std::filesystem::path place = lazy_scratch_dir() / (kind + std::to_string(made++));
  if (kind == "memmap") return {kind, {{"prefix", place.string()}}};
  if (kind == "h5") {
    std::filesystem::create_directories(lazy_scratch_dir());
    return {kind, {{"filename", place.string() + ".h5"}}};
  }
  return {kind, {}};
}

/// Unlinks the shared-memory segment of `buffer`'s storage, if it has one, when
/// the test ends (a segment outlives the process otherwise).
class ReleaseSharedStorage {
 public:
  explicit ReleaseSharedStorage(const ReplayBuffer& buffer) : buffer_(buffer) {}
  ~ReleaseSharedStorage() {
    const TensorDictBase storage = buffer_.storage();
    if (storage.defined() && storage.is_shared()) unlink_shared(storage.shared_name());
  }
  ReleaseSharedStorage(const ReleaseSharedStorage&) = delete;
  ReleaseSharedStorage& operator=(const ReleaseSharedStorage&) = delete;

 private:
  const ReplayBuffer& buffer_;
};

}  // namespace tensordict::rb::test
