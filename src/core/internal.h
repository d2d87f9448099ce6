#pragma once
// Helpers shared by the core's translation units. Not installed.

#include <tensordict/detail/format.h>
#include <tensordict/node.h>
#include <tensordict/tensor_dict.h>

#include <string>
#include <vector>

namespace tensordict::detail {

/// The key made of the first `n` parts of `key`.
inline NestedKey prefix(const NestedKey& key, std::size_t n) {
  NestedKey out;
  for (std::size_t i = 0; i < n && i < key.size(); ++i) out = out.child(key[i]);
  return out;
}

/// "key ('a', 'b') not found in TensorDict: ('a',) has keys ['x', 'y']"
[[noreturn]] void throw_missing(const NestedKey& key, std::size_t level,
                                const Node& node);

/// "Cannot modify locked TensorDict ..."
[[noreturn]] void throw_locked(const NestedKey& key, const char* operation);

/// Checks that `value` starts with `batch` (ShapeError naming the key).
void check_leaf_batch(const at::Tensor& value, at::IntArrayRef batch,
                      const NestedKey& key);

/// Makes `value` fit into a node with batch size `batch` and device `device`
/// (moves tensors, resizes nested tensordicts, broadcasts non-tensors).
Value validate_value(Value value, at::IntArrayRef batch,
                     std::optional<at::Device> device, const NestedKey& key);

/// A new in-memory TensorDict handle with the given batch size and device.
inline TensorDict make_tensordict(std::vector<int64_t> batch,
                                  std::optional<at::Device> device) {
  return TensorDict(std::make_shared<MemoryNode>(std::move(batch), device));
}

/// The nested tensordicts directly under `node` (handles to the live children).
std::vector<TensorDictBase> children(const Node& node);

}  // namespace tensordict::detail
