#pragma once
// One hiredis connection with checked calls: every failure becomes a
// tensordict:: error naming the server (ConnectionError, TimeoutError,
// StorageError for error replies). The only place that calls hiredis.

#include <tensordict/storage/redis.h>

#include <hiredis/hiredis.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict::detail::redis {

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

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

class Connection {
 public:
  explicit Connection(storage::Redis options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Sends every command of `batch` and reads every reply: one round trip.
  /// With `transaction`, the commands are wrapped in MULTI/EXEC and the
  /// replies returned are EXEC's elements (one per command). Connects first
  /// when not connected (also after a failure: the next call reconnects).
  /// Error replies are thrown as StorageError naming `what`.
  std::vector<Reply> send(const Batch& batch, const std::string& what, bool transaction = false);
  /// One command.
  Reply call(std::vector<std::string_view> args, const std::string& what);
  void close() noexcept;
  /// "host:port" or "unix:<path>".
  std::string where() const;
  const storage::Redis& options() const noexcept { return options_; }
  /// Round trips made so far (for tests and benchmarks).
  std::int64_t round_trips() const noexcept { return round_trips_; }

 private:
  void connect();
  [[noreturn]] void fail(const std::string& what);
  storage::Redis options_;
  redisContext* ctx_ = nullptr;
  std::int64_t round_trips_ = 0;
};

/// The text of a string or status reply; FormatError naming `what` otherwise.
std::string_view text(const redisReply* r, const std::string& what);

}  // namespace tensordict::detail::redis
