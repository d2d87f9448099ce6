#pragma once
/// @file rb/redis_cursor.h
/// RedisCursor: the shared round-robin cursor of a replay buffer on a Redis
/// store (rb/shared_cursor.h), kept on the server beside the store's keys so
/// that writers on several hosts share one ring. Part of the component
/// tensordict::redis (link it beside tensordict::rb).
///
/// @code
///   namespace rb = tensordict::rb;
///   tensordict::storage::Redis server{.host = "10.0.0.5", .td_id = store_id};
///   auto store = tensordict::TensorDictStore::from_store(server);
///   auto buffer = rb::ReplayBuffer::attach(store, std::make_shared<rb::RedisCursor>(server,
///   100'000)); buffer.extend(batch);   // INCRBY on the server, the rows, then the ordered commit
/// @endcode

#include <tensordict/rb/shared_cursor.h>
#include <tensordict/storage/redis.h>

#include <cstdint>
#include <memory>
#include <string>

namespace tensordict::detail::redis {
class Connection;
}

namespace tensordict::rb {

/// The counters are the keys "<prefix>:{<td_id>}:__rb_reserved__" (INCRBY
/// reserves), "__rb_committed__" (advanced by a server-side script only when
/// it equals the reservation's first ticket), "__rb_epoch__" and
/// "__rb_capacity__", in the hash slot of the store's own keys. Each cursor
/// object holds its own connection (one per process or thread: a "host").
class RedisCursor : public SharedCursor {
 public:
  /// The cursor of the store `server.td_id` (required) holding `capacity`
  /// rows: records the capacity on first use (SET NX). ValueError when the
  /// server already records another capacity, capacity <= 0 or td_id is
  /// empty; ConnectionError / TimeoutError as the store's calls.
  RedisCursor(const storage::Redis& server, int64_t capacity);
  ~RedisCursor() override;
  RedisCursor(const RedisCursor&) = delete;
  RedisCursor& operator=(const RedisCursor&) = delete;

  std::string where() const override;
  int64_t capacity() const override { return capacity_; }
  /// One round trip: MULTI, INCRBY of the reserve key, GET of the epoch, EXEC.
  Reservation reserve(int64_t count) override;
  int64_t committed() override;
  int64_t reserved() override;
  int64_t recover() override;
  void reset(int64_t write_count) override;
  /// The server key of a cursor counter ("__rb_reserved__", ...).
  std::string key(const std::string& suffix) const;

 protected:
  int64_t try_commit(const Reservation& r) override;

 private:
  int64_t read_counter(const std::string& key, const char* what);

  std::unique_ptr<::tensordict::detail::redis::Connection> conn_;
  std::string base_;  // "<prefix>:{<td_id>}:"
  int64_t capacity_ = 0;
};

}  // namespace tensordict::rb
