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
///   auto same = td::TensorDictStore::from_store({.host = "127.0.0.1", .td_id = buffer.td_id()});
/// @endcode
///
/// Thread safety: one connection per store object, guarded by a mutex (calls
/// on one store are serialized). Open a second store (from_store) per thread
/// for parallel I/O; it is cheap (one connection, one round trip).
/// See docs/redis.md.

#include <tensordict/errors.h>
#include <tensordict/non_tensor.h>
#include <tensordict/schema.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
  /// Bounded by default, so that a server that stops answering (stopped,
  /// hung, a listener that is not Redis) is an error, not a hang.
  double timeout = 60.0;
  /// The largest reply value (one bulk string) read from a server; 0 means
  /// no limit. A peer announcing more is a FormatError once this much has
  /// arrived, not unbounded memory. Redis stores no string over its
  /// proto-max-bulk-len (512 MiB by default): raise this with it.
  std::int64_t max_reply_bytes = std::int64_t{1} << 30;
  /// Keys are "<prefix>:{<td_id>}:<suffix>".
  std::string prefix = "tensordict";
  /// The store's id; empty: a new random UUID (Python's uuid4()).
  std::string td_id;
  /// The pipeline of one operation (row reads and writes of all leaves,
  /// whole-leaf writes, allocation) is sent as MULTI/EXEC: atomic for other
  /// clients, still one round trip. false: a plain pipeline (a concurrent
  /// reader may then see a row written in some leaves and not yet in others).
  bool transaction = true;
  /// A Redis Cluster: host:port (or `seeds`) is a node to read the slot map
  /// from; each command goes to the node owning its key's slot, MOVED and
  /// ASK redirections are followed, one connection per node. A store's keys
  /// share the hash tag {td_id}, so one store lives on one node.
  bool cluster = false;
  /// Cluster nodes ("host:port") tried in order to read the slot map; not
  /// empty implies `cluster`. Empty: host:port.
  std::vector<std::string> seeds;
  /// A sharded store: one logical buffer split along batch dim 0 into blocks
  /// of `block_rows` rows, each block a complete store in Python's layout
  /// under its own td_id ("<td_id>-<k>", placed on the cluster's masters in
  /// turn), listed by the manifest key "<prefix>:{<td_id>}:__shards__". For a
  /// buffer bigger than one node or than one Redis string (a leaf). See
  /// docs/redis.md "Sharding".
  bool sharded = false;
  /// Rows per block of a sharded store; 0: the most that keeps every leaf's
  /// block string within the server's proto-max-bulk-len, and on a cluster at
  /// most an equal share per master.
  std::int64_t block_rows = 0;
};

}  // namespace storage

/// A tensordict on a Redis server (Python's TensorDictStore): the handle
/// type of the Redis storage, with the store's own operations as members.
/// Every Redis store is one, sharded or not, and every nested level of one
/// (`store.get_tensordict("next").is<TensorDictStore>()`); a lazy-stack store
/// is the subclass LazyStackedTensorDictStore (tensordict/storage/
/// redis_lazy_stack.h). Python's LazyStackedTensorDictStore is not a
/// TensorDictStore; here it is, so that the store operations (td_id, close,
/// round_trips, ...) are members of every Redis handle.
class TensorDictStore : public TensorDictBase {
 public:
  /// An empty store of the given batch size (writes __batch_size__ and
  /// __device__). Only the CPU device (or none).
  static TensorDictStore create(const storage::Redis& storage, std::vector<int64_t> batch_size,
                                std::optional<c10::Device> device = std::nullopt);
  /// Uploads `td` (tensors, non-tensors, nested levels) into a new store
  /// (Python's TensorDictStore.from_tensordict / td.to_store()); a lazy
  /// stack becomes a lazy-stack store.
  static TensorDictStore from_tensordict(const TensorDictBase& td,
                                         const storage::Redis& storage = {});
  /// Re-attaches to the store `storage.td_id` written by any process (C++ or
  /// Python): a plain, sharded or lazy-stack store. KeyError naming the td_id
  /// when the server has no such store.
  static TensorDictStore from_store(const storage::Redis& storage);

  /// Wraps an existing Redis storage (see TensorDictBase::as).
  explicit TensorDictStore(std::shared_ptr<Node> node);
  static bool is_node(const Node& node) noexcept;
  static const char* static_type_name() noexcept { return "TensorDictStore"; }

  /// The store's td_id.
  std::string td_id() const;
  /// The server key of a suffix: "<prefix>:{<td_id>}:<suffix>".
  std::string server_key(const std::string& suffix) const;
  /// True for a sharded store (ours; Python has none).
  bool is_sharded() const;
  /// A sharded store's blocks: their td_ids in row order; empty otherwise.
  std::vector<std::string> block_ids() const;
  /// Rows per block of a sharded store (0 otherwise).
  std::int64_t block_rows() const;
  /// Round trips this store object has made to its server (every level
  /// shares one connection): a user operation on rows adds one.
  std::int64_t round_trips() const;
  /// Closes the connection; the next call reconnects.
  void close() const;
  /// Deletes every key of the store from the server, __tensorclass__
  /// included (Python's clear_redis()). The handle then holds no entries.
  void clear() const;
  /// The tensorclass recorded in __tensorclass__, nullopt when none.
  std::optional<std::string> tensorclass_name() const;
  /// Records `name` in __tensorclass__ (one SET).
  void set_tensorclass_name(const std::string& name) const;
};

