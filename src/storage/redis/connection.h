#pragma once
// The client of one Redis server or of one Redis Cluster, with checked
// calls: every failure becomes a tensordict:: error naming the server
// (ConnectionError, TimeoutError, StorageError for error replies). Composed
// of the one-server links (link.h), the cluster slot map (slot_map.h) and
// the pipelined sender (pipeline.h); replies are read through reply.h.
//
// Cluster mode (storage::Redis::cluster or seeds): each command goes to the
// node owning the slot of its key, one connection per node. A batch is one
// pipeline per node, written to every node before any reply is read. MOVED
// refreshes the slot map and re-sends the commands it refused; ASK re-sends
// them once to the importing node after ASKING. With a transaction,
// MULTI/EXEC wraps the commands of each slot.

#include "storage/redis/link.h"
#include "storage/redis/pipeline.h"
#include "storage/redis/reply.h"
#include "storage/redis/slot_map.h"

#include <tensordict/errors.h>
#include <tensordict/storage/redis.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict::detail::redis {

class Connection {
 public:
  explicit Connection(storage::Redis options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Sends every command of `batch` and reads every reply: one round trip per
  /// node (plus one per redirection followed on a cluster). With
  /// `transaction`, the commands (of each slot, on a cluster) are wrapped in
  /// MULTI/EXEC and the replies returned are EXEC's elements. Replies come in
  /// the order of the commands. Connects first when not connected (also after
  /// a failure: the next call reconnects). Error replies are thrown as
  /// StorageError naming `what`, after every reply was read.
  std::vector<Reply> send(const Batch& batch, const std::string& what, bool transaction = false);
  /// One command.
  Reply call(std::vector<std::string_view> args, const std::string& what);
  /// A keyless command (CONFIG GET, INFO...) sent to every master of a
  /// cluster, or to the server: one reply per node, in the order of nodes().
  std::vector<Reply> call_each_node(std::vector<std::string_view> args, const std::string& what);
  /// "host:port" of every master (the server alone when not a cluster).
  std::vector<std::string> nodes();
  /// "host:port" of the node that owns `key` (where() when not a cluster).
  std::string node_of(std::string_view key);
  void close() noexcept;
  /// "host:port" or "unix:<path>"; "cluster host:port,..." for a cluster.
  const std::string& where() const noexcept { return where_; }
  bool cluster() const noexcept { return cluster_; }
  const storage::Redis& options() const noexcept { return options_; }
  /// Round trips made so far (for tests and benchmarks): a pipeline sent to
  /// k nodes at once counts k.
  std::int64_t round_trips() const noexcept { return round_trips_; }

 private:
  /// The commands of `batch` grouped by node (by slot with `transaction`).
  std::vector<Group> groups_of(const Batch& batch, bool transaction);
  Pipeline pipeline(const Batch& batch, const std::string& what);
  Link& owner(int slot) { return slots_.owner(slot, links_, round_trips_, where_); }

  storage::Redis options_;
  bool cluster_ = false;
  LinkPool links_;
  SlotMap slots_;
  std::string where_;  // made once: every send names it
  std::int64_t round_trips_ = 0;
  std::recursive_mutex mu_;  // several stores (blocks of a sharded store) share one client
};

}  // namespace tensordict::detail::redis
