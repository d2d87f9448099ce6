// state_dict / load_state_dict (docs/state_dict.md) and the exchange of state
// dicts with Python: files in torch.save's layout (pickle_writer.h), read by
// the bounded reader (pickle_reader.h).
#include "core/internal.h"
#include "formats/pickle_reader.h"
#include "formats/pickle_writer.h"
#include "io/json_io.h"

#include <tensordict/state_dict.h>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/serialize.h>

#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <set>

namespace tensordict {

using detail::format_shape;
using detail::torch_dtype_repr;

// ---- StateDictItem ----------------------------------------------------------------

StateDictItem::StateDictItem(at::Tensor tensor) : kind_(Kind::Tensor), tensor_(std::move(tensor)) {}

StateDictItem::StateDictItem(StateDict nested)
    : kind_(Kind::Nested), nested_(std::make_shared<const StateDict>(std::move(nested))) {}

StateDictItem StateDictItem::of_batch_size(std::vector<int64_t> batch_size) {
  StateDictItem item;
  item.kind_ = Kind::BatchSize;
  item.batch_size_ = std::move(batch_size);
  return item;
}

StateDictItem StateDictItem::of_device(std::optional<at::Device> device) {
  StateDictItem item;
  item.kind_ = Kind::Device;
  item.device_ = device;
  return item;
}

StateDictItem StateDictItem::of_value(nlohmann::json value) {
  StateDictItem item;
  item.kind_ = Kind::Value;
  item.value_ = std::move(value);
  return item;
}

namespace {

const char* kind_name(StateDictItem::Kind kind) {
  switch (kind) {
    case StateDictItem::Kind::Tensor:
      return "a tensor";
    case StateDictItem::Kind::Nested:
      return "a nested state dict";
    case StateDictItem::Kind::BatchSize:
      return "a batch size";
    case StateDictItem::Kind::Device:
      return "a device";
    case StateDictItem::Kind::Value:
      return "a value";
  }
  return "?";
}

void expect_kind(StateDictItem::Kind have, StateDictItem::Kind want) {
  if (have != want)
    throw TypeError(std::string("state dict item is ") + kind_name(have) + ", not " +
                    kind_name(want));
}

}  // namespace

const at::Tensor& StateDictItem::tensor() const {
  expect_kind(kind_, Kind::Tensor);
  return tensor_;
}
const StateDict& StateDictItem::nested() const {
  expect_kind(kind_, Kind::Nested);
  return *nested_;
}
const std::vector<int64_t>& StateDictItem::batch_size() const {
  expect_kind(kind_, Kind::BatchSize);
  return batch_size_;
}
std::optional<at::Device> StateDictItem::device() const {
  expect_kind(kind_, Kind::Device);
  return device_;
}
const nlohmann::json& StateDictItem::value() const {
  expect_kind(kind_, Kind::Value);
  return value_;
}

// ---- StateDict ----------------------------------------------------------------------

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

const StateDictItem* StateDict::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const StateDictItem& StateDict::at(std::string_view key) const {
  if (const Item* item = find(key)) return *item;
  throw KeyError("key '" + std::string(key) + "' not found in the state dict with keys " +
                 detail::format_key_list(keys()));
}

StateDict& StateDict::insert(std::string key, Item item) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(item);
  } else {
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(item));
  }
  return *this;
}

