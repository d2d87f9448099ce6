// The generic core's key walks: for_each, keys, items, values, the entry
// views and membership, written once against the Node interface.
#include "core/internal.h"
#include "core/lazy_dispatch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace tensordict {

using detail::format_shape;
using detail::throw_locked;
using detail::throw_missing;
using detail::walk_parent;

namespace {

[[noreturn]] void throw_keys_changed_in_loop() {
  throw Error(
      "the keys of a tensordict level changed (a key was added or removed) while its entries "
      "were being iterated (items(), for_each); iterate a copy to change the keys in the loop: "
      "std::vector<std::pair<NestedKey, Value>> items = td.items()");
}

void visit(const Node& node, const NestedKey& path, const KeysOptions& opt,
           const std::function<void(const NestedKey&, const Value&)>& fn, bool need_values = true) {
  auto emit = [&](const NestedKey& key, const Value& v) {
    switch (v.kind()) {
      case EntryKind::Tensor:
        fn(key, v);
        break;
      case EntryKind::NonTensor:
      case EntryKind::NonTensorStack:
        if (!opt.leaves_only || opt.non_tensor_leaves) fn(key, v);
        break;
      case EntryKind::TensorDict:
        if (!opt.leaves_only) fn(key, v);
        if (opt.include_nested) visit(v.tensordict().node(), key, opt, fn, need_values);
        break;
    }
  };
  auto emit_entry = [&](const std::string& k, const Value& v) {
    emit(path.empty() ? NestedKey(k) : path.child(k), v);
  };
  if (node.is_memory_node()) {
    // The level's entries in place; at the top, the shared key list instead
    // of a NestedKey per entry.
    // A callback that adds or removes a key of this level ends the walk with
    // the error of ItemList (entries are read by position).
    const auto& mem = static_cast<const detail::MemoryNode&>(node);
    const auto& entries = mem.entries();
    const std::uint64_t key_changes = *mem.key_changes();
    const auto keys = path.empty() ? mem.key_list() : nullptr;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (*mem.key_changes() != key_changes) throw_keys_changed_in_loop();
      if (keys)
        emit((*keys)[i], entries[i].second);
      else
        emit_entry(entries[i].first, entries[i].second);
    }
  } else if (node.holds_values()) {
    for (const auto& k : node.keys()) emit_entry(k, *node.peek(k));
  } else {
    for (const auto& k : node.keys()) {
      // Read a leaf only when the caller uses it (a storage or a lazy stack
      // would otherwise read, or stack, every leaf just to list keys).
      auto kind = node.kind(k);
      if (!kind) continue;
      if (!need_values && *kind == EntryKind::Tensor) {
        static const Value placeholder{at::Tensor()};
        emit_entry(k, placeholder);
        continue;
      }
      if (!need_values && (*kind == EntryKind::NonTensor || *kind == EntryKind::NonTensorStack) &&
          opt.leaves_only && !opt.non_tensor_leaves)
        continue;
      auto v = node.find(k);
      if (v) emit_entry(k, *v);
    }
  }
}

// Stable sort by the '.'-joined key, each key joined once rather than twice
// per comparison.
template <class T, class KeyOf>
void sort_by_joined_key(std::vector<T>& items, KeyOf key_of) {
  std::vector<std::pair<std::string, std::size_t>> order;
  order.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) order.emplace_back(key_of(items[i]).join("."), i);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<T> sorted;
  sorted.reserve(items.size());
  for (const auto& [joined, i] : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
}
}  // namespace

namespace {
std::vector<std::pair<NestedKey, Value>> collect_items(const Node& node,
                                                       const KeysOptions& options) {
  std::vector<std::pair<NestedKey, Value>> out;
  KeysOptions unsorted = options;
  unsorted.sort = false;
  visit(node, NestedKey(), unsorted,
        [&](const NestedKey& k, const Value& v) { out.emplace_back(k, v); });
  if (options.sort)
    sort_by_joined_key(out, [](const auto& item) -> const NestedKey& { return item.first; });
  return out;
}

bool top_level_only(const KeysOptions& options) {
  return !options.include_nested && !options.leaves_only && !options.sort;
}
}  // namespace

void TensorDictBase::for_each(const std::function<void(const NestedKey&, const Value&)>& fn,
                              const KeysOptions& options) const {
  if (!options.sort) {
    visit(node(), NestedKey(), options, fn);
    return;
  }
  auto all = collect_items(node(), KeysOptions{options.include_nested, options.leaves_only,
                                               options.non_tensor_leaves, true});
  for (const auto& [k, v] : all) fn(k, v);
}

ItemList TensorDictBase::items(const KeysOptions& options) const {
  const Node& n = node();
  if (top_level_only(options) && n.is_memory_node()) {
    const auto& mem = static_cast<const detail::MemoryNode&>(n);
    return ItemList(node_, mem.key_list_view(), &mem.entries(), mem.key_changes());
  }
  return ItemList(collect_items(n, options));
}

ItemList TensorDictBase::items(bool include_nested, bool leaves_only) const {
  return items(KeysOptions{include_nested, leaves_only});
}

