#pragma once
/// @file state_dict.h
/// StateDict: the state dict of a tensordict (Python's `td.state_dict()`), in
/// the three layouts Python tensordict writes, and its exchange with Python
/// through files written with torch::pickle_save.
///
/// Layouts (TensorDictBase::state_dict, StateDictOptions):
///   - flat (default; Python >= 0.12): items are the tensor leaves under
///     dot-joined keys ("a", "sub.b"); metadata() has one entry per node
///     ("" for the root, "sub", "sub.inner", ...; a node's entry precedes its
///     leaves), a NonTensorData leaf is a node with `type` "NonTensorData";
///   - nested (flatten = false): a nested tensordict is a nested StateDict
///     item, and every level has its own metadata {"": ...};
///   - legacy (Python <= 0.11, 0.3.2 included): no metadata; every level ends
///     with the items "__batch_size" and "__device".
/// TensorDictBase::load_state_dict reads all three.
///
/// A StateDict holds tensors by handle: copying one is cheap and aliases the
/// tensors.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace c10 {
struct IValue;
}

namespace tensordict {

class StateDict;

/// Options of TensorDictBase::state_dict (Python's keyword arguments).
struct StateDictOptions {
  /// true: one level of dot-joined keys with the metadata of every node
  /// (Python's default). false: a nested StateDict per nested tensordict.
  bool flatten = true;
  /// Keep the leaves as they are. Default: leaves are detached (not cloned),
  /// so they share memory with the tensordict.
  bool keep_vars = false;
  /// Python <= 0.11 layout: no metadata; each level holds "__batch_size" and
  /// "__device" items after its data items, and leaves are detached clones.
  /// With flatten, keys are flattened first and only the root has those two
  /// items. `{.flatten = false, .legacy = true}` is the layout that Python
  /// 0.3.2 and current Python both load from a plain dict (docs/state_dict.md).
  bool legacy = false;
};

/// The metadata of one node (Python's `sd._metadata[prefix]`).
struct StateDictMetadata {
  std::vector<int64_t> batch_size;
  std::optional<at::Device> device;
  /// Python's "_type": empty for a tensordict, "NonTensorData" for a
  /// NonTensorData leaf.
  std::string type;
  /// Python's "_non_tensor" of a NonTensorData leaf:
  /// {"data": value, "_metadata": null, "_is_non_tensor": true}; null for a
  /// tensordict.
  nlohmann::json non_tensor;

  friend bool operator==(const StateDictMetadata&, const StateDictMetadata&) = default;
};

/// One value of a StateDict.
class StateDictItem {
 public:
  enum class Kind : std::uint8_t {
    Tensor,     ///< a leaf
    Nested,     ///< a nested StateDict (flatten = false, legacy)
    BatchSize,  ///< legacy "__batch_size" (Python's torch.Size)
    Device,     ///< legacy "__device" (Python's torch.device or None)
    Value,      ///< any other value, as JSON (legacy "_non_tensordict")
  };

  StateDictItem(at::Tensor tensor);  // NOLINT(implicit)
  StateDictItem(StateDict nested);   // NOLINT(implicit)
  static StateDictItem of_batch_size(std::vector<int64_t> batch_size);
  static StateDictItem of_device(std::optional<at::Device> device);
  static StateDictItem of_value(nlohmann::json value);

  Kind kind() const noexcept { return kind_; }
  bool is_tensor() const noexcept { return kind_ == Kind::Tensor; }
  bool is_nested() const noexcept { return kind_ == Kind::Nested; }
  /// The value of the given kind; TypeError when the item is of another kind.
  const at::Tensor& tensor() const;
  const StateDict& nested() const;
  const std::vector<int64_t>& batch_size() const;
  std::optional<at::Device> device() const;
  const nlohmann::json& value() const;

 private:
  StateDictItem() = default;
  Kind kind_ = Kind::Tensor;
  at::Tensor tensor_;
  std::shared_ptr<const StateDict> nested_;
  std::vector<int64_t> batch_size_;
  std::optional<at::Device> device_;
  nlohmann::json value_;
};

/// Ordered items (key -> StateDictItem) plus ordered metadata (node prefix ->
/// StateDictMetadata): Python's OrderedDict with its `_metadata` attribute.
class StateDict {
 public:
  using Item = StateDictItem;
  using Metadata = StateDictMetadata;

