#include "storage/redis/connection.h"

#include "core/json_limits.h"

#include <tensordict/errors.h>

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

namespace tensordict::detail::redis {
namespace {

timeval to_timeval(double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - std::floor(seconds)) * 1e6);
  return tv;
}

constexpr std::array<uint16_t, 256> crc16_table() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t c = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b)
      c = (c & 0x8000) ? static_cast<uint16_t>((c << 1) ^ 0x1021) : c << 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc16 = crc16_table();

std::pair<std::string, int> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size())
    throw ValueError("Redis cluster: seed node '" + address + "' is not host:port");
  try {
    return {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
  } catch (const std::exception&) {
    throw ValueError("Redis cluster: seed node '" + address + "' is not host:port");
  }
}

// A redirection reply: "MOVED <slot> <host:port>" or "ASK <slot> <host:port>".
struct Redirect {
  bool ask = false;
  int slot = 0;
  std::string address;
};
std::optional<Redirect> redirect_of(const ReplyView& r, const std::string& from_host) {
  const std::string_view e = r.error_text();
  const bool moved = e.rfind("MOVED ", 0) == 0, ask = e.rfind("ASK ", 0) == 0;
  if (!moved && !ask) return std::nullopt;
  const auto s1 = e.find(' '), s2 = e.find(' ', s1 + 1);
  if (s2 == std::string_view::npos) return std::nullopt;
  Redirect out;
  out.ask = ask;
  out.slot = std::atoi(std::string(e.substr(s1 + 1, s2 - s1 - 1)).c_str());
  out.address = std::string(e.substr(s2 + 1));
  if (!out.address.empty() && out.address[0] == ':') out.address = from_host + out.address;
  return out;
}

bool retryable(const ReplyView& r) {
  const std::string_view e = r.error_text();
  // Nothing was executed; the server (or cluster) will serve it shortly: a
  // slot mid-migration, a cluster settling, a restarted server loading its AOF.
  return e.rfind("TRYAGAIN", 0) == 0 || e.rfind("CLUSTERDOWN", 0) == 0 ||
         e.rfind("LOADING", 0) == 0;
}

// Blocks SIGPIPE in the calling thread while hiredis writes to a socket
// whose peer may be gone (a server killed mid-upload, or one that closed the
// connection on a too-large command): the write then fails with EPIPE,
// which becomes a ConnectionError, instead of the signal killing the
// process. A SIGPIPE the write raised is consumed before the thread's mask
// is restored; the application's signal disposition is never changed.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;  // not ours: left pending
  }
  ~SigpipeBlocked() {
    const int saved = errno;
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec now{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &now) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false;
};

}  // namespace

int key_slot(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  uint16_t crc = 0;
  for (unsigned char c : key)
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16[((crc >> 8) ^ c) & 0xff]);
  return crc & 16383;
}

std::vector<std::string> leaf_paths(Connection& conn, const std::string& key) {
  Reply members = conn.call({"SMEMBERS", key}, "reading " + key);
  std::vector<std::string> out;
  const ReplyArray listed = members.array(key);
  for (std::size_t i = 0; i < listed.size(); ++i) {
    std::string path(listed[i].text(key));
    // Keys are UTF-8 and nested at most kMaxNestingDepth levels, as the core
    // and the other loaders require: a stored path that is not would reach
    // key lists and printing (and a deep one the recursive tree).
    if (auto bad = first_invalid_utf8(path))
      throw FormatError("Redis store: '" + key +
                        "' lists a leaf path that is not valid UTF-8 (byte " +
                        std::to_string(*bad) + ")");
    if (std::count(path.begin(), path.end(), '.') >= kMaxNestingDepth)
      throw FormatError("Redis store: '" + key + "' lists a leaf path nested deeper than " +
                        std::to_string(kMaxNestingDepth) + " levels ('" + path.substr(0, 40) +
                        "...')");
    out.push_back(std::move(path));
  }
  // A path that is a leaf cannot also be a nested level ("a" and "a.x"):
  // either would hide the other.
  std::vector<std::string_view> sorted(out.begin(), out.end());
  std::sort(sorted.begin(), sorted.end());
  for (const auto p : sorted) {
    const std::string level = std::string(p) + ".";
    const auto it = std::lower_bound(sorted.begin(), sorted.end(), std::string_view(level));
    if (it != sorted.end() && it->starts_with(level))
      throw FormatError("Redis store: '" + key + "' lists '" + std::string(p.substr(0, 100)) +
                        "' both as a leaf and as a nested tensordict (with '" +
                        std::string(it->substr(0, 100)) + "')");
  }
  return out;
}