bool StateDict::erase(std::string_view key) {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (std::size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

const StateDictMetadata* StateDict::find_metadata(std::string_view prefix) const {
  for (const auto& [p, m] : metadata_)
    if (p == prefix) return &m;
  return nullptr;
}

StateDict& StateDict::set_metadata(std::string prefix, Metadata metadata) {
  for (auto& [p, m] : metadata_) {
    if (p == prefix) {
      m = std::move(metadata);
      return *this;
    }
  }
  metadata_.emplace_back(std::move(prefix), std::move(metadata));
  return *this;
}

// ---- TensorDictBase::state_dict -------------------------------------------------------

namespace {

const char* kNonTensorType = "NonTensorData";

// Python's NonTensorData fields: {"data": ..., "_metadata": None, "_is_non_tensor": True}.
nlohmann::json non_tensor_fields(const NonTensorData& nt) {
  nlohmann::json fields = nlohmann::json::object();
  fields["data"] = nt.data();
  fields["_metadata"] = nullptr;
  fields["_is_non_tensor"] = true;
  return fields;
}

StateDictMetadata node_metadata(const TensorDictBase& td) {
  return StateDictMetadata{td.batch_size().vec(), td.device(), "", nullptr};
}

StateDictMetadata non_tensor_metadata(const NonTensorData& nt) {
  return StateDictMetadata{nt.batch_size().vec(), nt.device(), kNonTensorType,
                           non_tensor_fields(nt)};
}

// Python refuses the state dict of a lazy stack whose members have keys the
// others lack ("exclusive keys"): the stacked view cannot represent them.
void check_no_exclusive_keys(const TensorDictBase& td, const NestedKey& path) {
  const auto* ls = detail::as_lazy_stack(td);
  if (!ls) return;
  const auto common = ls->keys();
  const std::set<std::string> shared(common.begin(), common.end());
  const auto& members = ls->members();
  for (std::size_t i = 0; i < members.size(); ++i) {
    for (const auto& k : members[i].node().keys()) {
      if (!shared.count(k))
        throw ValueError("state_dict cannot complete when there are exclusive keys: member " +
                         std::to_string(i) + " of the lazy stack" +
                         (path.empty() ? std::string() : " at " + path.repr()) + " has the key '" +
                         k + "' that other members lack");
    }
  }
}

NestedKey child_key(const NestedKey& path, const std::string& k) {
  return path.empty() ? NestedKey(k) : path.child(k);
}

at::Tensor leaf_for_state_dict(const at::Tensor& t, const StateDictOptions& opt) {
  if (opt.keep_vars) return t;
  return opt.legacy ? t.detach().clone() : t.detach();
}

// One flat item; two keys that flatten to the same name are a KeyError.
void insert_flat(StateDict& out, const std::string& name, StateDictItem item,
                 const NestedKey& key) {
  if (out.contains(name))
    throw KeyError("state_dict: the key " + key.repr() + " flattens to '" + name +
                   "', which another key already produced (use flatten=false)");
  out.insert(name, std::move(item));
}

// The metadata of one node in a flat state dict; a second node flattening to
// the same prefix is a KeyError.
void insert_flat_metadata(StateDict& out, const std::string& prefix, StateDictMetadata meta,
                          const NestedKey& key) {
  if (out.find_metadata(prefix))
    throw KeyError("state_dict: " + (key.empty() ? std::string("the root") : key.repr()) +
                   " flattens to '" + prefix +
                   "', which another key already produced (use flatten=false)");
  out.set_metadata(prefix, std::move(meta));
}

// Python <= 0.11: a tensorclass (NonTensorData) is
// {"_tensordict": <its tensordict's state dict>, "_non_tensordict": {fields}}.
StateDict legacy_non_tensor(const NonTensorData& nt) {
  StateDict inner;
  inner.insert("__batch_size", StateDictItem::of_batch_size(nt.batch_size().vec()));
  inner.insert("__device", StateDictItem::of_device(nt.device()));
  StateDict out;
  out.insert("_tensordict", std::move(inner));
  out.insert("_non_tensordict", StateDictItem::of_value(non_tensor_fields(nt)));
  return out;
}

void add_legacy_footer(StateDict& out, const TensorDictBase& td, const NestedKey& path) {
  for (const char* reserved : {"__batch_size", "__device"})
    if (out.contains(reserved))
      throw KeyError(std::string("state_dict: cannot produce the legacy layout of a "
                                 "tensordict with a key '") +
                     reserved + "'" + (path.empty() ? "" : " (in " + path.repr() + ")"));
  out.insert("__batch_size", StateDictItem::of_batch_size(td.batch_size().vec()));
  out.insert("__device", StateDictItem::of_device(td.device()));
}

// Python writes a NonTensorStack as a node of NonTensorData members; that
// layout is not produced yet, and dropping the entry silently would lose data.
[[noreturn]] void refuse_non_tensor_stack(const NestedKey& key) {
  throw TypeError("state_dict(): " + key.repr() +
                  " is a NonTensorStack, which state dicts do not support yet; "
                  "exclude it or store it as a NonTensorData");
}

// The flat layouts, depth-first. Python >= 0.12: a node's metadata, then its
// leaves; a NonTensorData is a metadata node. Python <= 0.11 (td.flatten_keys
// then the items): no metadata; a NonTensorData is its tensorclass form.
void emit_flat(const TensorDictBase& td, const std::string& prefix, const NestedKey& path,
               const StateDictOptions& opt, StateDict& out) {
  check_no_exclusive_keys(td, path);
  if (!opt.legacy)
    insert_flat_metadata(out, prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1),
                         node_metadata(td), path);
  for (const auto& [k, v] : td.items()) {
    const std::string& name = k.front();
    const NestedKey key = child_key(path, name);
    switch (v.kind()) {
      case EntryKind::Tensor:
        insert_flat(out, prefix + name, leaf_for_state_dict(v.tensor(), opt), key);
        break;
      case EntryKind::TensorDict:
        emit_flat(v.tensordict(), prefix + name + ".", key, opt, out);
        break;
      case EntryKind::NonTensor:
        if (opt.legacy)
          insert_flat(out, prefix + name, legacy_non_tensor(v.non_tensor()), key);
        else
          insert_flat_metadata(out, prefix + name, non_tensor_metadata(v.non_tensor()), key);
        break;
      case EntryKind::NonTensorStack:
        refuse_non_tensor_stack(key);
    }
  }
}

// The nested layouts: one StateDict per node. Python >= 0.12: each with its
// own metadata {"": ...}. Python <= 0.11: each ending with "__batch_size"
// and "__device".
StateDict emit_nested(const TensorDictBase& td, const NestedKey& path,
                      const StateDictOptions& opt) {
  check_no_exclusive_keys(td, path);
  StateDict out;
  if (!opt.legacy) out.set_metadata("", node_metadata(td));
  for (const auto& [k, v] : td.items()) {
    const std::string& name = k.front();
    switch (v.kind()) {
      case EntryKind::Tensor:
        out.insert(name, leaf_for_state_dict(v.tensor(), opt));
        break;
      case EntryKind::TensorDict:
        out.insert(name, emit_nested(v.tensordict(), child_key(path, name), opt));
        break;
      case EntryKind::NonTensor:
        if (opt.legacy) {
          out.insert(name, legacy_non_tensor(v.non_tensor()));
        } else {
          StateDict nt;
          nt.set_metadata("", non_tensor_metadata(v.non_tensor()));
          out.insert(name, std::move(nt));
        }
        break;
      case EntryKind::NonTensorStack:
        refuse_non_tensor_stack(child_key(path, name));
    }
  }
  if (opt.legacy) add_legacy_footer(out, td, path);
  return out;
}

}  // namespace

StateDict TensorDictBase::state_dict(const StateDictOptions& options) const {
  if (!options.flatten) return emit_nested(*this, NestedKey(), options);
  StateDict out;
  emit_flat(*this, "", NestedKey(), options, out);
  if (options.legacy) add_legacy_footer(out, *this, NestedKey());
  return out;
}

// ---- TensorDictBase::load_state_dict --------------------------------------------------

namespace {

// A state dict of any layout, normalised to one tree per tensordict node.
struct LoadNode {
  std::optional<StateDictMetadata> meta;
  struct Entry {
    std::string key;
    at::Tensor tensor;                     // a leaf, or
    std::unique_ptr<LoadNode> node;        // a tensordict or NonTensorData node, or
    const StateDictItem* other = nullptr;  // anything else (refused)
  };
  std::vector<Entry> entries;

  bool is_non_tensor() const { return meta && meta->type == kNonTensorType; }
  LoadNode& child(const std::string& key) {
    for (auto& e : entries)
      if (e.key == key && e.node) return *e.node;
    entries.push_back(Entry{key, {}, std::make_unique<LoadNode>(), nullptr});
    return *entries.back().node;
  }
  Entry* find(const std::string& key) {
    for (auto& e : entries)
      if (e.key == key) return &e;
    return nullptr;
  }
  // True when no tensor and no non-tensor is reachable (Python's empty dict).
  bool is_empty() const {
    if (is_non_tensor()) return false;
    for (const auto& e : entries)
      if (!e.node || !e.node->is_empty()) return false;
    return true;
  }
};

std::vector<std::string> split_dots(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::unique_ptr<LoadNode> build_tree(const StateDict& sd, const TensorDictBase* td);

// Python <= 0.11 tensorclass form of a NonTensorData:
// {"_tensordict": {"__batch_size", "__device"}, "_non_tensordict": {fields}}.
std::unique_ptr<LoadNode> legacy_non_tensor_node(const StateDict& sd) {
  if (sd.size() != 2) return nullptr;
  const auto* td = sd.find("_tensordict");
  const auto* fields = sd.find("_non_tensordict");
  if (!td || !fields || !td->is_nested() || fields->kind() != StateDictItem::Kind::Value ||
      !fields->value().is_object() || !fields->value().contains("data"))
    return nullptr;
  auto node = std::make_unique<LoadNode>();
  StateDictMetadata meta{{}, std::nullopt, kNonTensorType, fields->value()};
  if (const auto* b = td->nested().find("__batch_size");
      b && b->kind() == StateDictItem::Kind::BatchSize)
    meta.batch_size = b->batch_size();
  if (const auto* d = td->nested().find("__device"); d && d->kind() == StateDictItem::Kind::Device)
    meta.device = d->device();
  node->meta = std::move(meta);
  return node;
}

// One item of a state dict into `node` under `key`.
void add_item(LoadNode& node, const std::string& key, const StateDictItem& item,
              const TensorDictBase* td) {
  switch (item.kind()) {
    case StateDictItem::Kind::Tensor:
      node.entries.push_back(LoadNode::Entry{key, item.tensor(), nullptr, nullptr});
      return;
    case StateDictItem::Kind::Nested: {
      auto sub = legacy_non_tensor_node(item.nested());
      if (!sub) {
        std::optional<TensorDictBase> child;
        if (td) {
          if (auto v = td->node().find(key); v && v->is_tensordict()) child = v->tensordict();
        }
        sub = build_tree(item.nested(), child ? &*child : nullptr);
      }
      node.entries.push_back(LoadNode::Entry{key, {}, std::move(sub), nullptr});
      return;
    }
    case StateDictItem::Kind::BatchSize:
    case StateDictItem::Kind::Device:
    case StateDictItem::Kind::Value:
      node.entries.push_back(LoadNode::Entry{key, {}, nullptr, &item});
      return;
  }
}

// The legacy "__batch_size"/"__device" items of a level become its metadata
// (unless it has metadata already) and are removed from its entries.
void take_legacy_metadata(LoadNode& node) {
  std::optional<StateDictMetadata> legacy;
  std::vector<LoadNode::Entry> kept;
  for (auto& e : node.entries) {
    if (e.other && e.key == "__batch_size" && e.other->kind() == StateDictItem::Kind::BatchSize) {
      if (!legacy) legacy.emplace();
      legacy->batch_size = e.other->batch_size();
    } else if (e.other && e.key == "__device" && e.other->kind() == StateDictItem::Kind::Device) {
      if (!legacy) legacy.emplace();
      legacy->device = e.other->device();
    } else {
      kept.push_back(std::move(e));
    }
  }
  node.entries = std::move(kept);
  if (!node.meta && legacy) node.meta = std::move(legacy);
  for (auto& e : node.entries)
    if (e.node && !e.node->is_non_tensor()) take_legacy_metadata(*e.node);
}

// docs/formats.md, "Metadata detection": a state dict with metadata whose keys differ from the
// tensordict's is flat (split on "."; nodes come from data keys and metadata
// prefixes). Two additions to Python's rule: metadata for a prefix other
// than "" (which only the flat layout has) also marks it, so that nested
// levels without leaves are found even when the top-level keys agree; and,
// without metadata, a key with a "." that the tensordict does not have marks
// the legacy flat layout, which Python only reads with from_flatten=True.
std::unique_ptr<LoadNode> build_tree(const StateDict& sd, const TensorDictBase* td) {
  std::set<std::string> td_keys;
  if (td)
    for (const auto& k : td->node().keys()) td_keys.insert(k);
  bool flat = false;
  if (sd.has_metadata()) {
    std::set<std::string> sd_keys;
    for (const auto& [k, item] : sd.items()) sd_keys.insert(k);
    flat = sd_keys != td_keys;
    for (const auto& [prefix, meta] : sd.metadata()) flat = flat || !prefix.empty();
  } else {
    for (const auto& [k, item] : sd.items())
      if (k.find('.') != std::string::npos && !td_keys.count(k)) flat = true;
  }
  auto root = std::make_unique<LoadNode>();
  if (!flat) {
    if (const auto* m = sd.find_metadata("")) root->meta = *m;
    for (const auto& [k, item] : sd.items()) add_item(*root, k, item, td);
    return root;
  }
  for (const auto& [k, item] : sd.items()) {
    auto parts = split_dots(k);
    LoadNode* n = root.get();
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) n = &n->child(parts[i]);
    add_item(*n, parts.back(), item, nullptr);
  }
  for (const auto& [prefix, meta] : sd.metadata()) {
    LoadNode* n = root.get();
    if (!prefix.empty())
      for (const auto& part : split_dots(prefix)) n = &n->child(part);
    n->meta = meta;
  }
  return root;
}

bool starts_with(at::IntArrayRef shape, at::IntArrayRef batch) {
  return shape.size() >= batch.size() && std::equal(batch.begin(), batch.end(), shape.begin());
}

std::string at_key(const NestedKey& key) {
  return key.empty() ? std::string("the root") : "key " + key.repr();
}

// Every check runs before any write: check_node validates one node and
// appends its writes to `plan`, which runs only when everything passed.
using Plan = std::vector<std::function<void()>>;

struct Loader {
  bool strict;
  Plan plan;

  // The batch size a node will have: its metadata's, else its current one
  // (resized to the parent's when it has fewer dims, as the setter does).
  static std::vector<int64_t> target_batch(const LoadNode* tree, const TensorDictBase& td,
                                           at::IntArrayRef parent_batch) {
    if (tree && tree->meta) return tree->meta->batch_size;
    auto current = td.batch_size();
    if (current.size() < parent_batch.size()) return parent_batch.vec();
    return current.vec();
  }

  void check_node(const LoadNode& tree, TensorDictBase td, const NestedKey& path,
                  const std::vector<int64_t>& batch) {
    Node& node = td.node();
    const bool lazy = node.is_lazy_stack();
    if (lazy && batch != td.batch_size().vec())
      throw ShapeError("load_state_dict: cannot change the batch size of the lazy stack at " +
                       at_key(path) + " from " + format_shape(td.batch_size()) + " to " +
                       format_shape(batch));
    for (auto s : batch)
      if (s < 0)
        throw ShapeError("load_state_dict: invalid batch size " + format_shape(batch) + " for " +
                         at_key(path));
    std::optional<at::Device> new_device;
    if (tree.meta && tree.meta->device) {
      const auto current = td.device();
      if (current && *current != *tree.meta->device)
        throw DeviceError("load_state_dict: the state dict of " + at_key(path) + " is on device " +
                          tree.meta->device->str() + " and the tensordict on " + current->str() +
                          "; loading across devices is not supported");
      if (!current) new_device = tree.meta->device;
    }

    Plan writes;  // this level's writes, after the children and the batch size
    std::set<std::string> seen;
    for (const auto& e : tree.entries) {
      seen.insert(e.key);
      const NestedKey key = child_key(path, e.key);
      const auto kind = node.kind(e.key);
      if (e.other)
        throw TypeError("load_state_dict: the state dict holds " +
                        std::string(kind_name(e.other->kind())) + " at " + key.repr() +
                        ", which cannot be loaded into a tensordict");
      if (e.tensor.defined()) {
        check_tensor(td, e.key, e.tensor, key, kind, batch, new_device, writes);
      } else if (e.node->is_non_tensor()) {
        check_non_tensor(td, e.key, *e.node, key, kind, writes);
      } else {
        check_nested(td, e.key, *e.node, key, kind, batch, writes);
      }
    }
    // Entries of the tensordict that the state dict does not mention.
    for (const auto& k : node.keys()) {
      if (seen.count(k)) continue;
      const NestedKey key = child_key(path, k);
      auto v = node.find(k);
      if (strict && !(v->is_tensordict() && v->tensordict().is_empty()))
        throw KeyError("load_state_dict: " + key.repr() +
                       " is in the tensordict but not in the state dict (strict=true)");
      if (v->is_tensor()) {
        if (!starts_with(v->tensor().sizes(), batch))
          throw ShapeError("load_state_dict: the tensor " + key.repr() + " has shape " +
                           format_shape(v->tensor().sizes()) +
                           " which is incompatible with the batch size " + format_shape(batch) +
                           " of the state dict");
        check_device(v->tensor(), new_device, key);
      } else if (v->is_tensordict()) {
        auto cb = v->tensordict().batch_size();
        if (cb.size() >= batch.size() && !starts_with(cb, batch))
          throw ShapeError("load_state_dict: the tensordict " + key.repr() + " has batch size " +
                           format_shape(cb) + " which is incompatible with the batch size " +
                           format_shape(batch) + " of the state dict");
        if (cb.size() < batch.size() && !v->tensordict().is_empty())
          throw ShapeError("load_state_dict: the tensordict " + key.repr() + " has batch size " +
                           format_shape(cb) +
                           " and is not in the state dict, which gives its parent the "
                           "batch size " +
                           format_shape(batch));
      }
    }

    // Order: nested levels first (their own batch sizes), then this level's
    // batch size, then this level's writes (new entries take that batch
    // size), then the device. A valid final state is then reached without
    // an intermediate one the batch-size setter would refuse.
    if (batch != td.batch_size().vec()) {
      plan.push_back([td, batch]() mutable { td.set_batch_size(batch); });
    }
    for (auto& w : writes) plan.push_back(std::move(w));
    if (new_device) {
      plan.push_back([td, d = *new_device]() { td.node().set_device(d); });
    }
  }

  static void check_device(const at::Tensor& t, const std::optional<at::Device>& device,
                           const NestedKey& key) {
    if (device && t.device() != *device)
      throw DeviceError("load_state_dict: the tensor " + key.repr() + " is on " + t.device().str() +
                        " but the state dict gives its tensordict the device " + device->str());
  }

  void check_tensor(TensorDictBase td, const std::string& k, const at::Tensor& value,
                    const NestedKey& key, std::optional<EntryKind> kind,
                    const std::vector<int64_t>& batch, const std::optional<at::Device>& device,
                    Plan& writes) {
    if (kind && *kind != EntryKind::Tensor)
      throw TypeError("load_state_dict: " + key.repr() + " is a " + to_string(*kind) +
                      " in the tensordict but a tensor in the state dict");
    if (!kind) {
      if (strict)
        throw KeyError("load_state_dict: " + key.repr() +
                       " is in the state dict but not in the tensordict (strict=true)");
      if (td.is_locked()) detail::throw_locked(key, "load_state_dict: add");
      if (!starts_with(value.sizes(), batch))
        throw ShapeError("load_state_dict: the tensor " + key.repr() + " has shape " +
                         format_shape(value.sizes()) +
                         " which is incompatible with the batch size " + format_shape(batch));
      check_device(value, device, key);
      writes.push_back([td, k, value]() mutable { td.set(k, value.detach().clone()); });
      return;
    }
    auto meta = td.node().tensor_meta(k);
    if (meta->shape != value.sizes().vec())
      throw ShapeError("load_state_dict: shape mismatch for " + key.repr() +
                       ": the state dict has " + format_shape(value.sizes()) + ", the tensordict " +
                       format_shape(meta->shape));
    if (meta->dtype != value.scalar_type())
      throw TypeError("load_state_dict: dtype mismatch for " + key.repr() +
                      ": the state dict has " + torch_dtype_repr(value.scalar_type()) +
                      ", the tensordict " + torch_dtype_repr(meta->dtype));
    if (!starts_with(meta->shape, batch))
      throw ShapeError("load_state_dict: the tensor " + key.repr() + " has shape " +
                       format_shape(meta->shape) + " which is incompatible with the batch size " +
                       format_shape(batch) + " of the state dict");
    if (device && meta->device != *device)
      throw DeviceError("load_state_dict: the tensor " + key.repr() + " is on " +
                        meta->device.str() +
                        " but the state dict gives its tensordict the device " + device->str());
    writes.push_back([td, k, value]() mutable { td.set_(k, value); });
  }

  void check_non_tensor(TensorDictBase td, const std::string& k, const LoadNode& tree,
                        const NestedKey& key, std::optional<EntryKind> kind, Plan& writes) {
    if (kind && *kind != EntryKind::NonTensor)
      throw TypeError("load_state_dict: " + key.repr() + " is a " + to_string(*kind) +
                      " in the tensordict but a NonTensorData in the state dict");
    const auto& fields = tree.meta->non_tensor;
    if (!fields.is_object() || !fields.contains("data"))
      throw TypeError("load_state_dict: the NonTensorData " + key.repr() +
                      " of the state dict has no \"data\" field");
    if (!kind && strict)
      throw KeyError("load_state_dict: " + key.repr() +
                     " is in the state dict but not in the tensordict (strict=true)");
    const nlohmann::json& data = fields["data"];
    if (kind && td.node().find(k)->non_tensor().data() == data) return;  // unchanged
    if (td.is_locked()) detail::throw_locked(key, "load_state_dict: replace");
    writes.push_back([td, k, data]() mutable { td.set(k, NonTensorData(data)); });
  }

  void check_nested(TensorDictBase td, const std::string& k, const LoadNode& tree,
                    const NestedKey& key, std::optional<EntryKind> kind,
                    const std::vector<int64_t>& batch, Plan& writes) {
    if (kind && *kind != EntryKind::TensorDict)
      throw TypeError("load_state_dict: " + key.repr() + " is a " + to_string(*kind) +
                      " in the tensordict but a nested state dict in the state dict");
    if (kind) {
      TensorDictBase child = td.node().find(k)->tensordict();
      auto child_batch = target_batch(&tree, child, batch);
      if (!starts_with(child_batch, batch))
        throw ShapeError("load_state_dict: the batch size " + format_shape(child_batch) + " of " +
                         key.repr() + " does not start with the batch size " + format_shape(batch) +
                         " of its parent");
      check_node(tree, child, key, child_batch);
      return;
    }
    // Missing here: an empty nested state dict is created even with strict
    // (as Python does); otherwise only without strict.
    if (strict && !tree.is_empty())
      throw KeyError("load_state_dict: " + key.repr() +
                     " is in the state dict but not in the tensordict (strict=true)");
    if (td.is_locked()) detail::throw_locked(key, "load_state_dict: add");
    std::vector<int64_t> child_batch = tree.meta ? tree.meta->batch_size : batch;
    if (!starts_with(child_batch, batch))
      throw ShapeError("load_state_dict: the batch size " + format_shape(child_batch) + " of " +
                       key.repr() + " does not start with the batch size " + format_shape(batch) +
                       " of its parent");
    // A new, detached tensordict: filled by the plan, attached after.
    TensorDict fresh = detail::make_tensordict(child_batch, td.device());
    check_node(tree, fresh, key, child_batch);
    writes.push_back([td, k, fresh]() mutable { td.set(k, fresh); });
  }
};

}  // namespace

TensorDictBase& TensorDictBase::load_state_dict(const StateDict& state_dict, bool strict) {
  auto tree = build_tree(state_dict, this);
  take_legacy_metadata(*tree);
  Loader loader{strict, {}};
  loader.check_node(*tree, *this, NestedKey(), Loader::target_batch(tree.get(), *this, {}));
  for (auto& write : loader.plan) write();
  return *this;
}

// ---- exchange with Python -----------------------------------------------------------------

namespace {

c10::IValue json_to_ivalue(const nlohmann::json& j, const std::string& where) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return c10::IValue();
    case nlohmann::json::value_t::boolean:
      return c10::IValue(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return c10::IValue(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max()))
        throw ValueError("state dict value " + where + ": the integer " + std::to_string(u) +
                         " does not fit an int64");
      return c10::IValue(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return c10::IValue(j.get<double>());
    case nlohmann::json::value_t::string:
      return c10::IValue(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      c10::impl::GenericList list(c10::AnyType::get());
      for (const auto& v : j) list.push_back(json_to_ivalue(v, where));
      return list;
    }
    case nlohmann::json::value_t::object: {
      c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
      for (auto it = j.begin(); it != j.end(); ++it)
        dict.insert(it.key(), json_to_ivalue(it.value(), where));
      return dict;
    }
    default:
      throw ValueError("state dict value " + where + " has no pickle form (binary JSON)");
  }
}

nlohmann::json ivalue_to_json(const c10::IValue& v, const std::string& where) {
  if (v.isNone()) return nullptr;
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt();
  if (v.isDouble()) return v.toDouble();
  if (v.isString()) return v.toStringRef();
  if (v.isDevice()) return v.toDevice().str();
  if (v.isList() || v.isTuple()) {
    nlohmann::json out = nlohmann::json::array();
    if (v.isList()) {
      for (const auto& e : v.toListRef()) out.push_back(ivalue_to_json(e, where));
    } else {
      for (const auto& e : v.toTupleRef().elements()) out.push_back(ivalue_to_json(e, where));
    }
    return out;
  }
  if (v.isGenericDict()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& e : v.toGenericDict()) {
      if (!e.key().isString())
        throw FormatError("state dict value " + where + ": a dict key is not a string");
      out[e.key().toStringRef()] = ivalue_to_json(e.value(), where);
    }
    return out;
  }
  throw FormatError("state dict value " + where + " is a " + v.tagKind() +
                    ", which has no JSON form");
}

