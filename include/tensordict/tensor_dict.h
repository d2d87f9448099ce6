#pragma once
/// @file tensor_dict.h
/// TensorDict: the in-memory tensordict.

#include <tensordict/node.h>
#include <tensordict/tensor_dict_base.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tensordict {

namespace detail {

/// Transparent string hash so lookups by string_view do not allocate.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

/// Storage of an in-memory TensorDict: entries in insertion order plus a hash
/// index from key to position.
class MemoryNode final : public Node {
 public:
  MemoryNode(std::vector<int64_t> batch_size, std::optional<at::Device> device)
      : batch_size_(std::move(batch_size)), device_(device) {
    holds_values_ = true;
    is_memory_node_ = true;
  }
  /// Non-virtual peek, for the core's hot paths.
  const Value* lookup(std::string_view key) const {
    auto pos = position(key);
    return pos == npos ? nullptr : &entries_[pos].second;
  }
  std::string type_name() const override { return "TensorDict"; }
  at::IntArrayRef batch_size() const override { return batch_size_; }
  void set_batch_size(std::vector<int64_t> b) override {
    batch_size_ = std::move(b);
  }
  std::optional<at::Device> device() const override { return device_; }
  void set_device(std::optional<at::Device> d) override { device_ = d; }
  std::vector<std::string> keys() const override;
  std::size_t size() const override { return entries_.size(); }
  std::optional<EntryKind> kind(std::string_view key) const override;
  std::optional<Value> find(std::string_view key) const override;
  void write(std::string_view key, Value value) override;
  void write_(std::string_view key, const at::Tensor& value) override;
  void remove(std::string_view key) override;
  const Value* peek(std::string_view key) const override {
    auto pos = position(key);
    return pos == npos ? nullptr : &entries_[pos].second;
  }
  /// Mutable access for the core's in-place paths.
  Value* peek_mut(std::string_view key) {
    auto pos = position(key);
    return pos == npos ? nullptr : &entries_[pos].second;
  }
  const std::vector<std::pair<std::string, Value>>& entries() const {
    return entries_;
  }
  void reserve(std::size_t n) {
    entries_.reserve(n);
    tags_.reserve(n);
  }

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  // Small levels (the common case) are scanned linearly: cheaper than hashing
  // and no extra allocation per key. Larger ones get a hash index.
  static constexpr std::size_t kLinearLimit = 16;
  // The first 8 bytes and the length of a key, compared before anything
  // else: for keys of up to 8 bytes a tag match is a key match, and the scan
  // touches one small contiguous array instead of the entries.
  struct KeyTag {
    std::uint64_t head;
    std::size_t size;
  };
  static KeyTag tag_of(std::string_view key) noexcept {
    std::uint64_t head = 0;
    std::memcpy(&head, key.data(), key.size() < 8 ? key.size() : 8);
    return KeyTag{head, key.size()};
  }
  std::size_t position(std::string_view key) const {
    if (index_.empty()) {
      const KeyTag t = tag_of(key);
      for (std::size_t i = 0; i < tags_.size(); ++i) {
        if (tags_[i].head != t.head || tags_[i].size != t.size) continue;
        if (t.size <= 8 ||
            std::memcmp(entries_[i].first.data() + 8, key.data() + 8, t.size - 8) == 0)
          return i;
      }
      return npos;
    }
    auto it = index_.find(key);
    return it == index_.end() ? npos : it->second;
  }
  void rebuild_index();

  std::vector<int64_t> batch_size_;
  std::optional<at::Device> device_;
  std::vector<std::pair<std::string, Value>> entries_;
  std::vector<KeyTag> tags_;  // tags_[i] belongs to entries_[i]
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>>
      index_;
};

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
  explicit TensorDict(at::IntArrayRef batch_size,
                      std::optional<at::Device> device = std::nullopt);
  /// Wraps an existing in-memory storage (see TensorDictBase::as).
  explicit TensorDict(std::shared_ptr<Node> node);

  static bool is_node(const Node& node) noexcept {
    return dynamic_cast<const detail::MemoryNode*>(&node) != nullptr;
  }
  static const char* static_type_name() noexcept { return "TensorDict"; }

  /// As TensorDictBase::index, returning a TensorDict.
  TensorDict index(IndexList index) const;
  TensorDict operator[](int64_t i) const;

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
