#pragma once
// What redis_node.cpp needs to know of a LazyStackedTensorDictStore
// (lazy_stack_store.cpp). Its levels are StoreNodes (store.h), so the generic
// td::redis functions (td_id, server_key, clear, round_trips, close, is_store)
// serve it as they serve a TensorDictStore.

#include <string_view>

namespace tensordict::detail::redis {

/// __type__ of a lazy-stack store (docs/formats.md, "Redis lazy-stack stores").
inline constexpr std::string_view kLazyStackType = "lazy_stack";

}  // namespace tensordict::detail::redis