c10::IValue batch_to_ivalue(const std::vector<int64_t>& batch) {
  std::vector<c10::IValue> dims(batch.begin(), batch.end());
  return c10::ivalue::Tuple::create(std::move(dims));
}

c10::IValue device_to_ivalue(const std::optional<at::Device>& device) {
  return device ? c10::IValue(*device) : c10::IValue();
}

std::vector<int64_t> batch_from_ivalue(const c10::IValue& v, const std::string& where) {
  std::vector<int64_t> out;
  auto take = [&](const c10::IValue& e) {
    if (!e.isInt())
      throw FormatError("state dict " + where + ": a batch size holds a " + e.tagKind() +
                        ", expected ints");
    out.push_back(e.toInt());
  };
  if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) take(e);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) take(e);
  } else {
    throw FormatError("state dict " + where +
                      ": a batch size must be a tuple or list of ints, got a " + v.tagKind());
  }
  return out;
}

std::optional<at::Device> device_from_ivalue(const c10::IValue& v, const std::string& where) {
  if (v.isNone()) return std::nullopt;
  if (v.isDevice()) return v.toDevice();
  if (v.isString()) {
    try {
      return at::Device(v.toStringRef());
    } catch (const c10::Error&) {
      throw FormatError("state dict " + where + ": invalid device '" + v.toStringRef() + "'");
    }
  }
  throw FormatError("state dict " + where +
                    ": a device must be a torch.device, a string or None, got a " + v.tagKind());
}

