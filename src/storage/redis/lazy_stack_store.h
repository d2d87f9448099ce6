#pragma once
// The hooks redis_node.cpp needs to serve a LazyStackedTensorDictStore
// (lazy_stack_store.cpp) through the generic td::redis functions (from_store,
// td_id, server_key, clear, round_trips, close, is_store).

#include <tensordict/storage/redis.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace tensordict::detail::redis {

/// What the generic td::redis functions do on a lazy-stack store.
class LazyStackHandle {
 public:
  virtual ~LazyStackHandle() = default;
  virtual const std::string& td_id() const = 0;
  virtual std::string key(std::string_view suffix) const = 0;
  virtual void clear() = 0;
  virtual std::int64_t round_trips() = 0;
  virtual void close() = 0;
};

/// The lazy-stack store behind `td` (any level of it), or nullptr.
LazyStackHandle* lazy_stack_of(const TensorDictBase& td) noexcept;

/// The value of __type__ that marks a lazy-stack store (formats.md §4.8).
inline constexpr std::string_view kLazyStackType = "lazy_stack";

}  // namespace tensordict::detail::redis