// ---- Link: one hiredis context ---------------------------------------------------

class Link {
 public:
  Link(const storage::Redis& options, std::string host, int port)
      : options_(options), host_(std::move(host)), port_(port) {
    address_ = options_.unix_socket.empty() ? host_ + ":" + std::to_string(port_)
                                            : "unix:" + options_.unix_socket;
  }
  ~Link() { close(); }
  const std::string& address() const noexcept { return address_; }
  const std::string& host() const noexcept { return host_; }
  bool connected() const noexcept { return ctx_ != nullptr; }
  void close() noexcept {
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
  }

  /// Connects (and authenticates, selects the db) unless connected.
  void ensure(std::int64_t& round_trips) {
    if (ctx_ == nullptr) connect(round_trips);
  }
  void append(const std::vector<std::string_view>& args, const std::string& what) {
    argv_.clear();
    lens_.clear();
    for (auto a : args) argv_.push_back(a.data()), lens_.push_back(a.size());
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data()) !=
        REDIS_OK)
      fail(what);
  }
  /// Writes everything appended, so that the server starts working before
  /// the replies of other nodes are read.
  void flush(const std::string& what) {
    const SigpipeBlocked blocked;
    int done = 0;
    while (!done)
      if (redisBufferWrite(ctx_, &done) != REDIS_OK) fail(what);
  }
  /// Reads one reply. Everything appended is flushed first (flush()), so
  /// that hiredis never writes here, outside SigpipeBlocked.
  /// hiredis buffers a bulk string until all of it has arrived, whatever
  /// length the server announced: the unparsed part of the buffer is capped
  /// at options_.max_reply_bytes, so that a peer announcing 2^62 bytes and
  /// streaming them is an error, not memory growing without bound.
  Reply read(const std::string& what) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail(what);
    while (raw == nullptr) {
      if (redisBufferRead(ctx_) != REDIS_OK) fail(what);
      const std::size_t pending = ctx_->reader->len - ctx_->reader->pos;
      if (options_.max_reply_bytes > 0 &&
          pending > static_cast<std::size_t>(options_.max_reply_bytes)) {
        close();
        throw FormatError("Redis server " + address_ + ": " + what + ": a reply value over " +
                          std::to_string(options_.max_reply_bytes) +
                          " bytes (storage::Redis::max_reply_bytes; the server's "
                          "proto-max-bulk-len caps what it can store)");
      }
      if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail(what);
    }
    return Reply(static_cast<redisReply*>(raw));
  }

  [[noreturn]] void fail(const std::string& what) {
    // A hiredis context is unusable after an I/O error: drop it, and let the
    // next call reconnect.
    const int err = ctx_ != nullptr ? ctx_->err : REDIS_ERR_OTHER;
    const std::string detail = ctx_ != nullptr ? std::string(ctx_->errstr) : "no context";
    const bool timed_out =
        err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
                                detail.find("temporarily unavailable") != std::string::npos ||
                                detail.find("timed out") != std::string::npos);
    close();
    const std::string message = "Redis server " + address_ + ": " + what + ": " + detail;
    if (timed_out)
      throw TimeoutError(message + " (timeout " + std::to_string(options_.timeout) + " s)");
    throw ConnectionError(message);
  }

 private:
  void connect(std::int64_t& round_trips) {
    const bool unix_socket = !options_.unix_socket.empty();
    if (options_.connect_timeout > 0) {
      const timeval tv = to_timeval(options_.connect_timeout);
      ctx_ = unix_socket ? redisConnectUnixWithTimeout(options_.unix_socket.c_str(), tv)
                         : redisConnectWithTimeout(host_.c_str(), port_, tv);
    } else {
      ctx_ = unix_socket ? redisConnectUnix(options_.unix_socket.c_str())
                         : redisConnect(host_.c_str(), port_);
    }
    if (ctx_ == nullptr)
      throw ConnectionError("Redis server " + address_ + ": cannot allocate a connection");
    if (ctx_->err != 0) {
      const std::string detail = ctx_->errstr;
      close();
      throw ConnectionError("cannot connect to the Redis server at " + address_ + ": " + detail);
    }
    if (options_.timeout > 0 && redisSetTimeout(ctx_, to_timeval(options_.timeout)) != REDIS_OK)
      fail("setting the command timeout");
    // AUTH and SELECT in one round trip.
    std::vector<std::vector<std::string_view>> setup;
    if (!options_.password.empty()) {
      if (options_.username.empty())
        setup.push_back({"AUTH", options_.password});
      else
        setup.push_back({"AUTH", options_.username, options_.password});
    }
    const std::string db = std::to_string(options_.db);
    if (options_.db != 0) setup.push_back({"SELECT", db});
    if (setup.empty()) return;
    for (const auto& args : setup) append(args, "connection setup");
    flush("connection setup");
    ++round_trips;
    for (const auto& args : setup) {
      Reply r = read("connection setup");
      if (r.is_error()) {
        const std::string detail(r.error_text());
        const bool auth = args[0] == "AUTH";
        close();
        throw ConnectionError((auth ? "authentication failed at the Redis server "
                                    : "cannot select database " + db + " on the Redis server ") +
                              address_ + ": " + detail);
      }
    }
  }

  const storage::Redis& options_;
  std::string host_;
  int port_ = 0;
  std::string address_;
  redisContext* ctx_ = nullptr;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

