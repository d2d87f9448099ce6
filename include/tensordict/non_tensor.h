#pragma once
/// @file non_tensor.h
/// Non-tensor entries of a tensordict:
///   - NonTensorData: one JSON value standing for "the same value for every
///     element of the batch" (Python's tensordict.NonTensorData);
///   - NonTensorStack: one JSON value per element of the batch (Python's
///     tensordict.NonTensorStack), e.g. a label per row.

#include <ATen/TensorIndexing.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tensordict {

class Value;

/// A non-tensor leaf: any JSON-representable value (string, number, bool, list,
/// object, null) with a batch size. Copies are deep (the JSON value is copied).
class NonTensorData {
 public:
  NonTensorData() = default;
  /// Wraps `data`; the batch size is set to the parent's when it is stored.
  explicit NonTensorData(nlohmann::json data, std::vector<int64_t> batch_size = {},
                         std::optional<c10::Device> device = std::nullopt)
      : data_(std::move(data)), batch_size_(std::move(batch_size)), device_(device) {}

  /// The wrapped value.
  const nlohmann::json& data() const noexcept { return data_; }
  nlohmann::json& data() noexcept { return data_; }

  c10::IntArrayRef batch_size() const noexcept { return batch_size_; }
  void set_batch_size(std::vector<int64_t> batch_size) { batch_size_ = std::move(batch_size); }
  std::optional<c10::Device> device() const noexcept { return device_; }
  void set_device(std::optional<c10::Device> device) { device_ = device; }

  /// Python's tolist(): the value repeated in nested lists over the batch
  /// dims (the value itself when the batch size is []).
  nlohmann::json tolist() const;

  /// Python's repr: NonTensorData(data=cat, batch_size=torch.Size([4]), device=None)
  /// (strings as they are, other values in Python's spelling: [1, 2], True, None).
  std::string repr() const;

  friend bool operator==(const NonTensorData& a, const NonTensorData& b) {
    return a.data_ == b.data_ && a.batch_size_ == b.batch_size_ && a.device_ == b.device_;
  }

 private:
  nlohmann::json data_;
  std::vector<int64_t> batch_size_;
  std::optional<c10::Device> device_;
};

/// Per-element non-tensor values: one JSON value for each element of a batch
/// of at least one dim, kept flat in row-major order (Python's NonTensorStack).
///
/// In a tensordict it behaves like a tensor leaf whose elements are JSON
/// values: its batch size starts with the tensordict's (it may have more
/// dims), and indexing, index assignment, shape operations and stack/cat move
/// the values with their elements. Copies are deep.
///
/// @code
///   namespace td = tensordict;
///   td::TensorDict data({{"obs", torch::zeros({3, 4})},
///                        {"task", td::NonTensorStack({"push", "pull", "lift"})}}, {3});
///   data[1].get_non_tensor("task");       // "pull"
///   data.index({torch::tensor({2, 0})}).get_non_tensor("task");  // ["lift", "push"]
/// @endcode
class NonTensorStack {
 public:
  /// An empty stack of batch size [0].
  NonTensorStack() : batch_size_{0} {}
  /// A 1-D stack holding `values` (batch size [values.size()]).
  NonTensorStack(std::vector<nlohmann::json> values,  // NOLINT(implicit)
                 std::optional<c10::Device> device = std::nullopt);
  /// `nested` is a nested list with one level per dim of `batch_size`
  /// (`batch_size[0]` lists of `batch_size[1]` ... values), as tolist()
  /// returns it. ValueError when `batch_size` has no dim, or `nested` is not
  /// a list or a length differs (the message says where).
  NonTensorStack(const nlohmann::json& nested, std::vector<int64_t> batch_size,
                 std::optional<c10::Device> device = std::nullopt);

  /// Python's loader rule (NonTensorStack._from_list): a list whose items are
  /// all lists of one length adds a batch dim, recursively; anything else is a
  /// value. So [[0, 1], [0, 1], [0, 1]] has batch size [3, 2] (values that are
  /// themselves equal-length lists are ambiguous). ValueError when `list` is
  /// not a list.
  static NonTensorStack from_list(const nlohmann::json& list,
                                  std::optional<c10::Device> device = std::nullopt);
  /// `data`'s value repeated over its batch size (Python's maybe_to_stack).
  /// ValueError when its batch size is [].
  static NonTensorStack from_non_tensor(const NonTensorData& data);
  /// Values already flat in row-major order; values.size() must be the
  /// product of `batch_size` (ValueError).
  static NonTensorStack from_flat(std::vector<nlohmann::json> values,
                                  std::vector<int64_t> batch_size,
                                  std::optional<c10::Device> device = std::nullopt);

  c10::IntArrayRef batch_size() const noexcept { return batch_size_; }
  /// Number of batch dims (at least 1).
  int64_t dim() const noexcept { return static_cast<int64_t>(batch_size_.size()); }
  /// Number of values (the product of the batch size).
  int64_t numel() const noexcept { return static_cast<int64_t>(values_.size()); }
  std::optional<c10::Device> device() const noexcept { return device_; }
  void set_device(std::optional<c10::Device> device) { device_ = device; }

  /// The values, flat, in row-major order of the batch.
  const std::vector<nlohmann::json>& values() const noexcept { return values_; }
  /// The nested list over the batch dims (Python's tolist()).
  nlohmann::json tolist() const;
  /// The value at `position` (one index per batch dim, negative counts from
  /// the end). IndexError when out of range or of the wrong length.
  const nlohmann::json& at(c10::IntArrayRef position) const;
  /// True when every value equals the first one (true when empty).
  bool all_equal() const;

  /// stack[index] with any LibTorch index over the batch dims: a
  /// NonTensorData (batch size []) when the index selects one element (an
  /// integer per dim), a NonTensorStack otherwise (even when the selected
  /// values are equal, as in Python). IndexError as for tensors.
  Value index(at::ArrayRef<at::indexing::TensorIndex> index) const;
  /// stack[i] along the first dim.
  Value operator[](int64_t i) const;
  /// stack[index] = value: `value` is written into every selected element.
  NonTensorStack& index_put_(at::ArrayRef<at::indexing::TensorIndex> index,
                             const NonTensorData& value);
  /// stack[index] = values: `value`'s batch size must broadcast to the
  /// indexed shape (ShapeError).
  NonTensorStack& index_put_(at::ArrayRef<at::indexing::TensorIndex> index,
                             const NonTensorStack& value);

  /// Shape operations over the batch dims; the values move with their
  /// elements. ShapeError / IndexError as for a tensor of the batch shape.
  NonTensorStack reshape(c10::IntArrayRef shape) const;
  NonTensorStack unsqueeze(int64_t dim) const;
  NonTensorStack permute(c10::IntArrayRef dims) const;
  NonTensorStack transpose(int64_t dim0, int64_t dim1) const;
  NonTensorStack expand(c10::IntArrayRef shape) const;
  /// One element per index along `dim` (NonTensorData for a 1-D stack).
  std::vector<Value> unbind(int64_t dim = 0) const;

  /// Python's repr: the values in Python's list spelling (cut after 50
  /// characters, as Python does), the batch size and the device:
  /// NonTensorStack(\n    ['a', 'b'],\n    batch_size=torch.Size([2]),\n    device=None)
  std::string repr() const;

  friend bool operator==(const NonTensorStack& a, const NonTensorStack& b) {
    return a.values_ == b.values_ && a.batch_size_ == b.batch_size_ && a.device_ == b.device_;
  }

 private:
  std::vector<nlohmann::json> values_;
  std::vector<int64_t> batch_size_;
  std::optional<c10::Device> device_;
};

}  // namespace tensordict
