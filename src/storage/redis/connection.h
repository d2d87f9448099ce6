#pragma once
// The client of one Redis server or of one Redis Cluster, with checked
// calls: every failure becomes a tensordict:: error naming the server
// (ConnectionError, TimeoutError, StorageError for error replies). The only
// place that calls hiredis; replies are read through reply.h.
//
// Cluster mode (storage::Redis::cluster or seeds): the slot map is read with
// CLUSTER SLOTS, each command goes to the node owning the slot of its key
// (CRC16 of the key or of its {hash tag}), one connection per node. A batch
// is one pipeline per node, written to every node before any reply is read
// (the nodes work in parallel). MOVED refreshes the slot map and re-sends
// the commands it refused; ASK re-sends them once to the importing node after
// ASKING. With a transaction, MULTI/EXEC wraps the commands of each slot.

#include "storage/redis/reply.h"

#include <tensordict/errors.h>
#include <tensordict/storage/redis.h>

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict::detail::redis {

/// A checked row write (CheckedWrite) the server refused: a leaf is not the
/// size its metadata gives, and nothing was written. A ConflictError to
/// callers that look no closer; send_checked (store.h) reads the metadata
/// again to tell a leaf another process replaced from a corrupt one.
class SizeRefused : public ConflictError {
 public:
  explicit SizeRefused(std::string refusal)
      : ConflictError(refusal + ": changed by another process; nothing was written"),
        refusal_(std::move(refusal)) {}
  const std::string& refusal() const noexcept { return refusal_; }

 private:
  std::string refusal_;
};

/// The commands of one round trip. Arguments are views: strings given to
/// own() live as long as the batch; other views must outlive send().
class Batch {
 public:
  Batch& add(std::vector<std::string_view> args) {
    commands_.push_back(std::move(args));
    return *this;
  }
  std::string_view own(std::string s) { return kept_.emplace_back(std::move(s)); }
  std::size_t size() const noexcept { return commands_.size(); }
  bool empty() const noexcept { return commands_.empty(); }
  const std::vector<std::vector<std::string_view>>& commands() const noexcept { return commands_; }

 private:
  std::vector<std::vector<std::string_view>> commands_;
  std::deque<std::string> kept_;
};

/// The cluster hash slot of a key (CRC16/XMODEM of the key, or of the part
/// between the first '{' and the next '}' when that part is not empty).
int key_slot(std::string_view key) noexcept;

/// One hiredis connection to one server (a node of a cluster, or the server).
class Link;

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
  /// "host:port" or "unix:<path>"; "cluster at host:port,..." for a cluster.
  std::string where() const;
  bool cluster() const noexcept { return cluster_; }
  const storage::Redis& options() const noexcept { return options_; }
  /// Round trips made so far (for tests and benchmarks): a pipeline sent to
  /// k nodes at once counts k.
  std::int64_t round_trips() const noexcept { return round_trips_; }

 private:
  struct Group;
  Link& link(const std::string& address);
  Link& owner(int slot);
  void refresh_slots();
  void ensure_slots();
  /// Sends `groups` (one pipeline per node, all written before any reply is
  /// read) and leaves in `groups` what must be sent again (redirected or not
  /// ready). Returns the first "not ready" error (LOADING, TRYAGAIN...).
  std::string run(std::vector<Group>& groups, const Batch& batch, std::vector<Reply>& out,
                  std::vector<std::string>& errors, const std::string& what);

  storage::Redis options_;
  bool cluster_ = false;
  std::vector<std::string> seeds_;  // "host:port"
  std::map<std::string, std::unique_ptr<Link>> links_;
  std::array<Link*, 16384> slots_{};
  bool slots_known_ = false;
  std::int64_t round_trips_ = 0;
  std::recursive_mutex mu_;  // several stores (blocks of a sharded store) share one client
};

/// The leaf paths of a store's __keys__ set at `key` (one SMEMBERS round trip); FormatError for a
/// path that is not UTF-8 or nested deeper than kMaxNestingDepth.
std::vector<std::string> leaf_paths(Connection& conn, const std::string& key);

}  // namespace tensordict::detail::redis