// ---- Connection ---------------------------------------------------------------------

/// Commands sent together to one node: with `tx`, one MULTI/EXEC (one slot);
/// with `asking`, each command (or the transaction) preceded by ASKING.
struct Connection::Group {
  Link* link = nullptr;
  bool tx = false;
  bool asking = false;
  int slot = -1;
  std::vector<std::size_t> cmds;
};

Connection::Connection(storage::Redis options) : options_(std::move(options)) {
  cluster_ = options_.cluster || !options_.seeds.empty();
  if (cluster_) {
    if (!options_.unix_socket.empty())
      throw ValueError(
          "Redis cluster: a cluster is reached over TCP (host:port seeds), not the "
          "Unix socket '" +
          options_.unix_socket + "'");
    if (options_.db != 0)
      throw ValueError("Redis cluster: a cluster has only database 0, got db " +
                       std::to_string(options_.db));
    seeds_ = options_.seeds;
    if (seeds_.empty()) seeds_.push_back(options_.host + ":" + std::to_string(options_.port));
    for (const auto& s : seeds_) split_address(s);  // validates
  }
}

Connection::~Connection() { close(); }

void Connection::close() noexcept {
  std::lock_guard lock(mu_);
  for (auto& [address, l] : links_) l->close();
  slots_known_ = false;
}

std::string Connection::where() const {
  if (cluster_) {
    std::string s = "cluster ";
    for (std::size_t i = 0; i < seeds_.size(); ++i) s += (i ? "," : "") + seeds_[i];
    return s;
  }
  if (!options_.unix_socket.empty()) return "unix:" + options_.unix_socket;
  return options_.host + ":" + std::to_string(options_.port);
}

Link& Connection::link(const std::string& address) {
  auto it = links_.find(address);
  if (it != links_.end()) return *it->second;
  std::unique_ptr<Link> l;
  if (cluster_) {
    auto [host, port] = split_address(address);
    l = std::make_unique<Link>(options_, host, port);
  } else {
    l = std::make_unique<Link>(options_, options_.host, options_.port);
  }
  return *links_.emplace(address, std::move(l)).first->second;
}

void Connection::ensure_slots() {
  if (!slots_known_) refresh_slots();
}

