#pragma once
// The one place the core recognises a lazy stack. An operation that must keep
// a lazy stack's structure (write through to its members, or stay lazy) starts
// with
//   if (auto r = detail::lazy_dispatch(*this, detail::lazy_squeeze, d)) return *r;
// and the lazy stack's algorithm (src/storage/lazy_stack/lazy_ops.h) does the
// rest. docs/architecture.md ("The lazy stack") has the table of operations.
// The dense path pays one flag test, inlined: no virtual call, no allocation.

#include "storage/lazy_stack/lazy_ops.h"

#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

namespace tensordict::detail {

/// When `ls` is not null: op(*ls, args...), and its result (a copy for a
/// reference; true for an operation that returns nothing). Otherwise nullopt
/// (false): the caller runs its own path.
template <class Op, class... Args>
[[nodiscard]] auto run_on_lazy_stack(const LazyStackNode* ls, Op&& op, Args&&... args) {
  using Result = std::invoke_result_t<Op, const LazyStackNode&, Args...>;
  if constexpr (std::is_void_v<Result>) {
    if (ls == nullptr) return false;
    std::invoke(std::forward<Op>(op), *ls, std::forward<Args>(args)...);
    return true;
  } else {
    using Value = std::remove_cvref_t<Result>;
    if (ls == nullptr) return std::optional<Value>();
    return std::optional<Value>(
        std::invoke(std::forward<Op>(op), *ls, std::forward<Args>(args)...));
  }
}

/// run_on_lazy_stack for the storage behind the handle `td` (a null handle
/// is not a lazy stack).
template <class Op, class... Args>
[[nodiscard]] auto lazy_dispatch(const TensorDictBase& td, Op&& op, Args&&... args) {
  return run_on_lazy_stack(as_lazy_stack(td), std::forward<Op>(op), std::forward<Args>(args)...);
}

/// The same for a node met by a walk.
template <class Op, class... Args>
[[nodiscard]] auto lazy_dispatch(const Node& node, Op&& op, Args&&... args) {
  // Only LazyStackNode sets is_lazy_stack() (node.h): the cast is safe.
  const auto* ls = node.is_lazy_stack() ? static_cast<const LazyStackNode*>(&node) : nullptr;
  return run_on_lazy_stack(ls, std::forward<Op>(op), std::forward<Args>(args)...);
}

}  // namespace tensordict::detail
