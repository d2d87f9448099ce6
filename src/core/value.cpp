// Value, NonTensorData and Node defaults.
#include "internal.h"

#include <tensordict/detail/format.h>
#include <tensordict/node.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

namespace tensordict {

const char* to_string(EntryKind kind) noexcept {
  switch (kind) {
    case EntryKind::Tensor: return "Tensor";
    case EntryKind::TensorDict: return "TensorDict";
    case EntryKind::NonTensor: return "NonTensorData";
    case EntryKind::NonTensorStack: return "NonTensorStack";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_kind(EntryKind want, EntryKind got) {
  throw TypeError(std::string("expected a ") + to_string(want) +
                  " entry, found a " + to_string(got));
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
  std::string data =
      data_.is_string() ? data_.get<std::string>() : detail::python_repr(data_);
  return "NonTensorData(data=" + data +
         ", batch_size=" + detail::format_torch_size(batch_size_) +
         ", device=" + (device_ ? device_->str() : std::string("None")) + ")";
}

// ---- Node defaults ------------------------------------------------------

std::optional<EntryKind> Node::kind(std::string_view key) const {
  auto v = find(key);
  if (!v) return std::nullopt;
  return v->kind();
}

std::optional<TensorMeta> Node::tensor_meta(std::string_view key) const {
  auto v = find(key);
  if (!v || !v->is_tensor()) return std::nullopt;
  const auto& t = v->tensor();
  return TensorMeta{t.sizes().vec(), t.scalar_type(), t.device()};
}

at::Tensor Node::read_at(std::string_view key, IndexList index) const {
  auto v = find(key);
  if (!v) throw KeyError("key '" + std::string(key) + "' not found");
  return v->tensor().index(index);
}

void Node::write_(std::string_view key, const at::Tensor& value) {
  auto v = find(key);
  if (!v) throw KeyError("key '" + std::string(key) + "' not found");
  at::Tensor dest = v->tensor();
  dest.copy_(value);
}

void Node::write_at_(std::string_view key, IndexList index,
                     const at::Tensor& value) {
  auto v = find(key);
  if (!v) throw KeyError("key '" + std::string(key) + "' not found");
  at::Tensor dest = v->tensor();
  dest.index_put_(index, value);
}

void Node::create_leaf(std::string_view key, at::IntArrayRef shape,
                       const at::TensorOptions& options) {
  write(key, at::zeros(shape, options));
}

TensorDictBase Node::create_nested(std::string_view key,
                                   at::IntArrayRef batch_size,
                                   std::optional<at::Device> device) {
  TensorDict child(batch_size, device);
  write(key, child);
  return child;
}

const Value* Node::peek(std::string_view) const { return nullptr; }

// ---- MemoryNode ---------------------------------------------------------

namespace detail {

std::vector<std::string> MemoryNode::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.first);
  return out;
}

std::optional<EntryKind> MemoryNode::kind(std::string_view key) const {
  const Value* v = peek(key);
  if (!v) return std::nullopt;
  return v->kind();
}

std::optional<Value> MemoryNode::find(std::string_view key) const {
  const Value* v = peek(key);
  if (!v) return std::nullopt;
  return *v;
}

void MemoryNode::rebuild_index() {
  std::size_t cap = 8;
  unsigned bits = 3;
  while (cap < kSlotsPerEntry * entries_.size()) {
    cap *= 2;
    ++bits;
  }
  slots_.assign(cap, -1);
  slot_mask_ = cap - 1;
  slot_shift_ = 64 - bits;
  for (std::size_t pos = 0; pos < tags_.size(); ++pos) insert_slot(pos);
}

void MemoryNode::insert_slot(std::size_t pos) {
  for (std::size_t i = slot_of(tags_[pos]);; i = (i + 1) & slot_mask_) {
    if (slots_[i] < 0) {
      slots_[i] = static_cast<std::int32_t>(pos);
      return;
    }
  }
}

void MemoryNode::write(std::string_view key, Value value) {
  auto pos = position(key);
  if (pos != npos) {
    entries_[pos].second = std::move(value);
    return;
  }
  entries_.emplace_back(std::string(key), std::move(value));
  tags_.push_back(tag_of(key));
  if (slots_.size() < kSlotsPerEntry * entries_.size())
    rebuild_index();
  else
    insert_slot(entries_.size() - 1);
}

void MemoryNode::write_(std::string_view key, const at::Tensor& value) {
  Value* v = peek_mut(key);
  if (!v) throw KeyError("key '" + std::string(key) + "' not found");
  std::get<0>(v->variant()).copy_(value);
}

void MemoryNode::remove(std::string_view key) {
  auto pos = position(key);
  if (pos == npos) return;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(pos));
  tags_.erase(tags_.begin() + static_cast<std::ptrdiff_t>(pos));
  rebuild_index();
}

}  // namespace detail
}  // namespace tensordict