void Connection::refresh_slots() {
  // Ask the nodes known so far, then the seeds.
  std::vector<std::string> candidates;
  for (const auto& [address, l] : links_)
    if (l->connected()) candidates.push_back(address);
  for (const auto& [address, l] : links_)
    if (!l->connected()) candidates.push_back(address);
  for (const auto& s : seeds_)
    if (!links_.count(s)) candidates.push_back(s);
  std::string last;
  for (const auto& address : candidates) {
    Link& l = link(address);
    Reply r;
    try {
      l.ensure(round_trips_);
      l.append({"CLUSTER", "SLOTS"}, "reading the cluster slot map");
      l.flush("reading the cluster slot map");
      ++round_trips_;
      r = l.read("reading the cluster slot map");
    } catch (const ConnectionError& e) {
      last = e.what();
      continue;
    }
    const std::string refusal(r.error_text());
    if (r.is_error() && refusal.find("cluster support disabled") == std::string::npos) {
      // Not ready (LOADING after a restart...): ask another node.
      last = "Redis server " + address + ": CLUSTER SLOTS: " + refusal;
      continue;
    }
    if (r.is_error())
      throw StorageError(
          "Redis server " + address +
          " is not a cluster node (the option cluster is set): CLUSTER SLOTS: " + refusal);
    if (!r.is_array())
      throw FormatError("Redis server " + address + ": CLUSTER SLOTS: not an array");
    // Validated whole before the map changes: a reply from a broken or
    // hostile node (a negative, reversed or out-of-range slot range, fields
    // of other types) is a FormatError, never an index out of the map.
    struct Range {
      long long first, last;
      std::string node;
    };
    std::vector<Range> ranges;
    const std::string what = "Redis server " + address + ": CLUSTER SLOTS";
    const ReplyArray entries = r.array(what);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const ReplyView e = entries[i];
      const auto bad = [&](const std::string& why) {
        return FormatError(what + ": entry " + std::to_string(i) + ": " + why);
      };
      if (!e.is_array() || e.array(what).size() < 3)
        throw bad("not an array [first slot, last slot, master, ...]");
      const ReplyArray fields = e.array(what);
      const ReplyView master = fields[2];
      if (!fields[0].is_integer() || !fields[1].is_integer())
        throw bad("the slot range is not two integers");
      const long long first = fields[0].integer(what), last = fields[1].integer(what);
      if (first < 0 || last > 16383 || first > last)
        throw bad("slot range " + std::to_string(first) + ".." + std::to_string(last) +
                  " is not within 0..16383 in order");
      const auto host_port = master.is_array() ? master.array(what) : ReplyArray(nullptr, 0);
      if (host_port.size() < 2 || !host_port[0].is_text() || !host_port[1].is_integer() ||
          host_port[1].integer(what) < 1 || host_port[1].integer(what) > 65535)
        throw bad("the master is not [host, port 1..65535, ...]");
      std::string host(host_port[0].text(what));
      if (host.empty() || host == "?") host = l.host();
      ranges.push_back({first, last, host + ":" + std::to_string(host_port[1].integer(what))});
    }
    // A map without any slot (a cluster whose slots are not assigned yet)
    // serves nothing: the blocks of a sharded store would have no master.
    if (ranges.empty())
      throw StorageError("Redis server " + address +
                         ": CLUSTER SLOTS: no node serves any slot (are the cluster's slots "
                         "assigned?)");
    slots_.fill(nullptr);
    for (const auto& range : ranges) {
      Link* target = &link(range.node);
      for (long long s = range.first; s <= range.last; ++s)
        slots_[static_cast<std::size_t>(s)] = target;
    }
    slots_known_ = true;
    return;
  }
  throw ConnectionError("cannot reach any node of the Redis " + where() + ": " + last);
}

Link& Connection::owner(int slot) {
  if (!cluster_) return link(where());
  ensure_slots();
  if (slot < 0) {  // a keyless command: any master
    for (Link* l : slots_)
      if (l != nullptr) return *l;
    throw StorageError("Redis " + where() + ": no node serves any slot");
  }
  Link* l = slots_[static_cast<std::size_t>(slot)];
  if (l == nullptr) {
    refresh_slots();  // the map may have changed
    l = slots_[static_cast<std::size_t>(slot)];
  }
  if (l == nullptr)
    throw StorageError("Redis " + where() + ": slot " + std::to_string(slot) +
                       " is not served by any node (CLUSTER SLOTS)");
  return *l;
}

namespace {

// The key a command routes by: the first key argument; nullopt for keyless
// commands (CONFIG, INFO, PING...).
std::optional<std::string_view> routing_key(const std::vector<std::string_view>& args) {
  if (args.size() < 2) return std::nullopt;
  auto is = [&](const char* name) {
    const std::string_view c = args[0];
    if (c.size() != std::strlen(name)) return false;
    for (std::size_t i = 0; i < c.size(); ++i)
      if (std::toupper(static_cast<unsigned char>(c[i])) != name[i]) return false;
    return true;
  };
  if (is("EVAL") || is("EVALSHA") || is("FCALL")) {
    if (args.size() < 4 || args[2] == "0") return std::nullopt;
    return args[3];
  }
  for (const char* keyless : {"CONFIG", "INFO", "PING", "CLUSTER", "SCRIPT", "DBSIZE", "KEYS",
                              "SCAN", "FLUSHDB", "FLUSHALL", "CLIENT", "ECHO", "TIME"})
    if (is(keyless)) return std::nullopt;
  return args[1];
}

}  // namespace

