#pragma once
// The pipelined sender: the commands of one operation (a Batch), grouped by
// node, written to every node before any reply is read (the nodes work in
// parallel), optionally wrapped in MULTI/EXEC per group. Replies come back
// in the order of the commands; commands a node refused with a redirection
// (MOVED, ASK) or "not ready" (TRYAGAIN, CLUSTERDOWN, LOADING) are sent
// again, the first at once, the second after a growing pause.

#include "storage/redis/link.h"
#include "storage/redis/reply.h"
#include "storage/redis/slot_map.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict::detail::redis {

/// The commands of one round trip. Arguments are views: strings given to
/// own() live as long as the batch; other views must outlive the send.
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

/// Commands of a batch sent together to one node: with `tx`, one
/// MULTI/EXEC (one slot on a cluster); with `asking`, each command (or the
/// transaction) preceded by ASKING.
struct Group {
  Link* link = nullptr;
  bool tx = false;
  bool asking = false;
  int slot = -1;
  std::vector<std::size_t> cmds;  // indices into the batch
};

/// One send of a batch. `follow` gives the link a redirection points to
/// (and notes a MOVED in the slot map); `reset` drops every connection
/// after an I/O error (replies would no longer match the commands).
class Pipeline {
 public:
  using Follow = std::function<Link&(const Redirect&)>;
  Pipeline(const Batch& batch, const std::string& what, std::int64_t& round_trips, Follow follow,
           std::function<void()> reset)
      : batch_(batch),
        what_(what),
        round_trips_(round_trips),
        follow_(std::move(follow)),
        reset_(std::move(reset)),
        replies_(batch.size()) {}

  /// Sends `groups` (one pipeline per node, all written before any reply
  /// is read) and returns what must be sent again (redirected or not
  /// ready). moved() and waiting() tell why.
  std::vector<Group> round(const std::vector<Group>& groups);
  /// Sends `groups` until every command has its reply: redirections at once
  /// (16 rounds at most; `after_moved` runs after a round that saw a MOVED),
  /// "not ready" after a growing pause until `patience` seconds passed.
  /// `where` names the server or cluster in errors.
  void run(std::vector<Group> groups, const std::function<void()>& after_moved, double patience,
           const std::string& where);

  bool moved() const noexcept { return moved_; }
  /// The first "not ready" error of the last round; empty when none.
  const std::string& waiting() const noexcept { return waiting_; }
  /// The error replies, "Redis server <node>: <what>: <error>", in order.
  const std::vector<std::string>& errors() const noexcept { return errors_; }
  std::vector<Reply>& replies() noexcept { return replies_; }

 private:
  const Batch& batch_;
  const std::string& what_;
  std::int64_t& round_trips_;
  Follow follow_;
  std::function<void()> reset_;
  std::vector<Reply> replies_;
  std::vector<std::string> errors_;
  bool moved_ = false;
  std::string waiting_;
};

}  // namespace tensordict::detail::redis
