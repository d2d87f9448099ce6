// The in-memory storage: MemoryNode's entries and its key index.
#include <tensordict/storage/memory.h>

#include "core/internal.h"
#include "storage/memmap/mapped_file.h"

#include <ATen/ATen.h>

namespace tensordict {

// ---- MemoryNode ---------------------------------------------------------

namespace detail {

std::vector<std::string> MemoryNode::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.first);
  return out;
}

void MemoryNode::flush() {
  std::vector<const void*> synced;  // views of one mapping are synced once
  for (const auto& [key, v] : entries_) {
    if (v.is_tensor())
      sync_mapping(v.tensor(), synced);
    else if (v.is_tensordict())
      v.tensordict().node().flush();
    else
      sync_non_tensor_files(*this, key);
  }
}

std::optional<EntryKind> MemoryNode::kind(std::string_view key) const {
  const Value* v = peek(key);
  if (!v) return std::nullopt;
  return v->kind();
}

std::optional<TensorMeta> MemoryNode::tensor_meta(std::string_view key) const {
  const Value* v = peek(key);
  if (!v || !v->is_tensor()) return std::nullopt;
  const auto& t = v->tensor();
  return TensorMeta{t.sizes().vec(), t.scalar_type(), t.device()};
}

std::optional<Value> MemoryNode::find(std::string_view key) const {
  const Value* v = peek(key);
  if (!v) return std::nullopt;
  return *v;
}

MemoryNode::MemoryNode(at::IntArrayRef batch_size, std::optional<at::Device> device,
                       Entries entries, const MemoryNode& same_keys)
    : MemoryNode(batch_size, device) {
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(entries.size() == same_keys.entries_.size());
  entries_ = std::move(entries);
  index_ = same_keys.index_;
  cache_index();
}

void MemoryNode::cache_index() noexcept {
  if (!index_) {
    tags_ = nullptr;
    slots_ = nullptr;
    slot_mask_ = 0;
    slot_shift_ = 64;
    return;
  }
  tags_ = index_->tags.data();
  slots_ = index_->slots.data();
  slot_mask_ = index_->slot_mask;
  slot_shift_ = index_->slot_shift;
}

MemoryNode::KeyIndex& MemoryNode::own_index() {
  // The key list views handed out (key_list_view()) end here: the list is
  // dropped or belongs to another node's index from now on.
  ++key_changes_;
  if (!index_) {
    index_ = std::make_shared<KeyIndex>();
  } else if (index_.use_count() > 1) {
    index_ = std::make_shared<KeyIndex>(*index_);
  } else if (index_->has_key_list.load(std::memory_order_relaxed)) {
    // About to be modified: the list no longer describes it. (Writers are
    // exclusive: no reader runs concurrently.)
    index_->key_list.reset();
    index_->has_key_list.store(false, std::memory_order_relaxed);
  }
  return *index_;
}

const std::vector<NestedKey>* MemoryNode::key_list_view() const {
  if (index_ && index_->has_key_list.load(std::memory_order_acquire)) return index_->key_list.get();
  static const std::vector<NestedKey> none;
  return index_ ? key_list().get() : &none;
}

std::shared_ptr<const std::vector<NestedKey>> MemoryNode::key_list() const {
  if (!index_) {
    static const auto none = std::make_shared<const std::vector<NestedKey>>();
    return none;
  }
  const KeyIndex& ix = *index_;
  if (ix.has_key_list.load(std::memory_order_acquire)) return ix.key_list;
  std::lock_guard<std::mutex> lock(ix.key_list_mutex);
  if (!ix.has_key_list.load(std::memory_order_relaxed)) {
    auto list = std::make_shared<std::vector<NestedKey>>();
    list->reserve(entries_.size());
    for (const auto& e : entries_) list->emplace_back(e.first);
    ix.key_list = std::move(list);
    ix.has_key_list.store(true, std::memory_order_release);
  }
  return ix.key_list;
}

void MemoryNode::reserve(std::size_t n) {
  entries_.reserve(n);
  own_index().tags.reserve(n);
  cache_index();
}

void MemoryNode::rebuild_index() {
  KeyIndex& ix = own_index();
  std::size_t cap = 8;
  unsigned bits = 3;
  while (cap < kSlotsPerEntry * entries_.size()) {
    cap *= 2;
    ++bits;
  }
  ix.slots.assign(cap, -1);
  ix.slot_mask = cap - 1;
  ix.slot_shift = 64 - bits;
  cache_index();
  for (std::size_t pos = 0; pos < ix.tags.size(); ++pos) insert_slot(pos);
}

// index_ is unshared and cache_index() is current.
void MemoryNode::insert_slot(std::size_t pos) {
  auto& slots = index_->slots;
  for (std::size_t i = slot_of(index_->tags[pos]);; i = (i + 1) & slot_mask_) {
    if (slots[i] < 0) {
      slots[i] = static_cast<std::int32_t>(pos);
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
  KeyIndex& ix = own_index();  // counts the key change
  entries_.emplace_back(std::string(key), std::move(value));
  ix.tags.push_back(tag_of(key));
  cache_index();
  if (ix.slots.size() < kSlotsPerEntry * entries_.size())
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
  ++key_changes_;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(pos));
  auto& tags = own_index().tags;
  tags.erase(tags.begin() + static_cast<std::ptrdiff_t>(pos));
  rebuild_index();
}

}  // namespace detail

}  // namespace tensordict