std::vector<Reply> Connection::send(const Batch& batch, const std::string& what, bool transaction) {
  std::vector<Reply> out;
  if (batch.empty()) return out;
  std::lock_guard lock(mu_);
  const auto& commands = batch.commands();
  out.resize(commands.size());
  std::vector<Group> groups;
  if (!cluster_) {
    Group g;
    g.link = &link(where());
    g.tx = transaction;
    for (std::size_t i = 0; i < commands.size(); ++i) g.cmds.push_back(i);
    groups.push_back(std::move(g));
  } else {
    ensure_slots();
    // One group per slot with a transaction (MULTI/EXEC needs one slot),
    // one per node without; in the order of first appearance.
    std::map<std::pair<Link*, int>, std::size_t> index;
    // Each distinct key (an own()ed view, reused by the commands of a leaf)
    // is hashed once.
    std::unordered_map<const char*, std::pair<std::size_t, int>> slots;
    for (std::size_t i = 0; i < commands.size(); ++i) {
      auto key = routing_key(commands[i]);
      int slot = -1;
      if (key) {
        auto [it, fresh] = slots.try_emplace(key->data(), key->size(), 0);
        if (fresh || it->second.first != key->size()) it->second = {key->size(), key_slot(*key)};
        slot = it->second.second;
      }
      Link* l = &owner(slot);
      const std::pair<Link*, int> id{l, transaction ? slot : -2};
      auto [it, fresh] = index.emplace(id, groups.size());
      if (fresh) groups.push_back(Group{l, transaction, false, slot, {}});
      groups[it->second].cmds.push_back(i);
    }
  }
  std::vector<std::string> errors;
  // Redirections are followed at once (16 in a row at most); commands the
  // server cannot serve yet are re-sent with a growing pause, until the
  // connect timeout (5 s when none).
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(
          1000 * (options_.connect_timeout > 0 ? options_.connect_timeout : 5.0)));
  int redirects = 0, waits = 0;
  std::string waiting;
  while (!groups.empty()) {
    if (!waiting.empty()) {
      if (std::chrono::steady_clock::now() > deadline)
        throw ConnectionError("Redis " + where() + ": " + what + ": not ready: " + waiting);
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::min(100, 5 << std::min(waits, 5))));
      ++waits;
    } else if (redirects++ > 16) {
      throw StorageError("Redis " + where() + ": " + what +
                         ": still redirected after 16 rounds (the cluster keeps moving slots)");
    }
    waiting = run(groups, batch, out, errors, what);
  }
  if (!errors.empty()) {
    // TDSIZE: the checked row write (store.h, CheckedWrite) found a leaf
    // that is not the size its metadata gives; it wrote nothing.
    if (errors.front().find(": TDSIZE ") != std::string::npos) throw SizeRefused(errors.front());
    throw StorageError(errors.front());
  }
  return out;
}

