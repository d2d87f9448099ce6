#pragma once
/// @file storage/redis.h
/// The Redis storage (Python's TensorDictStore): a tensordict whose leaves
/// live on a Redis-compatible server (Redis, Dragonfly, KeyDB) in Python's
/// key layout, so C++ and Python processes share one store. Link the
/// component `tensordict::redis` (CMake option TENSORDICT_WITH_REDIS).
///
/// @code
///   namespace td = tensordict;
///   td::storage::Redis server{.host = "127.0.0.1", .port = 6379};
///   auto buffer = td::from_schema(schema, {100'000}, server);  // no tensor bytes sent
///   buffer.index_put_({i}, transition);      // one round trip, all leaves
///   auto batch = buffer.index({idx});         // one round trip, all leaves
///   // another process:
///   auto same = td::redis::from_store({.host = "127.0.0.1", .td_id = td::redis::td_id(buffer)});
/// @endcode
///
/// Thread safety: one connection per store object, guarded by a mutex (calls
/// on one store are serialized). Open a second store (from_store) per thread
/// for parallel I/O; it is cheap (one connection, one round trip).
/// See docs/redis.md.

#include <tensordict/schema.h>
#include <tensordict/tensor_dict_base.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tensordict {
namespace storage {

/// Where a Redis store lives and how to reach it (Python's TensorDictStore
/// arguments). String options of from_schema(..., "redis", {...}) have the
/// same names.
struct Redis {
  std::string host = "localhost";
  int port = 6379;
  /// A Unix socket path; replaces host and port when set.
  std::string unix_socket;
  int db = 0;
  /// AUTH: password alone (requirepass) or username + password (ACL).
  std::string username;
  std::string password;
  /// Seconds; 0 means no limit.
  double connect_timeout = 5.0;
  /// Seconds a command may take; 0 means no limit. TimeoutError beyond it.
  double timeout = 0.0;
  /// Keys are "<prefix>:{<td_id>}:<suffix>".
  std::string prefix = "tensordict";
  /// The store's id; empty: a new random UUID (Python's uuid4()).
  std::string td_id;
  /// The pipeline of one operation (row reads and writes of all leaves,
  /// whole-leaf writes, allocation) is sent as MULTI/EXEC: atomic for other
  /// clients, still one round trip. false: a plain pipeline (a concurrent
  /// reader may then see a row written in some leaves and not yet in others).
  bool transaction = true;
};

}  // namespace storage

/// A new store on the server described by `storage`, holding a zero-filled
/// leaf per schema entry: the leaves are allocated with SETRANGE in one
/// pipeline, and no tensor data is sent.
TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const storage::Redis& storage);

namespace redis {

/// An empty store of the given batch size (writes __batch_size__ and
/// __device__). Only CPU (or no) device.
TensorDictBase create(const storage::Redis& storage, std::vector<int64_t> batch_size,
                      std::optional<c10::Device> device = std::nullopt);
/// Uploads `td` (tensors, non-tensors, nested levels) into a new store
/// (Python's TensorDictStore.from_tensordict / td.to_store()).
TensorDictBase from_tensordict(const TensorDictBase& td, const storage::Redis& storage = {});
/// Re-attaches to the store `storage.td_id` written by any process (C++ or
/// Python). KeyError naming the td_id when the server has no such store.
TensorDictBase from_store(const storage::Redis& storage);

/// The storage::Redis that from_schema(..., "redis", options) connects with
/// (the same option names and checks), e.g. to attach other processes with
/// from_store(). SchemaError for an unknown option or a value of the wrong type.
storage::Redis options_from(const StorageOptions& options);

/// True when `td` is (a nested level of) a Redis store.
bool is_store(const TensorDictBase& td);
/// The store's td_id (TypeError when `td` is not a store).
std::string td_id(const TensorDictBase& td);
/// The server key of a suffix: "<prefix>:{<td_id>}:<suffix>".
std::string server_key(const TensorDictBase& td, const std::string& suffix);
/// Deletes every key of the store from the server (Python's clear_redis(),
/// which keeps __tensorclass__). The handle then holds no entries.
void clear(const TensorDictBase& td);
/// Round trips this store object has made to its server (every level of it
/// shares one connection): a user operation on rows adds one.
std::int64_t round_trips(const TensorDictBase& td);
/// Closes the connection; the next call reconnects.
void close(const TensorDictBase& td);

}  // namespace redis
}  // namespace tensordict
