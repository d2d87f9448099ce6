// The in-memory TensorDict: constructors.
#include "core/internal.h"

namespace tensordict {

TensorDict::TensorDict()
    : TensorDictBase(std::make_shared<detail::MemoryNode>(at::IntArrayRef(), std::nullopt)) {}

TensorDict::TensorDict(at::IntArrayRef batch_size, std::optional<at::Device> device)
    : TensorDictBase(std::make_shared<detail::MemoryNode>(batch_size, device)) {
  for (auto s : batch_size)
    if (s < 0)
      throw ShapeError("invalid batch size " + detail::format_shape(batch_size) +
                       ": sizes must be non-negative");
}

TensorDict::TensorDict(std::initializer_list<Item> items, at::IntArrayRef batch_size,
                       std::optional<at::Device> device)
    : TensorDict(batch_size, device) {
  static_cast<detail::MemoryNode&>(node()).reserve(items.size());
  for (const auto& [k, v] : items) set(k, v);
}

TensorDict::TensorDict(const std::vector<Item>& items, at::IntArrayRef batch_size,
                       std::optional<at::Device> device)
    : TensorDict(batch_size, device) {
  static_cast<detail::MemoryNode&>(node()).reserve(items.size());
  for (const auto& [k, v] : items) set(k, v);
}

TensorDict::TensorDict(std::shared_ptr<Node> node) : TensorDictBase(std::move(node)) {
  if (!node_ || !is_node(*node_))
    throw TypeError("TensorDict: the storage is not an in-memory TensorDict");
}

TensorDict TensorDict::make(const std::vector<Item>& items, const Options& options) {
  TensorDict out(items, options.batch_size, options.device);
  if (options.lock) out.lock_();
  return out;
}

}  // namespace tensordict