std::string Connection::run(std::vector<Group>& groups, const Batch& batch, std::vector<Reply>& out,
                            std::vector<std::string>& errors, const std::string& what) {
  const auto& commands = batch.commands();
  std::vector<Link*> links;
  for (const auto& g : groups)
    if (std::find(links.begin(), links.end(), g.link) == links.end()) links.push_back(g.link);
  try {
    for (Link* l : links) l->ensure(round_trips_);
    for (const auto& g : groups) {
      const bool multi = g.tx && g.cmds.size() > 1;
      if (multi) {
        if (g.asking) g.link->append({"ASKING"}, what);
        g.link->append({"MULTI"}, what);
      }
      for (std::size_t i : g.cmds) {
        if (g.asking && !multi) g.link->append({"ASKING"}, what);
        g.link->append(commands[i], what);
      }
      if (multi) g.link->append({"EXEC"}, what);
    }
    for (Link* l : links) l->flush(what);
    round_trips_ += static_cast<std::int64_t>(links.size());
  } catch (const Error&) {
    // Replies would no longer match the commands: start over on every link.
    for (auto& [address, l] : links_) l->close();
    slots_known_ = false;
    throw;
  }
  std::vector<Group> next;
  bool moved = false;
  std::string waiting;  // the first "not ready" error
  // Redirected commands, grouped like the first time.
  auto redirect = [&](const Group& g, std::size_t cmd, Link* target, bool asking) {
    for (auto& n : next)
      if (n.link == target && n.asking == asking && n.tx == g.tx && n.slot == g.slot) {
        n.cmds.push_back(cmd);
        return;
      }
    next.push_back(Group{target, g.tx, asking, g.slot, {cmd}});
  };
  // Where a refused command goes next (a redirection, or the same node again
  // for TRYAGAIN / CLUSTERDOWN); nullopt for any other reply.
  auto destination = [&](const Group& g,
                         const ReplyView& r) -> std::optional<std::pair<Link*, bool>> {
    if (auto to = redirect_of(r, g.link->host())) {
      Link* target = &link(to->address);
      if (!to->ask) {
        moved = true;
        if (to->slot >= 0 && to->slot < 16384) slots_[static_cast<std::size_t>(to->slot)] = target;
      }
      return std::make_pair(target, to->ask);
    }
    if (retryable(r)) {
      if (waiting.empty()) waiting = r.error_text();
      return std::make_pair(g.link, g.asking);
    }
    return std::nullopt;
  };
  try {
    for (const auto& g : groups) {
      const std::string& node = g.link->address();
      if (!(g.tx && g.cmds.size() > 1)) {
        for (std::size_t i : g.cmds) {
          if (g.asking) g.link->read(what);  // ASKING's OK
          Reply r = g.link->read(what);
          if (r.is_error()) {  // tested first: most replies are not
            if (auto to = destination(g, r)) {
              redirect(g, i, to->first, to->second);
              continue;
            }
            errors.push_back("Redis server " + node + ": " + what + ": " +
                             std::string(r.error_text()));
          }
          out[i] = std::move(r);
        }
        continue;
      }
      if (g.asking) g.link->read(what);
      Reply multi = g.link->read(what);
      std::vector<Reply> queued;
      for (std::size_t k = 0; k < g.cmds.size(); ++k) queued.push_back(g.link->read(what));
      Reply exec = g.link->read(what);
      // A redirected command aborts the transaction: re-send it whole.
      std::optional<std::pair<Link*, bool>> to;
      for (std::size_t k = 0; k < queued.size() && !to; ++k) to = destination(g, queued[k]);
      if (to) {
        for (std::size_t i : g.cmds) redirect(g, i, to->first, to->second);
        continue;
      }
      std::string queue_error;
      if (multi.is_error()) queue_error = multi.error_text();
      for (const auto& q : queued)
        if (queue_error.empty() && q.is_error()) queue_error = q.error_text();
      if (!queue_error.empty()) {
        errors.push_back("Redis server " + node + ": " + what + ": " + queue_error +
                         " (transaction not executed: nothing written)");
        continue;
      }
      if (!exec.is_array() || exec.array(what).size() != g.cmds.size()) {
        errors.push_back("Redis server " + node + ": " + what + ": transaction failed: " +
                         (exec.is_error() ? std::string(exec.error_text()) : "no reply"));
        continue;
      }
      redisReply* const results = exec.get();
      for (std::size_t k = 0; k < results->elements; ++k) {
        Reply r(results->element[k]);
        results->element[k] = nullptr;  // now owned by `r`
        if (r.is_error())
          errors.push_back("Redis server " + node + ": " + what + ": " +
                           std::string(r.error_text()));
        out[g.cmds[k]] = std::move(r);
      }
    }
  } catch (const Error&) {
    for (auto& [address, l] : links_) l->close();
    slots_known_ = false;
    throw;
  }
  if (moved) refresh_slots();  // the map changed: learn all of it
  groups = std::move(next);
  return waiting;
}

Reply Connection::call(std::vector<std::string_view> args, const std::string& what) {
  Batch b;
  b.add(std::move(args));
  return std::move(send(b, what).front());
}

std::vector<std::string> Connection::nodes() {
  std::lock_guard lock(mu_);
  if (!cluster_) return {where()};
  ensure_slots();
  std::vector<std::string> out;
  for (Link* l : slots_)
    if (l != nullptr && std::find(out.begin(), out.end(), l->address()) == out.end())
      out.push_back(l->address());
  return out;
}

std::string Connection::node_of(std::string_view key) {
  std::lock_guard lock(mu_);
  if (!cluster_) return where();
  return owner(key_slot(key)).address();
}

std::vector<Reply> Connection::call_each_node(std::vector<std::string_view> args,
                                              const std::string& what) {
  std::lock_guard lock(mu_);
  std::vector<Reply> out;
  for (const auto& address : nodes()) {
    Link& l = cluster_ ? link(address) : link(where());
    Group g{&l, false, false, -1, {0}};
    Batch b;
    b.add(args);
    std::vector<Group> groups{g};
    std::vector<Reply> one(1);
    std::vector<std::string> errors;
    (void)run(groups, b, one, errors, what);
    out.push_back(std::move(one.front()));  // error replies are returned as such
  }
  return out;
}

}  // namespace tensordict::detail::redis
