#pragma once
/// @file tensor_dict.h
/// TensorDict: the in-memory tensordict.

#include <tensordict/node.h>
#include <tensordict/storage/memory.h>
#include <tensordict/tensor_dict_base.h>

#include <c10/util/SmallVector.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensordict {

namespace detail {

// One level of find_memory_tensor(): the entry at key, nullptr when missing
// or when the level is stored elsewhere than in memory.
inline const Value* find_in_memory(const Node* n, std::string_view key) noexcept {
  return n->is_memory_node() ? static_cast<const MemoryNode*>(n)->lookup(key) : nullptr;
}

template <class Part>
const at::Tensor* find_memory_tensor(const Node* n, const Part* parts, std::size_t count) noexcept {
  if (n == nullptr || count == 0) return nullptr;
  // The intermediate levels, then the leaf: a loop with a known trip count,
  // which the compiler unrolls for a braced path (then the tags of literal
  // keys are constants).
  const Part* const last = parts + count - 1;
  for (; parts != last; ++parts) {
    const Value* v = find_in_memory(n, *parts);
    // get_if: one test of the variant index, no throwing path as in std::get.
    const TensorDictBase* child = v ? std::get_if<TensorDictBase>(&v->variant()) : nullptr;
    if (child == nullptr) return nullptr;
    n = child->node_ptr().get();
  }
  const Value* v = find_in_memory(n, *last);
  return v ? std::get_if<at::Tensor>(&v->variant()) : nullptr;
}

}  // namespace detail

/// A nested, ordered dictionary of tensors held in memory, sharing leading
/// batch dimensions (Python's tensordict.TensorDict).
///
/// @code
///   namespace td = tensordict;
///   td::TensorDict data({{"obs", torch::randn({4, 3})},
///                        {"next", td::TensorDict({{"reward", torch::zeros({4, 1})}}, {4})}},
///                       /*batch_size=*/{4});
///   data.set({"next", "done"}, torch::zeros({4, 1}, torch::kBool));
///   std::cout << data[0] << "\n";
/// @endcode
class TensorDict : public TensorDictBase {
 public:
  using Item = std::pair<NestedKey, Value>;

  /// An empty TensorDict with batch size [] and no device.
  TensorDict();
  /// From (key, value) pairs. The batch size is never inferred: it is `[]`
  /// unless given. With a device, every tensor is moved there.
  /// ShapeError when a value does not start with the batch size.
  TensorDict(std::initializer_list<Item> items, at::IntArrayRef batch_size = {},
             std::optional<at::Device> device = std::nullopt);
  TensorDict(const std::vector<Item>& items, at::IntArrayRef batch_size = {},
             std::optional<at::Device> device = std::nullopt);
  /// An empty TensorDict with this batch size (and device).
  explicit TensorDict(at::IntArrayRef batch_size, std::optional<at::Device> device = std::nullopt);
  /// Wraps an existing in-memory storage (see TensorDictBase::as).
  explicit TensorDict(std::shared_ptr<Node> node);

  static bool is_node(const Node& node) noexcept {
    // detail::MemoryNode is final and the only storage that sets the flag.
    return node.is_memory_node();
  }
  static const char* static_type_name() noexcept { return "TensorDict"; }

  /// As TensorDictBase::index, returning a TensorDict.
  TensorDict index(IndexList index) const;
  TensorDict operator[](int64_t i) const;

  /// Python's TensorDict.from_consolidated(filename): maps the consolidated
  /// file at `path` (copy-on-write: the file is never modified) and returns a
  /// tensordict whose leaves are views of that one mapping, of the class the
  /// metadata names (a TensorDict or a LazyStackedTensorDict). Entries come in
  /// the metadata's order (non-tensors, leaves, nested), locked as recorded.
  /// FormatError naming the file for a truncated or corrupt file (length
  /// footer, JSON, leaf ranges outside the buffer, unknown dtype or class).
  static TensorDictBase from_consolidated(const std::string& path);
  /// The same from a buffer (1-D uint8, CPU) and its metadata, e.g. received
  /// over a network; leaves are views of `storage`.
  static TensorDictBase from_consolidated(const at::Tensor& storage,
                                          const nlohmann::ordered_json& metadata);

  /// Constructor options by name, for code that prefers them to positional
  /// arguments: `TensorDict::make(items, {.batch_size = {4}, .lock = true})`.
  struct Options {
    std::vector<int64_t> batch_size = {};
    std::optional<at::Device> device = std::nullopt;
    bool lock = false;
  };
  static TensorDict make(const std::vector<Item>& items, const Options& options);
};

/// Result of max(dim)/min(dim): values and their indices, same structure.
struct TensorDictBase::ValuesIndices {
  TensorDict values;
  TensorDict indices;
};

}  // namespace tensordict
