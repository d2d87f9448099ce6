// RedisCursor (include/tensordict/rb/redis_cursor.h): the shared replay
// buffer cursor on the Redis server. The reservation is a plain INCRBY; the
// ordered commit, recover() and reset() are server-side scripts, so that each
// reads and moves the counters atomically for every client.
#include <tensordict/errors.h>
#include <tensordict/rb/redis_cursor.h>

#include <charconv>
#include <string>

#include "storage/redis/connection.h"

namespace tensordict::rb {

namespace {

// KEYS: reserved, committed, epoch. ARGV: epoch, first, first + count.
// Returns -1 committed, -2 discarded, or the commit counter it waits for.
constexpr const char* kCommitScript = R"lua(
if tonumber(redis.call('GET', KEYS[3]) or '0') ~= tonumber(ARGV[1]) then return -2 end
local committed = tonumber(redis.call('GET', KEYS[2]) or '0')
if committed ~= tonumber(ARGV[2]) then return committed end
redis.call('SET', KEYS[2], ARGV[3])
return -1
)lua";

// KEYS: reserved, committed, epoch. Returns the tickets discarded.
constexpr const char* kRecoverScript = R"lua(
local committed = tonumber(redis.call('GET', KEYS[2]) or '0')
local pending = tonumber(redis.call('GET', KEYS[1]) or '0') - committed
if pending <= 0 then return 0 end
redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], committed)
return pending
)lua";

// KEYS: reserved, committed, epoch. ARGV: write_count.
constexpr const char* kResetScript = R"lua(
redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[1])
return 0
)lua";

int64_t parse_counter(std::string_view text, const std::string& key) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw FormatError("RedisCursor: the key " + key + " holds \"" + std::string(text) +
                      "\", not a ticket count");
  return value;
}

}  // namespace

RedisCursor::RedisCursor(const storage::Redis& server, int64_t capacity) : capacity_(capacity) {
  if (capacity <= 0)
    throw ValueError("RedisCursor: the capacity must be positive, got " + std::to_string(capacity));
  if (server.td_id.empty())
    throw ValueError(
        "RedisCursor: storage::Redis::td_id is empty; name the store the buffer "
        "writes (TensorDictStore::td_id())");
  base_ = server.prefix + ":{" + server.td_id + "}:";
  conn_ = std::make_unique<::tensordict::detail::redis::Connection>(server);
  const std::string capacity_key = key("__rb_capacity__");
  const std::string text = std::to_string(capacity);
  ::tensordict::detail::redis::Batch batch;
  batch.add({"SET", capacity_key, text, "NX"}).add({"GET", capacity_key});
  const auto replies = conn_->send(batch, "RedisCursor capacity " + capacity_key);
  const std::string_view stored = replies[1].text(capacity_key);
  if (stored != text)
    throw ValueError("RedisCursor: " + capacity_key + " records a buffer of " +
                     std::string(stored) + " rows, opened for " + text);
}

RedisCursor::~RedisCursor() = default;

std::string RedisCursor::key(const std::string& suffix) const { return base_ + suffix; }

std::string RedisCursor::where() const {
  return "Redis " + conn_->where() + " key " + key("__rb_reserved__");
}

Reservation RedisCursor::reserve(int64_t count) {
  if (count < 0)
    throw ValueError("RedisCursor::reserve: cannot reserve " + std::to_string(count) + " rows");
  const std::string reserved_key = key("__rb_reserved__");
  const std::string epoch_key = key("__rb_epoch__");
  const std::string n = std::to_string(count);
  ::tensordict::detail::redis::Batch batch;
  batch.add({"INCRBY", reserved_key, n}).add({"GET", epoch_key});
  const auto replies = conn_->send(batch, "RedisCursor::reserve " + reserved_key,
                                   /*transaction=*/true);
  const int64_t after = replies[0].integer(reserved_key);
  const std::string_view epoch_text = replies[1].text_or_nil(epoch_key);
  const int64_t epoch = epoch_text.empty() ? 0 : parse_counter(epoch_text, epoch_key);
  return {after - count, count, epoch};
}

int64_t RedisCursor::try_commit(const Reservation& r) {
  const std::string keys[3] = {key("__rb_reserved__"), key("__rb_committed__"),
                               key("__rb_epoch__")};
  const std::string epoch = std::to_string(r.epoch), first = std::to_string(r.first),
                    end = std::to_string(r.first + r.count);
  const auto reply =
      conn_->call({"EVAL", kCommitScript, "3", keys[0], keys[1], keys[2], epoch, first, end},
                  "RedisCursor::commit " + keys[1]);
  const int64_t seen = reply.integer(keys[1]);
  return seen == -1 ? kCommitted : seen == -2 ? kDiscarded : seen;
}

int64_t RedisCursor::read_counter(const std::string& k, const char* what) {
  const auto reply = conn_->call({"GET", k}, std::string(what) + " " + k);
  const std::string_view text = reply.text_or_nil(k);
  return text.empty() ? 0 : parse_counter(text, k);
}

int64_t RedisCursor::committed() {
  return read_counter(key("__rb_committed__"), "RedisCursor::committed");
}

int64_t RedisCursor::reserved() {
  return read_counter(key("__rb_reserved__"), "RedisCursor::reserved");
}

int64_t RedisCursor::recover() {
  const std::string keys[3] = {key("__rb_reserved__"), key("__rb_committed__"),
                               key("__rb_epoch__")};
  return conn_
      ->call({"EVAL", kRecoverScript, "3", keys[0], keys[1], keys[2]},
             "RedisCursor::recover " + keys[0])
      .integer(keys[0]);
}

void RedisCursor::reset(int64_t write_count) {
  if (write_count < 0)
    throw ValueError("RedisCursor::reset: write_count " + std::to_string(write_count) +
                     " is negative");
  const std::string keys[3] = {key("__rb_reserved__"), key("__rb_committed__"),
                               key("__rb_epoch__")};
  conn_->call({"EVAL", kResetScript, "3", keys[0], keys[1], keys[2], std::to_string(write_count)},
              "RedisCursor::reset " + keys[0]);
}

}  // namespace tensordict::rb
