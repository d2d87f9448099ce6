#pragma once
/// @file non_tensor.h
/// NonTensorData: a JSON value stored in a tensordict, standing for "the same
/// value for every element of the batch" (Python's tensordict.NonTensorData).

#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tensordict {

/// A non-tensor leaf: any JSON-representable value (string, number, bool, list,
/// object, null) with a batch size. Copies are deep (the JSON value is copied).
class NonTensorData {
 public:
  NonTensorData() = default;
  /// Wraps `data`; the batch size is set to the parent's when it is stored.
  explicit NonTensorData(nlohmann::json data,
                         std::vector<int64_t> batch_size = {},
                         std::optional<c10::Device> device = std::nullopt)
      : data_(std::move(data)),
        batch_size_(std::move(batch_size)),
        device_(device) {}

  /// The wrapped value.
  const nlohmann::json& data() const noexcept { return data_; }
  nlohmann::json& data() noexcept { return data_; }

  c10::IntArrayRef batch_size() const noexcept { return batch_size_; }
  void set_batch_size(std::vector<int64_t> batch_size) {
    batch_size_ = std::move(batch_size);
  }
  std::optional<c10::Device> device() const noexcept { return device_; }
  void set_device(std::optional<c10::Device> device) { device_ = device; }

  /// Python's repr: NonTensorData(data=cat, batch_size=torch.Size([4]), device=None)
  std::string repr() const;

  friend bool operator==(const NonTensorData& a, const NonTensorData& b) {
    return a.data_ == b.data_ && a.batch_size_ == b.batch_size_ &&
           a.device_ == b.device_;
  }

 private:
  nlohmann::json data_;
  std::vector<int64_t> batch_size_;
  std::optional<c10::Device> device_;
};

}  // namespace tensordict