/// A new store on the server described by `storage`, holding a zero-filled
/// leaf per schema entry: the leaves are allocated with SETRANGE in one
/// pipeline, and no tensor data is sent.
TensorDictStore from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                            const storage::Redis& storage);

namespace redis {

// The free functions below are the first spelling of TensorDictStore's
// members and statics; they stay, forwarding, for code written before it.

/// TensorDictStore::create.
TensorDictStore create(const storage::Redis& storage, std::vector<int64_t> batch_size,
                       std::optional<c10::Device> device = std::nullopt);
/// TensorDictStore::from_tensordict.
TensorDictStore from_tensordict(const TensorDictBase& td, const storage::Redis& storage = {});
/// TensorDictStore::from_store.
TensorDictStore from_store(const storage::Redis& storage);

/// The storage::Redis that from_schema(..., "redis", options) connects with
/// (the same option names and checks), e.g. to attach other processes with
/// from_store(). SchemaError for an unknown option or a value of the wrong type.
storage::Redis options_from(const StorageOptions& options);

/// td.is<TensorDictStore>(): (a nested level of) a Redis store.
bool is_store(const TensorDictBase& td);
/// The store's td_id (TypeError when `td` is not a store).
std::string td_id(const TensorDictBase& td);
/// The server key of a suffix: "<prefix>:{<td_id>}:<suffix>".
std::string server_key(const TensorDictBase& td, const std::string& suffix);
/// Deletes every key of the store from the server, __tensorclass__ included
/// (Python's clear_redis()). The handle then holds no entries.
void clear(const TensorDictBase& td);
/// Round trips this store object has made to its server (every level of it
/// shares one connection): a user operation on rows adds one.
std::int64_t round_trips(const TensorDictBase& td);
/// Closes the connection; the next call reconnects.
void close(const TensorDictBase& td);
/// A sharded store's blocks: their td_ids in row order (each a store in
/// Python's layout, readable alone); empty for a store that is not sharded.
std::vector<std::string> block_ids(const TensorDictBase& td);
/// Rows per block of a sharded store (0 for a store that is not sharded).
std::int64_t block_rows(const TensorDictBase& td);

/// The tensorclass recorded in the store's __tensorclass__ key
/// ("<module>.<qualname>", e.g. "__main__.Transition"; one GET); nullopt
/// when none is recorded.
std::optional<std::string> tensorclass_name(const TensorDictBase& store);
/// Records `name` in __tensorclass__ (one SET). clear() deletes it, as
/// Python's clear_redis() does.
void set_tensorclass_name(const TensorDictBase& store, const std::string& name);

/// The name Python records for TC: TC::python_qualname when the class
/// declares one, else "__main__.<Name>" (what memmap() writes in `_type`).
template <class TC>
std::string tensorclass_name_of() {
  const std::string t = TC::python_type();  // "<class 'module.Name'>"
  return t.substr(8, t.size() - 10);
}

/// Python's TensorDictStore.from_tensordict(tensorclass): uploads every field
/// (tensors, nested tensordicts, and non-tensor fields as non-tensor leaves)
/// into a new store, records the class in __tensorclass__ and returns the
/// tensorclass over the store (reads and writes go to the server).
template <class TC>
TC from_tensorclass(const TC& tc, const storage::Redis& storage = {}) {
  TensorDict all = tc.tensordict().to_tensordict();
  const nlohmann::json& values = tc.non_tensor_values();
  for (auto it = values.begin(); it != values.end(); ++it)
    if (!it.value().is_null())
      all.set(NestedKey(it.key()), NonTensorData(it.value(), all.batch_size().vec(), all.device()));
  TensorDictStore store = from_tensordict(all, storage);
  store.set_tensorclass_name(tensorclass_name_of<TC>());
  return TC::from_tensordict(store);
}

/// Re-attaches to a store (from_store) and wraps it in TC. SchemaError when
/// the store records another class in __tensorclass__; a store recording
/// none is accepted (Python's from_store(tensorclass_cls=...)).
template <class TC>
TC from_store_as(const storage::Redis& storage) {
  TensorDictStore store = from_store(storage);
  const auto recorded = store.tensorclass_name();
  const std::string expected = tensorclass_name_of<TC>();
  if (recorded && *recorded != expected)
    throw SchemaError("Redis store " + storage.td_id + " holds a " + *recorded + ", not a " +
                      expected + " (its __tensorclass__ key)");
  return TC::from_tensordict(store);
}

/// The server and store named by an address, for command lines and config:
/// "redis://[[user]:password@]host[:port][/td_id][?db=N&prefix=P&timeout=S]" (user and
/// password %-escaped; "[::1]" for IPv6) or "unix://<socket path>[/td_id]
/// [?db=N&prefix=P]" (when the whole path is not a socket, its last component
/// is the td_id). `td_id=` may also be given in the query, `timeout=` /
/// `connect_timeout=` in whole seconds and `max_reply_bytes=`. Other fields keep their defaults.
/// ValueError naming the address and the expected forms.
storage::Redis parse_url(std::string_view url);

}  // namespace redis
}  // namespace tensordict
