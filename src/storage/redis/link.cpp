#include "storage/redis/link.h"

#include <tensordict/errors.h>

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <cerrno>
#include <cmath>

namespace tensordict::detail::redis {
namespace {

timeval to_timeval(double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - std::floor(seconds)) * 1e6);
  return tv;
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

// ---- Link ---------------------------------------------------------------------------

Link::Link(const storage::Redis& options, std::string host, int port)
    : options_(options), host_(std::move(host)), port_(port) {
  address_ = options_.unix_socket.empty() ? host_ + ":" + std::to_string(port_)
                                          : "unix:" + options_.unix_socket;
}

Link::~Link() { close(); }

void Link::close() noexcept {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

void Link::ensure(std::int64_t& round_trips) {
  if (ctx_ == nullptr) connect(round_trips);
}

void Link::append(const std::vector<std::string_view>& args, const std::string& what) {
  argv_.clear();
  lens_.clear();
  for (auto a : args) argv_.push_back(a.data()), lens_.push_back(a.size());
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data()) !=
      REDIS_OK)
    fail(what);
}

void Link::flush(const std::string& what) {
  const SigpipeBlocked blocked;
  int done = 0;
  while (!done)
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) fail(what);
}

// hiredis buffers a bulk string until all of it has arrived, whatever length
// the server announced: the unparsed part of the buffer is capped at
// options_.max_reply_bytes, so that a peer announcing 2^62 bytes and
// streaming them is an error, not memory growing without bound.
Reply Link::read(const std::string& what) {
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

void Link::fail(const std::string& what) {
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

void Link::connect(std::int64_t& round_trips) {
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

// ---- LinkPool -----------------------------------------------------------------------

Link& LinkPool::get(const std::string& address) {
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

std::vector<std::string> LinkPool::addresses() const {
  std::vector<std::string> out;
  for (const auto& [address, l] : links_)
    if (l->connected()) out.push_back(address);
  for (const auto& [address, l] : links_)
    if (!l->connected()) out.push_back(address);
  return out;
}

void LinkPool::close_all() noexcept {
  for (auto& [address, l] : links_) l->close();
}

}  // namespace tensordict::detail::redis