KeyList TensorDictBase::keys(const KeysOptions& options) const {
  const Node& n = node();
  if (top_level_only(options)) {
    if (n.is_memory_node()) return KeyList(static_cast<const detail::MemoryNode&>(n).key_list());
    std::vector<NestedKey> out;
    auto names = n.keys();
    out.reserve(names.size());
    for (auto& k : names) out.emplace_back(std::move(k));
    return KeyList(std::move(out));
  }
  std::vector<NestedKey> out;
  KeysOptions unsorted = options;
  unsorted.sort = false;
  visit(
      n, NestedKey(), unsorted, [&](const NestedKey& k, const Value&) { out.push_back(k); },
      /*need_values=*/false);
  if (options.sort)
    sort_by_joined_key(out, [](const NestedKey& k) -> const NestedKey& { return k; });
  return KeyList(std::move(out));
}

KeyList TensorDictBase::keys(bool include_nested, bool leaves_only) const {
  return keys(KeysOptions{include_nested, leaves_only});
}

bool KeyList::contains(const NestedKey& key) const {
  for (const auto& k : list())
    if (k == key) return true;
  return false;
}

ItemList::ItemList(Owned items) {
  auto owned = std::make_shared<const Owned>(std::move(items));
  owned_size_ = owned->size();
  if (owned_size_ != 0) {
    keys_ = reinterpret_cast<const char*>(&owned->front().first);
    values_ = reinterpret_cast<const char*>(&owned->front().second);
  }
  key_stride_ = value_stride_ = sizeof(Owned::value_type);
  keep_alive_ = std::move(owned);
}

ItemList::Owned ItemList::to_vector() const {
  Owned out;
  out.reserve(size());
  for (const auto& [k, v] : *this) out.emplace_back(k, v);
  return out;
}

void ItemList::throw_keys_changed() { throw_keys_changed_in_loop(); }

std::vector<Value> TensorDictBase::values(const KeysOptions& options) const {
  std::vector<Value> out;
  for (auto& [k, v] : items(options)) out.push_back(v);
  return out;
}

std::vector<Value> TensorDictBase::values(bool include_nested, bool leaves_only) const {
  return values(KeysOptions{include_nested, leaves_only});
}

std::vector<std::pair<NestedKey, nlohmann::json>> TensorDictBase::non_tensor_items(
    bool include_nested) const {
  std::vector<std::pair<NestedKey, nlohmann::json>> out;
  for (auto& [k, v] : items(KeysOptions{include_nested, true, true}))
    if (v.is_non_tensor())
      out.emplace_back(k, v.non_tensor().data());
    else if (v.is_non_tensor_stack())
      out.emplace_back(k, v.non_tensor_stack().tolist());
  return out;
}

std::size_t TensorDictBase::num_keys() const { return node().size(); }

namespace {
// The entries an EntriesView iterates: an in-memory level's own (kept alive by
// the node), or a snapshot of another storage's keys, with values when asked.
std::pair<std::shared_ptr<const void>, const detail::MemoryNode::Entries*> view_entries(
    const std::shared_ptr<Node>& node, bool with_values) {
  if (node->is_memory_node())
    return {node, &static_cast<const detail::MemoryNode&>(*node).entries()};
  auto snapshot = std::make_shared<detail::MemoryNode::Entries>();
  for (auto& k : node->keys()) {
    std::optional<Value> v;
    if (with_values) v = node->find(k);
    if (with_values && !v) continue;  // removed since keys() was read
    snapshot->emplace_back(std::move(k), v ? std::move(*v) : Value(at::Tensor()));
  }
  const auto* entries = snapshot.get();
  return {std::move(snapshot), entries};
}
}  // namespace

EntriesView<EntryProjection::Key> TensorDictBase::keys_view() const {
  auto [keep, entries] = view_entries(node_ ? node_ : throw ValueError("null handle"), false);
  return {std::move(keep), entries};
}

EntriesView<EntryProjection::KeyValue> TensorDictBase::items_view() const {
  auto [keep, entries] = view_entries(node_ ? node_ : throw ValueError("null handle"), true);
  return {std::move(keep), entries};
}

bool TensorDictBase::contains(const NestedKey& key) const { return entry_kind(key).has_value(); }

std::optional<EntryKind> TensorDictBase::entry_kind(const NestedKey& key) const {
  if (key.empty()) return std::nullopt;
  const Node* n = &node();
  std::shared_ptr<Node> hold;
  for (std::size_t i = 0; i + 1 < key.size(); ++i) {
    auto v = n->find(key[i]);
    if (!v || !v->is_tensordict()) return std::nullopt;
    hold = v->tensordict().node_ptr();
    n = hold.get();
  }
  return n->kind(key.back());
}

bool TensorDictBase::is_empty() const {
  for (const auto& k : node().keys()) {
    // kind() first: a leaf makes it non-empty without being read.
    if (node().kind(k) != EntryKind::TensorDict) return false;
    if (!node().find(k)->tensordict().is_empty()) return false;
  }
  return true;
}

}  // namespace tensordict