  StateDict() = default;

  // ---- items ----------------------------------------------------------------
  /// The items in insertion order.
  const std::vector<std::pair<std::string, Item>>& items() const noexcept { return items_; }
  std::vector<std::string> keys() const;
  std::size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  /// The item at key, nullptr when missing.
  const Item* find(std::string_view key) const;
  /// The item at key; KeyError listing the keys when missing.
  const Item& at(std::string_view key) const;
  /// at(key).tensor().
  const at::Tensor& tensor(std::string_view key) const { return at(key).tensor(); }
  /// Adds an item at the end, or replaces the item at key in place.
  StateDict& insert(std::string key, Item item);
  /// Removes the item at key; false when there was none.
  bool erase(std::string_view key);

  // ---- metadata -------------------------------------------------------------
  /// Python's `_metadata`, in insertion order. Empty for the legacy layout
  /// (and for a plain dict): has_metadata() is then false.
  const std::vector<std::pair<std::string, Metadata>>& metadata() const noexcept {
    return metadata_;
  }
  bool has_metadata() const noexcept { return !metadata_.empty(); }
  /// The metadata of the node at `prefix` ("" for the root), nullptr if none.
  const Metadata* find_metadata(std::string_view prefix) const;
  /// Adds the metadata of a node at the end, or replaces it in place.
  StateDict& set_metadata(std::string prefix, Metadata metadata);

 private:
  std::vector<std::pair<std::string, Item>> items_;
  std::unordered_map<std::string, std::size_t> index_;  // key -> position in items_
  std::vector<std::pair<std::string, Metadata>> metadata_;
};

// ---- exchange with Python (torch::pickle_save / torch::pickle_load) ----------

/// The state dict as an IValue: a Dict[str, Any] of the items (tensors, nested
/// dicts, "__batch_size" as a tuple of ints, "__device" as a device or None,
/// other values as None/bool/int/float/str/list/dict). When the state dict
/// has metadata, it is stored as one more item "_metadata" mapping each prefix
/// to {"batch_size": tuple, "device": device or None[, "_type": str,
/// "_non_tensor": dict]} (a plain dict cannot carry Python's `_metadata`
/// attribute). ValueError when an item is itself called "_metadata" or a
/// value has no IValue form.
c10::IValue state_dict_to_ivalue(const StateDict& state_dict);
/// The inverse of state_dict_to_ivalue. Also reads what Python writes with
/// torch.save of a plain dict (tuples or lists for batch sizes, devices as
/// torch.device, strings or None). FormatError naming the key otherwise.
StateDict state_dict_from_ivalue(const c10::IValue& value);

/// Writes state_dict_to_ivalue(state_dict) to `path` with torch::pickle_save:
/// a file Python's torch.load reads (with weights_only=False, or with
/// torch.jit._pickle.restore_type_tag allow-listed). See docs/state_dict.md
/// for what Python sees and how to pass it to td.load_state_dict.
/// StorageError when the file cannot be written.
void save_state_dict(const StateDict& state_dict, const std::string& path);

/// How save_state_dict writes its file.
struct SaveStateDictOptions {
  /// Survive a power loss, not only a crash of the process: the new file is
  /// fsync()ed before it is renamed over `path`, and the directory after.
  /// Off by default, as torch.save (docs/storage.md has the cost). A failed
  /// fsync is a StorageError and the earlier file stays as it was.
  bool durable = false;
};
/// save_state_dict(state_dict, path) with options.
void save_state_dict(const StateDict& state_dict, const std::string& path,
                     const SaveStateDictOptions& options);
/// Reads a file written by save_state_dict, or by Python's torch.save of a
/// plain dict of tensors (see state_dict_from_ivalue). FormatError naming the
/// file when it is not a readable pickle archive. The file is read once into
/// one buffer and the tensors are views of it (as from_consolidated's are):
/// it is freed with the last of them, so clone() a value kept alone.
StateDict load_state_dict_file(const std::string& path);

}  // namespace tensordict
