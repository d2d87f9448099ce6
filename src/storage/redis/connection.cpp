#include "storage/redis/connection.h"

#include <tensordict/errors.h>

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

std::string reply_error(const redisReply* r) { return std::string(r->str, r->len); }

}  // namespace

std::string_view text(const redisReply* r, const std::string& what) {
  if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS))
    throw FormatError("Redis: " + what + ": expected a string reply");
  return {r->str, r->len};
}

Connection::Connection(storage::Redis options) : options_(std::move(options)) {}

Connection::~Connection() { close(); }

void Connection::close() noexcept {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

std::string Connection::where() const {
  if (!options_.unix_socket.empty()) return "unix:" + options_.unix_socket;
  return options_.host + ":" + std::to_string(options_.port);
}

void Connection::fail(const std::string& what) {
  // A hiredis context is unusable after an I/O error: drop it, and let the
  // next call reconnect.
  const int err = ctx_ != nullptr ? ctx_->err : REDIS_ERR_OTHER;
  const std::string detail = ctx_ != nullptr ? std::string(ctx_->errstr) : "no context";
  const bool timed_out =
      err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
                              detail.find("temporarily unavailable") != std::string::npos ||
                              detail.find("timed out") != std::string::npos);
  close();
  const std::string message = "Redis server " + where() + ": " + what + ": " + detail;
  if (timed_out)
    throw TimeoutError(message + " (timeout " + std::to_string(options_.timeout) + " s)");
  throw ConnectionError(message);
}

void Connection::connect() {
  const bool unix_socket = !options_.unix_socket.empty();
  if (options_.connect_timeout > 0) {
    const timeval tv = to_timeval(options_.connect_timeout);
    ctx_ = unix_socket ? redisConnectUnixWithTimeout(options_.unix_socket.c_str(), tv)
                       : redisConnectWithTimeout(options_.host.c_str(), options_.port, tv);
  } else {
    ctx_ = unix_socket ? redisConnectUnix(options_.unix_socket.c_str())
                       : redisConnect(options_.host.c_str(), options_.port);
  }
  if (ctx_ == nullptr)
    throw ConnectionError("Redis server " + where() + ": cannot allocate a connection");
  if (ctx_->err != 0) {
    const std::string detail = ctx_->errstr;
    close();
    throw ConnectionError("cannot connect to the Redis server at " + where() + ": " + detail);
  }
  if (options_.timeout > 0 && redisSetTimeout(ctx_, to_timeval(options_.timeout)) != REDIS_OK)
    fail("setting the command timeout");
  // AUTH and SELECT in one round trip.
  Batch setup;
  if (!options_.password.empty()) {
    if (options_.username.empty())
      setup.add({"AUTH", options_.password});
    else
      setup.add({"AUTH", options_.username, options_.password});
  }
  const std::string db = std::to_string(options_.db);
  if (options_.db != 0) setup.add({"SELECT", db});
  if (setup.empty()) return;
  for (const auto& args : setup.commands()) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (auto a : args) argv.push_back(a.data()), lens.push_back(a.size());
    redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  ++round_trips_;
  for (std::size_t i = 0; i < setup.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK) fail("connection setup");
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string detail = reply_error(r.get());
      const bool auth = setup.commands()[i][0] == "AUTH";
      close();
      throw ConnectionError((auth ? "authentication failed at the Redis server "
                                  : "cannot select database " + db + " on the Redis server ") +
                            where() + ": " + detail);
    }
  }
}

std::vector<Reply> Connection::send(const Batch& batch, const std::string& what, bool transaction) {
  std::vector<Reply> replies;
  if (batch.empty()) return replies;
  if (ctx_ == nullptr) connect();
  transaction = transaction && batch.size() > 1;
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  auto append = [&](const std::vector<std::string_view>& args) {
    argv.clear();
    lens.clear();
    for (auto a : args) argv.push_back(a.data()), lens.push_back(a.size());
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
        REDIS_OK)
      fail(what);
  };
  if (transaction) append({"MULTI"});
  for (const auto& args : batch.commands()) append(args);
  if (transaction) append({"EXEC"});
  ++round_trips_;
  const std::size_t n = batch.size() + (transaction ? 2 : 0);
  replies.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK) fail(what);
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  if (transaction) {
    // Replies: OK, QUEUED..., then EXEC's array (or an EXECABORT error).
    for (std::size_t i = 0; i + 1 < n; ++i)
      if (replies[i]->type == REDIS_REPLY_ERROR)
        throw StorageError("Redis server " + where() + ": " + what + ": " +
                           reply_error(replies[i].get()) +
                           " (transaction not executed: nothing written)");
    Reply exec = std::move(replies.back());
    if (exec->type != REDIS_REPLY_ARRAY)
      throw StorageError("Redis server " + where() + ": " + what + ": transaction failed: " +
                         (exec->type == REDIS_REPLY_ERROR ? reply_error(exec.get()) : "no reply"));
    std::vector<Reply> inner;
    for (std::size_t i = 0; i < exec->elements; ++i) {
      inner.emplace_back(exec->element[i]);
      exec->element[i] = nullptr;  // now owned by `inner`
    }
    replies = std::move(inner);
  }
  for (const auto& r : replies)
    if (r->type == REDIS_REPLY_ERROR)
      throw StorageError("Redis server " + where() + ": " + what + ": " + reply_error(r.get()));
  return replies;
}

Reply Connection::call(std::vector<std::string_view> args, const std::string& what) {
  Batch b;
  b.add(std::move(args));
  return std::move(send(b, what).front());
}

}  // namespace tensordict::detail::redis
