#pragma once
// One hiredis connection to one Redis server (the server, or one node of a
// cluster): connects (AUTH and SELECT in one round trip), appends commands,
// writes them, reads replies. Every failure is a tensordict:: error naming
// the server (ConnectionError, TimeoutError); after an I/O error the link is
// closed and the next ensure() reconnects. The only file that calls hiredis.

#include "storage/redis/reply.h"

#include <tensordict/storage/redis.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct redisContext;  // hiredis

namespace tensordict::detail::redis {

class Link {
 public:
  /// `options` (timeouts, credentials, db, unix_socket, max_reply_bytes)
  /// must outlive the link.
  Link(const storage::Redis& options, std::string host, int port);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  /// "host:port", or "unix:<path>".
  const std::string& address() const noexcept { return address_; }
  const std::string& host() const noexcept { return host_; }
  bool connected() const noexcept { return ctx_ != nullptr; }
  void close() noexcept;

  /// Connects (and authenticates, selects the db) unless connected; the
  /// setup's round trip is counted in `round_trips`.
  void ensure(std::int64_t& round_trips);
  /// Appends one command to the output buffer.
  void append(const std::vector<std::string_view>& args, const std::string& what);
  /// Writes everything appended, so that the server starts working before
  /// the replies of other nodes are read.
  void flush(const std::string& what);
  /// Reads one reply. Everything appended must be flushed first, so that
  /// hiredis never writes here, outside the SIGPIPE guard. A reply value
  /// over options.max_reply_bytes is a FormatError (the link is closed).
  Reply read(const std::string& what);

 private:
  void connect(std::int64_t& round_trips);
  [[noreturn]] void fail(const std::string& what);

  const storage::Redis& options_;
  std::string host_;
  int port_ = 0;
  std::string address_;
  redisContext* ctx_ = nullptr;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

/// The links of one client, by address; a link is made on first use. On a
/// single server every address names the one server of the options.
class LinkPool {
 public:
  LinkPool(const storage::Redis& options, bool cluster) : options_(options), cluster_(cluster) {}
  /// The link to `address` ("host:port" on a cluster).
  Link& get(const std::string& address);
  bool has(const std::string& address) const { return links_.count(address) != 0; }
  /// Every link's address, connected ones first.
  std::vector<std::string> addresses() const;
  void close_all() noexcept;

 private:
  const storage::Redis& options_;
  bool cluster_;
  std::map<std::string, std::unique_ptr<Link>> links_;
};

/// "host:port" split; ValueError naming a cluster seed otherwise.
std::pair<std::string, int> split_address(const std::string& address);

}  // namespace tensordict::detail::redis