c10::IValue metadata_to_ivalue(const StateDictMetadata& m) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("batch_size", batch_to_ivalue(m.batch_size));
  d.insert("device", device_to_ivalue(m.device));
  if (!m.type.empty()) {
    d.insert("_type", m.type);
    d.insert("_non_tensor", json_to_ivalue(m.non_tensor, "_metadata"));
  }
  return d;
}

StateDictMetadata metadata_from_ivalue(const c10::IValue& v, const std::string& where) {
  if (!v.isGenericDict())
    throw FormatError("state dict " + where + " must be a dict, got a " + v.tagKind());
  StateDictMetadata m;
  for (const auto& e : v.toGenericDict()) {
    if (!e.key().isString()) continue;
    const auto& name = e.key().toStringRef();
    if (name == "batch_size")
      m.batch_size = batch_from_ivalue(e.value(), where);
    else if (name == "device")
      m.device = device_from_ivalue(e.value(), where);
    else if (name == "_type" && e.value().isString())
      m.type = e.value().toStringRef();
    else if (name == "_non_tensor")
      m.non_tensor = ivalue_to_json(e.value(), where);
  }
  return m;
}

std::string item_where(const std::string& prefix, const std::string& key) {
  return "item '" + prefix + key + "'";
}

c10::IValue to_ivalue(const StateDict& sd, const std::string& prefix) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [k, item] : sd.items()) {
    if (k == "_metadata")
      throw ValueError("state_dict_to_ivalue: the item '" + prefix + k +
                       "' collides with the \"_metadata\" entry of the pickled layout");
    switch (item.kind()) {
      case StateDictItem::Kind::Tensor:
        d.insert(k, item.tensor());
        break;
      case StateDictItem::Kind::Nested:
        d.insert(k, to_ivalue(item.nested(), prefix + k + "."));
        break;
      case StateDictItem::Kind::BatchSize:
        d.insert(k, batch_to_ivalue(item.batch_size()));
        break;
      case StateDictItem::Kind::Device:
        d.insert(k, device_to_ivalue(item.device()));
        break;
      case StateDictItem::Kind::Value:
        d.insert(k, json_to_ivalue(item.value(), item_where(prefix, k)));
        break;
    }
  }
  if (sd.has_metadata()) {
    c10::impl::GenericDict meta(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [p, m] : sd.metadata()) meta.insert(p, metadata_to_ivalue(m));
    d.insert("_metadata", meta);
  }
  return d;
}

