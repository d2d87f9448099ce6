// Value, NonTensorData and the Node defaults.
#include "core/internal.h"

#include <tensordict/detail/format.h>
#include <tensordict/node.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

namespace tensordict {

const char* to_string(EntryKind kind) noexcept {
  switch (kind) {
    case EntryKind::Tensor:
      return "Tensor";
    case EntryKind::TensorDict:
      return "TensorDict";
    case EntryKind::NonTensor:
      return "NonTensorData";
    case EntryKind::NonTensorStack:
      return "NonTensorStack";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_kind(EntryKind want, EntryKind got) {
  throw TypeError(std::string("expected a ") + to_string(want) + " entry, found a " +
                  to_string(got));
}
}  // namespace

const at::Tensor& Value::tensor() const& {
  if (!is_tensor()) wrong_kind(EntryKind::Tensor, kind());
  return std::get<0>(v_);
}
at::Tensor Value::tensor() && {
  if (!is_tensor()) wrong_kind(EntryKind::Tensor, kind());
  return std::move(std::get<0>(v_));
}
const TensorDictBase& Value::tensordict() const& {
  if (!is_tensordict()) wrong_kind(EntryKind::TensorDict, kind());
  return std::get<1>(v_);
}
const NonTensorData& Value::non_tensor() const& {
  if (!is_non_tensor()) wrong_kind(EntryKind::NonTensor, kind());
  return std::get<2>(v_);
}
NonTensorData& Value::non_tensor() & {
  if (!is_non_tensor()) wrong_kind(EntryKind::NonTensor, kind());
  return std::get<2>(v_);
}
const NonTensorStack& Value::non_tensor_stack() const& {
  if (!is_non_tensor_stack()) wrong_kind(EntryKind::NonTensorStack, kind());
  return std::get<3>(v_);
}
NonTensorStack& Value::non_tensor_stack() & {
  if (!is_non_tensor_stack()) wrong_kind(EntryKind::NonTensorStack, kind());
  return std::get<3>(v_);
}

std::string NonTensorData::repr() const {
  std::string data = data_.is_string() ? data_.get<std::string>() : detail::python_repr(data_);
  return "NonTensorData(data=" + data + ", batch_size=" + detail::format_torch_size(batch_size_) +
         ", device=" + (device_ ? device_->str() : std::string("None")) + ")";
}

// ---- Node defaults ------------------------------------------------------

namespace {
[[noreturn]] void throw_no_leaf(const Node& n, std::string_view key) {
  throw KeyError("key '" + std::string(key) + "' not found in " + n.type_name());
}
}  // namespace

at::Tensor Node::read_at(std::string_view key, const RowSelection& rows) const {
  auto v = find(key);
  if (!v) throw_no_leaf(*this, key);
  return rows.apply(v->tensor());
}

void Node::read_leaves(const RowSelection& rows, std::span<LeafRead> leaves) const {
  for (auto& l : leaves) {
    try {
      l.out = l.node->read_at(l.key(), rows);
    } catch (const StorageError&) {
      detail::rethrow_storage_error(l.path, "reading");
    }
  }
}

void Node::write_(std::string_view key, const at::Tensor& value) {
  auto v = find(key);
  if (!v) throw_no_leaf(*this, key);
  at::Tensor dest = v->tensor();
  dest.copy_(value);
}

void Node::write_at_(std::string_view key, const RowSelection& rows, const at::Tensor& value) {
  auto v = find(key);
  if (!v) throw_no_leaf(*this, key);
  at::Tensor dest = v->tensor();
  rows.put(dest, value);
}

void Node::write_leaves_(const RowSelection& rows, std::span<const LeafWrite> leaves) {
  for (const auto& l : leaves) {
    try {
      if (rows.is_all())
        l.node->write_(l.key(), l.value);
      else
        l.node->write_at_(l.key(), rows, l.value);
    } catch (const StorageError&) {
      detail::rethrow_storage_error(l.path, "writing");
    }
  }
}

void Node::create_leaves(std::span<const LeafCreate> leaves) {
  for (const auto& l : leaves) {
    try {
      l.node->create_leaf(l.key(), l.shape, l.options);
    } catch (const StorageError&) {
      detail::rethrow_storage_error(l.path, "allocating");
    }
  }
}

void Node::create_leaf(std::string_view key, at::IntArrayRef shape,
                       const at::TensorOptions& options) {
  write(key, at::zeros(shape, options));
}

TensorDictBase Node::create_nested(std::string_view key, at::IntArrayRef batch_size,
                                   std::optional<at::Device> device) {
  TensorDict child(batch_size, device);
  write(key, child);
  return child;
}

const Value* Node::peek(std::string_view) const { return nullptr; }

}  // namespace tensordict