StateDict from_ivalue(const c10::IValue& v, const std::string& prefix) {
  if (!v.isGenericDict())
    throw FormatError("a state dict must be a dict, got a " + v.tagKind() +
                      (prefix.empty() ? std::string() : " at '" + prefix + "'"));
  StateDict sd;
  for (const auto& e : v.toGenericDict()) {
    if (!e.key().isString())
      throw FormatError("state dict keys must be strings, got a " + e.key().tagKind() +
                        (prefix.empty() ? std::string() : " in '" + prefix + "'"));
    const std::string& k = e.key().toStringRef();
    const c10::IValue& value = e.value();
    const std::string where = item_where(prefix, k);
    if (k == "_metadata" && value.isGenericDict()) {
      for (const auto& m : value.toGenericDict()) {
        if (!m.key().isString()) throw FormatError("state dict _metadata keys must be strings");
        sd.set_metadata(
            m.key().toStringRef(),
            metadata_from_ivalue(m.value(), "_metadata['" + m.key().toStringRef() + "']"));
      }
    } else if (value.isTensor()) {
      sd.insert(k, value.toTensor());
    } else if (k == "__batch_size") {
      sd.insert(k, StateDictItem::of_batch_size(batch_from_ivalue(value, where)));
    } else if (k == "__device") {
      sd.insert(k, StateDictItem::of_device(device_from_ivalue(value, where)));
    } else if (value.isGenericDict() && k != "_non_tensordict") {
      sd.insert(k, from_ivalue(value, prefix + k + "."));
    } else {
      sd.insert(k, StateDictItem::of_value(ivalue_to_json(value, where)));
    }
  }
  return sd;
}

}  // namespace

c10::IValue state_dict_to_ivalue(const StateDict& state_dict) { return to_ivalue(state_dict, ""); }

StateDict state_dict_from_ivalue(const c10::IValue& value) { return from_ivalue(value, ""); }

void save_state_dict(const StateDict& state_dict, const std::string& path) {
  save_state_dict(state_dict, path, SaveStateDictOptions{});
}

void save_state_dict(const StateDict& state_dict, const std::string& path,
                     const SaveStateDictOptions& options) {
  // Streamed into the new file: the tensors' bytes are written from where
  // they are, without an archive held in memory.
  detail::replace_file_atomically(
      path,
      [&state_dict](const std::function<void(const char*, std::size_t)>& sink) {
        detail::torch_save_to(state_dict, sink);
      },
      "save_state_dict", options.durable);
}

StateDict load_state_dict_file(const std::string& path) {
  // The file is read once into one buffer, and the values are views of it:
  // loading into a tensordict then copies each value once, as Python's
  // torch.load + load_state_dict does.
  at::Tensor bytes;
  try {
    const std::size_t n =
        detail::read_regular_file_into(path, "the state dict file", [&bytes](std::size_t size) {
          bytes = at::empty({static_cast<int64_t>(size)}, at::kByte);
          return static_cast<char*>(bytes.data_ptr());
        });
    if (n < static_cast<std::size_t>(bytes.numel()))
      bytes = bytes.narrow(0, 0, static_cast<int64_t>(n));
  } catch (const FormatError& e) {
    throw FormatError(std::string("load_state_dict_file: ") + e.what());
  }
  // Read by the library's own bounded reader: a crafted file never reaches
  // LibTorch's unpickler.
  c10::IValue value;
  try {
    value = detail::read_torch_archive(bytes, "load_state_dict_file: " + path);
  } catch (const c10::Error& e) {
    std::throw_with_nested(
        FormatError("load_state_dict_file: " + path + ": " + e.what_without_backtrace()));
  }
  try {
    return state_dict_from_ivalue(value);
  } catch (const FormatError& e) {
    throw FormatError("load_state_dict_file: " + path + ": " + e.what());
  }
}

}  // namespace tensordict
