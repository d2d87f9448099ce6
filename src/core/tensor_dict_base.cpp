// The generic core: everything written once against the Node interface.
#include "core/internal.h"
#include "core/json_limits.h"
#include "core/lazy_dispatch.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

namespace tensordict {
namespace detail {

void throw_missing(const NestedKey& key, std::size_t level, const Node& node) {
  std::ostringstream msg;
  msg << "key " << key.repr() << " not found in " << node.type_name();
  if (level > 0)
    msg << ": " << prefix(key, level).repr() << " has keys ";
  else
    msg << " with keys ";
  msg << format_key_list(node.keys());
  throw KeyError(msg.str());
}

void throw_locked(const NestedKey& key, const char* operation) {
  // Python's text first, verbatim (ported tests match it), then the details.
  std::string what = operation;
  if (!key.empty()) what += " " + key.repr();
  throw LockedError(
      "Cannot modify locked TensorDict. For in-place modification, consider "
      "using the `set_()` method and make sure the key is present. (" +
      what + "; or unlock_() first)");
}

void check_leaf_batch(const at::Tensor& value, at::IntArrayRef batch, const NestedKey& key) {
  check_leaf_batch(value.sizes(), batch, key);
}

void check_leaf_batch(at::IntArrayRef sizes, at::IntArrayRef batch, const NestedKey& key) {
  bool ok = sizes.size() >= batch.size() && std::equal(batch.begin(), batch.end(), sizes.begin());
  if (!ok)
    throw ShapeError("batch dimension mismatch for key " + key.repr() + ": got batch_size=" +
                     format_shape(batch) + " and value.shape=" + format_shape(sizes) +
                     " (every entry must start with the batch size)");
}

void check_writable_leaf(const at::Tensor& leaf, const NestedKey& key, const char* op) {
  if (at::has_internal_overlap(leaf) == at::MemOverlap::Yes)
    throw ValueError(std::string(op) + ": cannot write into " + key.repr() +
                     " in place: its tensor of shape " + format_shape(leaf.sizes()) +
                     " is expanded (a stride of 0), so several of its elements share one "
                     "memory location; clone() it first, or set() a new tensor");
}

namespace {
bool starts_with(at::IntArrayRef full, at::IntArrayRef prefix) {
  return full.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), full.begin());
}
}  // namespace

Value validate_value(Value value, at::IntArrayRef batch, std::optional<at::Device> device,
                     const NestedKey& key) {
  switch (value.kind()) {
    case EntryKind::Tensor: {
      at::Tensor t = std::move(value).tensor();
      if (!t.defined()) throw ValueError("cannot store an undefined tensor at key " + key.repr());
      if (device && t.device() != *device) {
        try {
          t = t.to(*device);
        } catch (const c10::Error& e) {
          std::throw_with_nested(DeviceError("cannot move the tensor at key " + key.repr() +
                                             " from " + t.device().str() + " to " + device->str() +
                                             ": " + e.what_without_backtrace()));
        }
      }
      check_leaf_batch(t, batch, key);
      return t;
    }
    case EntryKind::TensorDict: {
      TensorDictBase td = value.tensordict();
      if (!td.defined()) throw ValueError("cannot store a null tensordict at key " + key.repr());
      if (!starts_with(td.batch_size(), batch)) {
        // Python: a shallow copy whose batch size is reset to the parent's.
        TensorDictBase copy = td.copy();
        try {
          copy.set_batch_size(batch);
        } catch (const ShapeError& e) {
          throw ShapeError("cannot store the tensordict of batch size " +
                           format_shape(td.batch_size()) + " at key " + key.repr() +
                           " under batch size " + format_shape(batch) + ": " + e.what());
        }
        td = copy;
      }
      if (device && td.device() != device) {
        // Moves every leaf; the result is a new tensordict on that device.
        TensorDict moved = make_tensordict(
            std::vector<int64_t>(td.batch_size().begin(), td.batch_size().end()), device);
        for (auto& [k, v] : td.items())
          moved.set(k, validate_value(v, td.batch_size(), device, key + k));
        td = moved;
      }
      return td;
    }
    case EntryKind::NonTensor: {
      // Checked before anything copies it: nlohmann's copy recurses per level.
      check_non_tensor_value(value.non_tensor().data(), key);
      NonTensorData d = std::move(value.non_tensor());
      if (!starts_with(d.batch_size(), batch))
        d.set_batch_size(std::vector<int64_t>(batch.begin(), batch.end()));
      if (device) d.set_device(device);
      return d;
    }
    case EntryKind::NonTensorStack: {
      // One value per element: the elements must be this batch's.
      NonTensorStack s = std::move(value.non_tensor_stack());
      for (const auto& v : s.values()) check_non_tensor_value(v, key);
      if (!starts_with(s.batch_size(), batch))
        throw ShapeError("batch dimension mismatch for key " + key.repr() + ": got batch_size=" +
                         format_shape(batch) + " and a NonTensorStack of batch size " +
                         format_shape(s.batch_size()) + " (" + std::to_string(s.numel()) +
                         " values; its batch size must start with the tensordict's)");
      if (device) s.set_device(device);
      return s;
    }
  }
  return value;
}

std::vector<TensorDictBase> children(const Node& node) {
  // A lazy stack's children in the lock graph are its members.
  if (auto members = lazy_dispatch(node, &LazyStackNode::members)) return std::move(*members);
  std::vector<TensorDictBase> out;
  if (node.holds_values()) {
    for (const auto& k : node.keys()) {
      const Value* v = node.peek(k);
      if (v && v->is_tensordict()) out.push_back(v->tensordict());
    }
    return out;
  }
  for (const auto& k : node.keys()) {
    if (node.kind(k) == EntryKind::TensorDict) out.push_back(node.find(k)->tensordict());
  }
  return out;
}

}  // namespace detail

using detail::format_shape;
using detail::throw_locked;
using detail::throw_missing;

namespace detail {

std::shared_ptr<Node> walk_parent(const std::shared_ptr<Node>& root, const NestedKey& key,
                                  bool create, const char* operation,
                                  std::shared_ptr<Node>* storage) {
  if (key.empty()) throw KeyError("empty key");
  std::shared_ptr<Node> node = root;
  if (storage) storage->reset();
  auto note_storage = [&] {
    if (storage && !*storage && !node->holds_values()) *storage = node;
  };
  for (std::size_t i = 0; i + 1 < key.size(); ++i) {
    note_storage();
    std::optional<Value> v;
    try {
      v = node->find(key[i]);
      if (!v) {
        if (!create) throw_missing(key, i, *node);
        if (node->locked()) throw_locked(key, operation);
        node = node->create_nested(key[i], node->batch_size(), node->device()).node_ptr();
        continue;
      }
    } catch (const StorageError&) {
      rethrow_storage_error(prefix(key, i + 1), operation);
    }
    if (!v->is_tensordict())
      throw TypeError("key " + key.repr() + ": " + detail::prefix(key, i + 1).repr() + " is a " +
                      tensordict::to_string(v->kind()) + ", not a TensorDict");
    node = v->tensordict().node_ptr();
  }
  note_storage();
  return node;
}

}  // namespace detail

using detail::walk_parent;

// ---- handle basics ---------------------------------------------------------

TensorDictBase::TensorDictBase(std::shared_ptr<Node> node) : node_(std::move(node)) {}

Node& TensorDictBase::node() const {
  if (!node_) throw ValueError("use of a null tensordict handle");
  return *node_;
}

std::string TensorDictBase::type_name() const { return node().type_name(); }

at::IntArrayRef TensorDictBase::batch_size() const { return node().batch_size(); }

int64_t TensorDictBase::batch_dims() const {
  return static_cast<int64_t>(node().batch_size().size());
}

int64_t TensorDictBase::numel() const {
  int64_t n = 1;
  for (auto s : node().batch_size()) n *= s;
  return n;
}

int64_t TensorDictBase::size(int64_t d) const {
  auto b = batch_size();
  int64_t n = static_cast<int64_t>(b.size());
  if (d < -n || d >= n)
    throw IndexError("dimension " + std::to_string(d) + " out of range for batch size " +
                     format_shape(b));
  return b[d < 0 ? d + n : d];
}

int64_t TensorDictBase::len() const {
  auto b = batch_size();
  return b.empty() ? 0 : b[0];
}

std::optional<at::Device> TensorDictBase::device() const { return node().device(); }

TensorDictBase& TensorDictBase::clear_device_() {
  node().set_device(std::nullopt);
  for (auto& c : detail::children(node())) c.clear_device_();
  return *this;
}

// ---- batch size setter -------------------------------------------------------

namespace {

bool starts_with_size(at::IntArrayRef sizes, at::IntArrayRef prefix) {
  return sizes.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), sizes.begin());
}

// Metadata only: tensors are checked through tensor_meta, never read.
void check_batch_change(const Node& node, at::IntArrayRef new_size, const NestedKey& path) {
  for (const auto& k : node.keys()) {
    NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
    const auto kind = node.kind(k);
    if (!kind || *kind == EntryKind::NonTensor) continue;
    if (*kind == EntryKind::Tensor) {
      const auto meta = node.tensor_meta(k);
      if (!starts_with_size(meta->shape, new_size))
        throw ShapeError("the tensor " + key.repr() + " has shape " + format_shape(meta->shape) +
                         " which is incompatible with the batch size " + format_shape(new_size));
      continue;
    }
    auto v = node.find(k);
    if (*kind == EntryKind::TensorDict) {
      const auto& child = v->tensordict();
      auto cb = child.batch_size();
      if (cb.size() < new_size.size()) {
        check_batch_change(child.node(), new_size, key);
      } else if (!std::equal(new_size.begin(), new_size.end(), cb.begin())) {
        throw ShapeError("the tensordict " + key.repr() + " has batch size " + format_shape(cb) +
                         " which is incompatible with the batch size " + format_shape(new_size));
      }
    } else {  // NonTensorStack
      auto sb = v->non_tensor_stack().batch_size();
      if (!starts_with_size(sb, new_size))
        throw ShapeError("the NonTensorStack " + key.repr() + " has batch size " +
                         format_shape(sb) + " which is incompatible with the batch size " +
                         format_shape(new_size));
    }
  }
}

void apply_batch_change(Node& node, at::IntArrayRef new_size) {
  for (const auto& k : node.keys()) {
    const auto kind = node.kind(k);
    if (kind == EntryKind::TensorDict) {
      const TensorDictBase child = node.find(k)->tensordict();
      if (child.batch_size().size() < new_size.size()) apply_batch_change(child.node(), new_size);
    } else if (kind == EntryKind::NonTensor) {
      NonTensorData d = node.find(k)->non_tensor();
      if (!starts_with_size(d.batch_size(), new_size)) {
        d.set_batch_size(std::vector<int64_t>(new_size.begin(), new_size.end()));
        node.write(k, d);
      }
    }
  }
  node.set_batch_size(std::vector<int64_t>(new_size.begin(), new_size.end()));
}

}  // namespace

TensorDictBase& TensorDictBase::set_batch_size(at::IntArrayRef new_size) {
  if (node().is_lazy_stack()) node().set_batch_size({});  // refuses
  for (auto s : new_size)
    if (s < 0)
      throw ShapeError("invalid batch size " + format_shape(new_size) +
                       ": sizes must be non-negative");
  check_batch_change(node(), new_size, NestedKey());
  apply_batch_change(node(), new_size);
  return *this;
}

// ---- reads -------------------------------------------------------------------

std::optional<Value> TensorDictBase::find(const NestedKey& key) const {
  if (key.empty()) return std::nullopt;
  std::shared_ptr<Node> n = node_;
  if (!n) throw ValueError("use of a null tensordict handle");
  for (std::size_t i = 0; i + 1 < key.size(); ++i) {
    auto v = n->find(key[i]);
    if (!v || !v->is_tensordict()) return std::nullopt;
    n = v->tensordict().node_ptr();
  }
  return n->find(key.back());
}

Value TensorDictBase::at(const NestedKey& key) const {
  auto parent = walk_parent(node_ ? node_ : throw ValueError("null handle"), key, false);
  std::optional<Value> v;
  try {
    v = parent->find(key.back());
  } catch (const StorageError&) {
    detail::rethrow_storage_error(key, "reading");
  }
  if (!v) throw_missing(key, key.size() - 1, *parent);
  return std::move(*v);
}

namespace {

NestedKey key_of(const std::string_view* parts, std::size_t n) {
  NestedKey k;
  for (std::size_t i = 0; i < n; ++i) k = k.child(parts[i]);
  return k;
}

// The two spellings of a path get() receives, read in place (no copy of the
// parts on the hot path); key() is only built when an error names the key.
struct ListPath {
  const std::string_view* parts;
  std::size_t count;
  std::size_t size() const noexcept { return count; }
  std::string_view operator[](std::size_t i) const noexcept { return parts[i]; }
  NestedKey key() const { return key_of(parts, count); }
  NestedKey prefix(std::size_t n) const { return key_of(parts, n); }
};
struct KeyPath {
  const NestedKey& nested;
  std::size_t size() const noexcept { return nested.size(); }
  std::string_view operator[](std::size_t i) const noexcept { return nested[i]; }
  const NestedKey& key() const noexcept { return nested; }
  NestedKey prefix(std::size_t n) const { return detail::prefix(nested, n); }
};

[[noreturn]] __attribute__((noinline, cold)) void throw_null_handle() {
  throw ValueError("use of a null tensordict handle");
}

// Every failure of get_path, out of line so that the hot path stays small
// (error strings inlined there cost a large stack frame on every call).
template <class Path>
[[noreturn]] __attribute__((noinline, cold)) void fail_get(const Node* n, const Path& path,
                                                           std::size_t i, const Value* v) {
  if (path.size() == 0) throw KeyError("empty key");
  const auto& key = path.key();
  if (!v) throw_missing(key, i, *n);
  if (i + 1 == path.size())
    throw TypeError(
        "entry " + key.repr() + " is a " + tensordict::to_string(v->kind()) + ", not a Tensor" +
        (v->is_non_tensor_or_stack() ? " (use get_non_tensor)" : " (use get_tensordict)"));
  throw TypeError("key " + key.repr() + ": " + path.prefix(i + 1).repr() + " is a " +
                  tensordict::to_string(v->kind()) + ", not a TensorDict");
}

// Storages other than the in-memory one: through at() (Node::find).
template <class Path>
__attribute__((noinline)) at::Tensor get_slow(const TensorDictBase& self, const Path& path) {
  const auto& key = path.key();
  Value v = self.at(key);
  if (!v.is_tensor())
    throw TypeError("entry " + key.repr() + " is a " + tensordict::to_string(v.kind()) +
                    ", not a Tensor");
  return std::move(v).tensor();
}

// get() when the fast path failed: the same walk, with every error reported,
// and other storages read through at().
template <class Path>
at::Tensor get_path(const Node* n, const Path& path, const TensorDictBase& self) {
  if (path.size() == 0) fail_get(n, path, 0, nullptr);  // "empty key"
  const std::size_t last = path.size() - 1;
  for (std::size_t i = 0; n->is_memory_node(); ++i) {
    const Value* v = static_cast<const detail::MemoryNode*>(n)->lookup(path[i]);
    if (!v) fail_get(n, path, i, v);
    if (i == last) {
      if (!v->is_tensor()) fail_get(n, path, i, v);
      return v->tensor();
    }
    if (!v->is_tensordict()) fail_get(n, path, i, v);
    n = v->tensordict().node_ptr().get();
  }
  return get_slow(self, path);
}

}  // namespace

// For the translation units that call get() without seeing tensor_dict.h.
template const at::Tensor* detail::find_memory_tensor(const Node*, const std::string_view*,
                                                      std::size_t) noexcept;
template const at::Tensor* detail::find_memory_tensor(const Node*, const std::string*,
                                                      std::size_t) noexcept;

at::Tensor TensorDictBase::get_checked(const NestedKey& key) const {
  if (!node_) throw_null_handle();
  return get_path(node_.get(), KeyPath{key}, *this);
}

at::Tensor TensorDictBase::get_checked(std::initializer_list<std::string_view> path) const {
  if (!node_) throw_null_handle();
  return get_path(node_.get(), ListPath{path.begin(), path.size()}, *this);
}

at::Tensor TensorDictBase::get(const NestedKey& key, const at::Tensor& default_value) const {
  auto v = find(key);
  if (!v) return default_value;
  if (!v->is_tensor())
    throw TypeError("entry " + key.repr() + " is a " + tensordict::to_string(v->kind()) +
                    ", not a Tensor");
  return std::move(*v).tensor();
}

TensorDictBase TensorDictBase::get_tensordict(const NestedKey& key) const {
  Value v = at(key);
  if (!v.is_tensordict())
    throw TypeError("entry " + key.repr() + " is a " + tensordict::to_string(v.kind()) +
                    ", not a TensorDict");
  return v.tensordict();
}

namespace {
nlohmann::json non_tensor_value(const Value& v, const NestedKey& key) {
  if (v.is_non_tensor()) return v.non_tensor().data();
  if (v.is_non_tensor_stack()) return v.non_tensor_stack().tolist();
  throw TypeError("entry " + key.repr() + " is a " + tensordict::to_string(v.kind()) +
                  ", not a non-tensor (NonTensorData or NonTensorStack)");
}
}  // namespace

nlohmann::json TensorDictBase::get_non_tensor(const NestedKey& key) const {
  return non_tensor_value(at(key), key);
}

nlohmann::json TensorDictBase::get_non_tensor(const NestedKey& key,
                                              nlohmann::json default_value) const {
  auto v = find(key);
  if (!v) return default_value;
  return non_tensor_value(*v, key);
}

NonTensorStack TensorDictBase::get_non_tensor_stack(const NestedKey& key) const {
  Value v = at(key);
  if (v.is_non_tensor_stack()) return std::move(v.non_tensor_stack());
  if (v.is_non_tensor() && !v.non_tensor().batch_size().empty())
    return NonTensorStack::from_non_tensor(v.non_tensor());
  throw TypeError("entry " + key.repr() + " is a " + tensordict::to_string(v.kind()) +
                  (v.is_non_tensor() ? " of batch size [], which has no elements to stack"
                                     : ", not a non-tensor (NonTensorData or NonTensorStack)"));
}

bool TensorDictBase::is_non_tensor(const NestedKey& key) const {
  auto k = entry_kind(key);
  return k == EntryKind::NonTensor || k == EntryKind::NonTensorStack;
}

std::vector<int64_t> TensorDictBase::get_item_shape(const NestedKey& key) const {
  // Metadata only where a storage offers it: no data read, and ragged leaves
  // of a lazy stack report -1.
  if (key.size() > 0) {
    std::shared_ptr<Node> parent = node_;
    if (key.size() > 1) {
      TensorDictBase p = get_tensordict(detail::prefix(key, key.size() - 1));
      parent = p.node_ptr();
    }
    if (!parent->holds_values() && parent->kind(key.back()) == EntryKind::Tensor)
      return parent->tensor_meta(key.back())->shape;
  }
  Value v = at(key);
  at::IntArrayRef s;
  switch (v.kind()) {
    case EntryKind::Tensor:
      s = v.tensor().sizes();
      break;
    case EntryKind::TensorDict:
      s = v.tensordict().batch_size();
      break;
    case EntryKind::NonTensor:
      s = v.non_tensor().batch_size();
      break;
    case EntryKind::NonTensorStack:
      s = v.non_tensor_stack().batch_size();
      break;
  }
  return std::vector<int64_t>(s.begin(), s.end());
}

// ---- writes ------------------------------------------------------------------

namespace {

// Keys are text in every format (and str in Python), so a key that is not
// valid UTF-8 is refused where it enters, not when a save meets it.
void check_new_key(const NestedKey& key) {
  for (const auto& part : key) {
    if (part.empty()) throw KeyError("key " + key.repr() + " has an empty part");
    if (auto at = detail::first_invalid_utf8(part))
      throw KeyError("key " + key.repr() + ": the part of " + std::to_string(part.size()) +
                     " bytes is not valid UTF-8 (byte " + std::to_string(*at) +
                     "); keys are text in every format the library reads and writes");
  }
}

void set_impl(const std::shared_ptr<Node>& root, const NestedKey& key, Value value,
              bool check_lock) {
  if (key.empty()) throw KeyError("empty key");
  check_new_key(key);
  // Find the deepest existing level first: missing levels will copy its batch
  // size and device, so the value is validated before anything is created and
  // a refused value leaves no empty intermediate behind.
  std::shared_ptr<Node> parent = root;
  std::size_t depth = 0;
  for (; depth + 1 < key.size(); ++depth) {
    auto v = parent->find(key[depth]);
    if (!v) break;
    if (!v->is_tensordict())
      throw TypeError("key " + key.repr() + ": " + detail::prefix(key, depth + 1).repr() +
                      " is a " + tensordict::to_string(v->kind()) + ", not a TensorDict");
    parent = v->tensordict().node_ptr();
  }
  if (check_lock && parent->locked()) {
    if (detail::is_mapped(*parent))
      throw LockedError("Cannot modify locked TensorDict: " + key.repr() + " cannot be set on a " +
                        (detail::is_memmap_node(*parent) ? "memory-mapped" : "shared-memory") +
                        " tensordict, whose storage is fixed. Write in place with set_(), "
                        "update_() or index_put_(), or unlock_(), set, and memmap_() again.");
    throw_locked(key, "set");
  }
  Value checked =
      detail::validate_value(std::move(value), parent->batch_size(), parent->device(), key);
  for (; depth + 1 < key.size(); ++depth)
    parent = parent->create_nested(key[depth], parent->batch_size(), parent->device()).node_ptr();
  try {
    parent->write(key.back(), std::move(checked));
  } catch (const StorageError&) {
    detail::rethrow_storage_error(key, "setting");
  }
}

// An in-place copy into an existing tensor leaf (set_, update_), checked
// without reading data and written by commit().
struct InplaceWrite {
  std::shared_ptr<Node> parent;
  std::shared_ptr<Node> storage;  // set when the leaf's storage does not hold values
  NestedKey key;
  at::Tensor value;  // for a storage: cast and expanded to the leaf (Node::write_)

  void commit(detail::BatchedWrites& writes) const {
    if (storage)
      writes.add(storage.get(), parent, key, value);
    else
      parent->write_(key.back(), value);
  }
};

InplaceWrite check_inplace(const std::shared_ptr<Node>& root, const NestedKey& key,
                           const at::Tensor& value, const char* op) {
  std::shared_ptr<Node> storage;
  auto parent = walk_parent(root, key, false, op, &storage);
  auto kind = parent->kind(key.back());
  if (!kind)
    throw KeyError("key " + key.repr() + " not found: " + op +
                   " writes into existing entries only; use "
                   "set() for populating tensordict with new key-value pair. "
                   "Keys present: " +
                   detail::format_key_list(parent->keys()));
  if (*kind != EntryKind::Tensor)
    throw TypeError(std::string(op) + ": entry " + key.repr() + " is a " +
                    tensordict::to_string(*kind) + ", not a Tensor");
  if (!value.defined())
    throw ValueError(std::string(op) + ": undefined tensor for key " + key.repr());
  // Check the shape before touching the data so a failure writes nothing.
  std::optional<TensorMeta> meta;  // storages: metadata only, no data read
  if (!parent->holds_values()) meta = parent->tensor_meta(key.back());
  if (!meta) detail::check_writable_leaf(parent->peek(key.back())->tensor(), key, op);
  auto dest_shape = meta ? meta->shape : parent->peek(key.back())->tensor().sizes().vec();
  if (!at::is_expandable_to(value.sizes(), dest_shape))
    throw ShapeError(std::string(op) + ": cannot copy a value of shape " +
                     format_shape(value.sizes()) + " into " + key.repr() + " of shape " +
                     format_shape(dest_shape));
  if (!meta) return InplaceWrite{parent, nullptr, key, value};
  // A storage receives the leaf's shape, dtype and device (Node::write_).
  return InplaceWrite{parent, std::move(storage), key,
                      value.to(meta->device, meta->dtype).expand(dest_shape)};
}

void set_inplace_impl(const std::shared_ptr<Node>& root, const NestedKey& key,
                      const at::Tensor& value) {
  InplaceWrite w = check_inplace(root, key, value, "set_()");
  detail::BatchedWrites writes;
  w.commit(writes);
  if (!writes.empty()) writes.run(RowSelection::all(root->batch_size()));
}

}  // namespace

TensorDictBase& TensorDictBase::set(const NestedKey& key, Value value) {
  set_impl(node_ ? node_ : throw ValueError("null handle"), key, std::move(value), true);
  return *this;
}

TensorDictBase& TensorDictBase::set(const char* key, const at::Tensor& value) {
  Node& n = node_ ? *node_ : throw ValueError("null handle");
  if (n.is_memory_node() && !n.locked() && value.defined()) {
    auto& mem = static_cast<detail::MemoryNode&>(n);
    Value* slot = mem.peek_mut(key);
    // An existing tensor (its key was checked when it was added) replaced by
    // one that needs no move and has the batch dims: everything else takes
    // the general path, which also reports the errors.
    const auto batch = mem.batch_size();
    if (slot && slot->is_tensor() && (!mem.device() || value.device() == *mem.device()) &&
        value.dim() >= static_cast<int64_t>(batch.size()) &&
        value.sizes().slice(0, batch.size()).equals(batch)) {
      std::get<0>(slot->variant()) = value;
      return *this;
    }
  }
  return set(NestedKey(key), Value(value));
}

TensorDictBase& TensorDictBase::set(const NestedKey& key, Value value, bool inplace) {
  if (inplace && value.is_tensor() && entry_kind(key) == EntryKind::Tensor) {
    return set_(key, value.tensor());
  }
  return set(key, std::move(value));
}

TensorDictBase& TensorDictBase::set_(const NestedKey& key, const at::Tensor& value) {
  set_inplace_impl(node_ ? node_ : throw ValueError("null handle"), key, value);
  return *this;
}

TensorDictBase& TensorDictBase::set_non_tensor(const NestedKey& key, nlohmann::json value) {
  return set(key, NonTensorData(std::move(value)));
}

TensorDictBase& TensorDictBase::set_non_tensor_stack(const NestedKey& key,
                                                     const nlohmann::json& values) {
  if (key.empty()) throw KeyError("empty key");
  // The batch size of the level that will hold the entry (missing levels are
  // created with this tensordict's batch size).
  std::vector<int64_t> batch = batch_size().vec();
  if (key.size() > 1) {
    auto parent = find(detail::prefix(key, key.size() - 1));
    if (parent && parent->is_tensordict()) batch = parent->tensordict().batch_size().vec();
  }
  if (batch.empty())
    throw ValueError("set_non_tensor_stack: key " + key.repr() +
                     ": the tensordict has batch size [], so there are no elements to give "
                     "values to (use set_non_tensor, or set a NonTensorStack)");
  std::optional<NonTensorStack> stack;
  try {
    stack.emplace(values, batch, device());
  } catch (const ValueError& e) {
    throw ValueError("set_non_tensor_stack: key " + key.repr() + ": " + e.what());
  }
  return set(key, std::move(*stack));
}

TensorDictBase TensorDictBase::create_nested(const NestedKey& key) {
  check_new_key(key);
  auto parent = walk_parent(node_, key, true, "create_nested");
  auto existing = parent->find(key.back());
  if (existing) {
    if (existing->is_tensordict()) return existing->tensordict();
    throw TypeError("create_nested: " + key.repr() + " is a " +
                    tensordict::to_string(existing->kind()));
  }
  if (parent->locked()) throw_locked(key, "create_nested");
  return parent->create_nested(key.back(), parent->batch_size(), parent->device());
}

namespace {

// Which entries of a level a key filter keeps: nullptr = all.
struct KeyFilter {
  bool all = false;
  std::map<std::string, KeyFilter> children;
  static KeyFilter from(const std::vector<NestedKey>& keys) {
    KeyFilter f;
    if (keys.empty()) {
      f.all = true;
      return f;
    }
    for (const auto& k : keys) {
      KeyFilter* cur = &f;
      for (const auto& part : k) cur = &cur->children[part];
      cur->all = true;
    }
    return f;
  }
  const KeyFilter* child(const std::string& k) const {
    if (all) return this;
    auto it = children.find(k);
    return it == children.end() ? nullptr : &it->second;
  }
};

// One walk of update(). With dry_run it writes nothing and returns the first
// key a locked destination would have to add or replace (so that a refused
// update writes nothing); otherwise it writes, through `root` with the full
// key so that errors name the path. Entries of the destination are seen
// through kind() (metadata): only nested levels are fetched.
std::optional<NestedKey> update_walk(TensorDictBase& root, const TensorDictBase& self,
                                     const TensorDictBase& other, const UpdateOptions& opt,
                                     const KeyFilter& filter, const NestedKey& path, bool dry_run);

// update() of one entry `k` of `other` into `self` (see update_walk).
std::optional<NestedKey> update_entry(TensorDictBase& root, const TensorDictBase& self,
                                      const TensorDictBase& other, const std::string& k,
                                      const UpdateOptions& opt, const KeyFilter& filter,
                                      const NestedKey& path, bool dry_run) {
  const KeyFilter* f = filter.child(k);
  if (!f) return std::nullopt;
  NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
  const bool locked = self.is_locked() && !opt.ignore_lock;
  const auto src_kind = other.node().kind(k);
  const auto existing = self.node().kind(k);
  if (src_kind == EntryKind::TensorDict && existing == EntryKind::TensorDict) {
    return update_walk(root, self.node().find(k)->tensordict(), other.node().find(k)->tensordict(),
                       opt, *f, key, dry_run);
  }
  if (!f->all) {
    if (src_kind != EntryKind::TensorDict) return std::nullopt;
    // Only some keys of this sub-tensordict are selected: a new level.
    if (dry_run) return locked ? std::optional<NestedKey>(key) : std::nullopt;
    TensorDictBase sub = root.create_nested(key);
    update_walk(root, sub, other.node().find(k)->tensordict(), opt, *f, key, false);
    return std::nullopt;
  }
  const bool inplace =
      opt.inplace && existing == EntryKind::Tensor && src_kind == EntryKind::Tensor;
  if (dry_run) {
    if (!inplace && locked) return key;
    // Tensors are checked before anything is written (metadata only), so a
    // refused update leaves the destination as it was.
    if (src_kind == EntryKind::Tensor && !inplace && !other.node().holds_values()) {
      // A storage's leaf is checked from its metadata: it is read once, by the write.
      detail::check_leaf_batch(other.node().tensor_meta(k)->shape, self.batch_size(), key);
    } else if (src_kind == EntryKind::Tensor || src_kind == EntryKind::TensorDict) {
      const Value v = *other.node().find(k);
      if (inplace)
        check_inplace(root.node_ptr(), key, v.tensor(), "update()");
      else
        detail::validate_value(v, self.batch_size(), self.device(), key);
    }
    return std::nullopt;
  }
  Value v = *other.node().find(k);
  if (opt.clone) {
    if (v.is_tensor())
      v = v.tensor().clone();
    else if (v.is_tensordict())
      v = TensorDictBase(v.tensordict().clone());
  }
  if (inplace)
    root.set_(key, v.tensor());
  else
    set_impl(root.node_ptr(), key, std::move(v), /*check_lock=*/!opt.ignore_lock);
  return std::nullopt;
}

// True when `v` can be stored as it is in the in-memory level `dst`: a defined tensor on dst's
// device whose leading dims are dst's batch size (what validate_value would accept unchanged).
// Anything else goes through set(), which reports errors.
bool storable_as_is(const Value& v, at::IntArrayRef batch,
                    const std::optional<at::Device>& device) {
  if (!v.is_tensor()) return false;
  const at::Tensor& t = std::get<0>(v.variant());
  if (!t.defined()) return false;
  if (device && t.device() != *device) return false;
  const at::IntArrayRef sizes = t.sizes();
  if (sizes.size() < batch.size() || !std::equal(batch.begin(), batch.end(), sizes.begin()))
    return false;
  return true;
}

std::optional<NestedKey> update_walk(TensorDictBase& root, const TensorDictBase& self,
                                     const TensorDictBase& other, const UpdateOptions& opt,
                                     const KeyFilter& filter, const NestedKey& path, bool dry_run) {
  // Both levels in memory and every key taken as it is: pair the entries
  // directly, storing tensors that fit without the checks and key copies of
  // set() (update's common case: a tensordict built or indexed in memory).
  if (filter.all && !opt.clone && !opt.inplace && self.node().is_memory_node() &&
      other.node().is_memory_node() && (opt.ignore_lock || !self.node().locked())) {
    auto& dst = static_cast<detail::MemoryNode&>(self.node());
    const auto& src = static_cast<const detail::MemoryNode&>(other.node());
    const at::IntArrayRef batch = dst.batch_size();  // not changed by the writes below
    const std::optional<at::Device> device = dst.device();
    for (const auto& [k, v] : src.entries()) {
      if (storable_as_is(v, batch, device)) {
        if (dry_run) continue;
        // Replacing a tensor: assign the tensor itself, not the whole Value.
        Value* existing = dst.peek_mut(k);
        if (existing && existing->is_tensor())
          std::get<0>(existing->variant()) = std::get<0>(v.variant());
        else
          dst.write(k, v);
        continue;
      }
      if (auto refused = update_entry(root, self, other, k, opt, filter, path, dry_run))
        return refused;
    }
    return std::nullopt;
  }
  for (const auto& k : other.node().keys())
    if (auto refused = update_entry(root, self, other, k, opt, filter, path, dry_run))
      return refused;
  return std::nullopt;
}

}  // namespace

TensorDictBase& TensorDictBase::update(const TensorDictBase& other, const UpdateOptions& options) {
  if (is_same(other)) return *this;
  if (is_locked() && !options.inplace && !options.ignore_lock) throw_locked(NestedKey(), "update");
  KeyFilter filter = KeyFilter::from(options.keys_to_update);
  // Everything is checked (locks, tensor shapes) before anything is written.
  if (auto refused = update_walk(*this, *this, other, options, filter, NestedKey(),
                                 /*dry_run=*/true))
    throw_locked(*refused, "update");
  update_walk(*this, *this, other, options, filter, NestedKey(), /*dry_run=*/false);
  return *this;
}

namespace {
// update_ of the non-tensor entry `dest` (of `parent`) with `src`: a
// NonTensorData source keeps the destination's kind (a stack receives the
// value in every element); a NonTensorStack source replaces it and must have
// the destination's batch size.
Value update_non_tensor(const Value& dest, const Value& src, const Node& parent,
                        const NestedKey& key) {
  const at::IntArrayRef dest_batch =
      dest.is_non_tensor() ? dest.non_tensor().batch_size() : dest.non_tensor_stack().batch_size();
  const auto device =
      dest.is_non_tensor() ? dest.non_tensor().device() : dest.non_tensor_stack().device();
  if (src.is_non_tensor()) {
    NonTensorData d(src.non_tensor().data(), dest_batch.vec(), device);
    if (dest.is_non_tensor()) return d;
    return NonTensorStack::from_non_tensor(d);
  }
  NonTensorStack s = src.non_tensor_stack();
  if (!s.batch_size().equals(dest_batch))
    throw ShapeError("update_(): the NonTensorStack for " + key.repr() + " has batch size " +
                     format_shape(s.batch_size()) + " and the destination " +
                     format_shape(dest_batch));
  if (dest.is_non_tensor() && detail::backs_files(parent))
    throw LockedError("update_(): " + key.repr() +
                      " holds a NonTensorData in a memory-mapped or shared tensordict, "
                      "which cannot become a NonTensorStack (its storage is fixed)");
  s.set_device(device);
  return s;
}
}  // namespace

TensorDictBase& TensorDictBase::update_(const TensorDictBase& other,
                                        const std::vector<NestedKey>& keys_to_update) {
  auto entries = other.items(KeysOptions{true, true, true});
  KeyFilter filter = KeyFilter::from(keys_to_update);
  std::vector<std::pair<NestedKey, Value>> todo;
  for (auto& [k, v] : entries) {
    const KeyFilter* f = &filter;
    for (const auto& part : k) {
      f = f ? f->child(part) : nullptr;
    }
    if (!f || !f->all) continue;
    auto kind = entry_kind(k);
    if (!kind)
      throw KeyError("update_(): key " + k.repr() +
                     " not found in the destination (update_ writes existing "
                     "entries only)");
    const bool both_non_tensor = v.is_non_tensor_or_stack() && (*kind == EntryKind::NonTensor ||
                                                                *kind == EntryKind::NonTensorStack);
    if (*kind != v.kind() && !both_non_tensor)
      throw TypeError("update_(): entry " + k.repr() + " is a " + tensordict::to_string(*kind) +
                      " here and a " + tensordict::to_string(v.kind()) + " in the source");
    todo.emplace_back(k, v);
  }
  // Every tensor is checked (kind, shape: metadata only) before anything is
  // written; the leaves of a storage are then written with one call.
  std::vector<InplaceWrite> tensor_writes;
  std::vector<std::tuple<std::shared_ptr<Node>, std::string, Value>> non_tensor_writes;
  for (auto& [k, v] : todo) {
    if (v.is_tensor()) {
      tensor_writes.push_back(check_inplace(node_, k, v.tensor(), "update_()"));
      continue;
    }
    // A non-tensor value is replaced in place (allowed while locked).
    auto parent = walk_parent(node_, k, false);
    Value updated = update_non_tensor(*parent->find(k.back()), v, *parent, k);
    non_tensor_writes.emplace_back(parent, k.back(), std::move(updated));
  }
  detail::BatchedWrites writes;
  for (const auto& w : tensor_writes) w.commit(writes);
  if (!writes.empty()) writes.run(RowSelection::all(batch_size()));
  for (auto& [parent, key, updated] : non_tensor_writes) {
    parent->write(key, updated);
    detail::persist_non_tensor(*parent, key, updated);
  }
  return *this;
}

TensorDictBase& TensorDictBase::del_(const NestedKey& key) {
  auto parent = walk_parent(node_, key, false);
  if (!parent->kind(key.back())) throw_missing(key, key.size() - 1, *parent);
  if (parent->locked()) throw_locked(key, "del_");
  parent->remove(key.back());
  return *this;
}

Value TensorDictBase::pop(const NestedKey& key) {
  auto parent = walk_parent(node_, key, false);
  auto v = parent->find(key.back());
  if (!v) throw_missing(key, key.size() - 1, *parent);
  if (parent->locked()) throw_locked(key, "pop");
  parent->remove(key.back());
  return std::move(*v);
}

Value TensorDictBase::pop(const NestedKey& key, Value default_value) {
  if (!contains(key)) return default_value;
  return pop(key);
}

TensorDictBase& TensorDictBase::rename_key_(const NestedKey& old_key, const NestedKey& new_key,
                                            bool safe) {
  auto parent = walk_parent(node_, old_key, false);
  auto v = parent->find(old_key.back());
  if (!v) throw_missing(old_key, old_key.size() - 1, *parent);
  if (parent->locked()) throw_locked(old_key, "rename_key_");
  if (old_key == new_key) return *this;
  if (safe && contains(new_key))
    throw KeyError("rename_key_: key " + new_key.repr() + " already present (safe=true)");
  set(new_key, std::move(*v));
  parent->remove(old_key.back());
  return *this;
}

namespace {

// Copies the entries `filter` keeps, in the source's key order at every level.
// Missing keys are skipped (strict mode checks every key beforehand).
void select_into(const TensorDictBase& src, TensorDict& out, const KeyFilter& filter) {
  for (const auto& k : src.node().keys()) {
    auto it = filter.children.find(k);
    if (it == filter.children.end()) continue;
    const KeyFilter& f = it->second;
    auto v = src.node().find(k);
    if (f.all) {
      out.node().write(k, *v);
      continue;
    }
    if (!v->is_tensordict()) continue;
    const auto& sub = v->tensordict();
    TensorDict sub_out = detail::make_tensordict(sub.batch_size().vec(), sub.device());
    select_into(sub, sub_out, f);
    out.node().write(k, sub_out);
  }
}

TensorDict exclude_copy(const TensorDictBase& src, const KeyFilter& filter) {
  TensorDict out = detail::make_tensordict(src.batch_size().vec(), src.device());
  for (const auto& k : src.node().keys()) {
    auto it = filter.children.find(k);
    auto v = src.node().find(k);
    if (it == filter.children.end()) {
      out.node().write(k, *v);
    } else if (!it->second.all && v->is_tensordict()) {
      out.node().write(k, exclude_copy(v->tensordict(), it->second));
    }
  }
  return out;
}

}  // namespace

TensorDictBase TensorDictBase::select(const std::vector<NestedKey>& keys, bool strict) const {
  if (auto lazy = detail::lazy_dispatch(
          *this, detail::map_members,
          [&](const TensorDictBase& m, std::size_t) { return m.select(keys, strict); }))
    return std::move(*lazy);
  TensorDict out = detail::make_tensordict(batch_size().vec(), device());
  KeyFilter filter;
  for (const auto& k : keys) {
    KeyFilter* cur = &filter;
    for (const auto& part : k) cur = &cur->children[part];
    cur->all = true;
  }
  // at() names the full path in its KeyError / TypeError.
  if (strict)
    for (const auto& k : keys) (void)at(k);
  select_into(*this, out, filter);
  return out;
}

TensorDictBase TensorDictBase::exclude(const std::vector<NestedKey>& keys) const {
  if (auto lazy = detail::lazy_dispatch(
          *this, detail::map_members,
          [&](const TensorDictBase& m, std::size_t) { return m.exclude(keys); }))
    return std::move(*lazy);
  KeyFilter filter;
  for (const auto& k : keys) {
    KeyFilter* cur = &filter;
    for (const auto& part : k) cur = &cur->children[part];
    cur->all = true;
  }
  return exclude_copy(*this, filter);
}

TensorDictBase& TensorDictBase::select_(const std::vector<NestedKey>& keys, bool strict) {
  if (is_locked()) throw_locked(NestedKey(), "select_");
  if (detail::lazy_dispatch(*this, detail::lazy_select_, keys, strict)) return *this;
  TensorDictBase kept = select(keys, strict);
  for (const auto& k : node().keys()) node().remove(k);
  for (const auto& k : kept.node().keys()) node().write(k, *kept.node().find(k));
  return *this;
}

TensorDictBase& TensorDictBase::exclude_(const std::vector<NestedKey>& keys) {
  if (is_locked()) throw_locked(NestedKey(), "exclude_");
  for (const auto& k : keys) {
    auto kind = entry_kind(k);
    if (kind) {
      auto parent = walk_parent(node_, k, false);
      if (parent->locked()) throw_locked(k, "exclude_");
      parent->remove(k.back());
    }
  }
  return *this;
}

TensorDictBase TensorDictBase::empty(bool recurse) const {
  if (auto lazy = detail::lazy_dispatch(
          *this, detail::map_members,
          [&](const TensorDictBase& m, std::size_t) { return m.empty(recurse); }))
    return std::move(*lazy);
  TensorDict out = detail::make_tensordict(batch_size().vec(), device());
  if (recurse) {
    for (const auto& k : node().keys()) {
      if (node().kind(k) != EntryKind::TensorDict) continue;  // leaves are not read
      out.node().write(k, node().find(k)->tensordict().empty(true));
    }
  }
  return out;
}

TensorDict TensorDictBase::flatten_keys(std::string_view separator) const {
  if (separator.empty()) throw ValueError("flatten_keys: empty separator");
  TensorDict out = detail::make_tensordict(batch_size().vec(), device());
  std::function<void(const TensorDictBase&, const std::string&)> rec =
      [&](const TensorDictBase& td, const std::string& prefix) {
        for (const auto& k : td.node().keys()) {
          auto v = td.node().find(k);
          std::string name = prefix.empty() ? k : prefix + std::string(separator) + k;
          if (v->is_tensordict() && !v->tensordict().is_empty()) {
            rec(v->tensordict(), name);
            continue;
          }
          if (out.node().peek(name))
            throw KeyError("flatten_keys: the flattened key '" + name +
                           "' collides with an existing key");
          out.node().write(name, *v);
        }
      };
  rec(*this, "");
  return out;
}

TensorDict TensorDictBase::unflatten_keys(std::string_view separator) const {
  if (separator.empty()) throw ValueError("unflatten_keys: empty separator");
  TensorDict out = detail::make_tensordict(batch_size().vec(), device());
  for (const auto& k : node().keys()) {
    Value v = *node().find(k);
    if (v.is_tensordict()) v = TensorDictBase(v.tensordict().unflatten_keys(separator));
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (true) {
      auto pos = k.find(separator, start);
      parts.push_back(k.substr(start, pos == std::string::npos ? pos : pos - start));
      if (pos == std::string::npos) break;
      start = pos + separator.size();
    }
    NestedKey key(parts);
    if (out.contains(key))
      throw KeyError("unflatten_keys: key " + key.repr() + " (from '" + k +
                     "') collides with an existing key");
    // A prefix already stored as a leaf is a collision too, not a TypeError.
    NestedKey level;
    for (std::size_t i = 0; i + 1 < key.size(); ++i) {
      level = level.child(key[i]);
      auto kind = out.entry_kind(level);
      if (kind && *kind != EntryKind::TensorDict)
        throw KeyError("unflatten_keys: key " + key.repr() + " (from '" + k +
                       "') collides with the existing leaf " + level.repr());
    }
    out.set(key, std::move(v));
  }
  return out;
}

// ---- copies ------------------------------------------------------------------

namespace {

// A storage that does not hold values, read whole into `dst` with one
// read_leaves call for all its levels (queued in `reads`); in-memory levels
// and lazy stacks below it are converted by `other_child`.
void read_storage_into(const Node& src, detail::MemoryNode& dst, const NestedKey& path,
                       const Node* storage, detail::BatchedReads& reads,
                       const std::function<TensorDictBase(const TensorDictBase&)>& other_child) {
  const auto keys = src.keys();
  dst.reserve(keys.size());
  for (const auto& k : keys) {
    NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
    const auto kind = src.kind(k);
    if (!kind) continue;
    if (*kind == EntryKind::Tensor) {
      dst.write(k, at::Tensor());
      reads.add(storage, src.shared_from_this(), std::move(key), &dst);
      continue;
    }
    Value v = *src.find(k);
    if (*kind != EntryKind::TensorDict) {
      dst.write(k, std::move(v));
      continue;
    }
    const TensorDictBase& child = v.tensordict();
    if (child.node().holds_values() || child.node().is_lazy_stack()) {
      dst.write(k, other_child(child));
      continue;
    }
    auto sub = std::make_shared<detail::MemoryNode>(child.batch_size(), child.device());
    read_storage_into(child.node(), *sub, key, storage, reads, other_child);
    dst.write(k, TensorDictBase(sub));
  }
}

TensorDict read_storage(const Node& src, bool clone_leaves,
                        const std::function<TensorDictBase(const TensorDictBase&)>& other_child) {
  TensorDict out = detail::make_tensordict(src.batch_size().vec(), src.device());
  detail::BatchedReads reads;
  read_storage_into(src, static_cast<detail::MemoryNode&>(out.node()), NestedKey(), &src, reads,
                    other_child);
  if (reads.empty()) return out;
  // A storage may hand out its own tensors (Node::read_at's default returns
  // the leaf): a clone must not share them.
  reads.run(RowSelection::all(src.batch_size()), /*clone_results=*/clone_leaves);
  return out;
}

}  // namespace

TensorDictBase TensorDictBase::clone(bool recurse) const {
  const Node& src = node();
  if (!src.holds_values() && !src.is_lazy_stack())
    return read_storage(src, recurse,
                        [recurse](const TensorDictBase& c) { return c.clone(recurse); });
  if (auto lazy = detail::lazy_dispatch(
          src, detail::map_members,
          [&](const TensorDictBase& m, std::size_t) { return m.clone(recurse); }))
    return std::move(*lazy);
  TensorDict out = detail::make_tensordict(src.batch_size().vec(), src.device());
  auto& dst = static_cast<detail::MemoryNode&>(out.node());
  dst.reserve(src.size());
  auto copy_entry = [&](const std::string& k, const Value& v) {
    switch (v.kind()) {
      case EntryKind::Tensor:
        dst.write(k, recurse ? std::get<0>(v.variant()).clone() : std::get<0>(v.variant()));
        break;
      case EntryKind::TensorDict:
        dst.write(k, std::get<1>(v.variant()).clone(recurse));
        break;
      case EntryKind::NonTensor:
      case EntryKind::NonTensorStack:
        dst.write(k, v);
        break;
    }
  };
  if (src.is_memory_node()) {
    for (const auto& [k, v] : static_cast<const detail::MemoryNode&>(src).entries())
      copy_entry(k, v);
  } else {
    for (const auto& k : src.keys()) copy_entry(k, *src.find(k));
  }
  return out;
}

TensorDictBase TensorDictBase::copy() const { return clone(false); }

TensorDict TensorDictBase::to_tensordict() const {
  // A storage outside memory: every leaf in one read_leaves call.
  if (!node().holds_values() && !node().is_lazy_stack())
    return read_storage(node(), /*clone_leaves=*/true,
                        [](const TensorDictBase& c) { return TensorDictBase(c.to_tensordict()); });
  // Dense all the way down: lazy stacks (also nested ones) are stacked.
  return detail::map_leaves(
      *this, batch_size().size(), batch_size(),
      [](const at::Tensor& t, const NestedKey&) { return t.clone(); }, "to_tensordict");
}

// ---- locking -------------------------------------------------------------------

bool TensorDictBase::is_locked() const { return node().locked(); }
FileBacking& detail::mutable_file_backing(Node& node) {
  if (FileBacking* files = node.file_backing()) return *files;
  throw UnsupportedError("a " + node.type_name() +
                         " cannot be backed by memory-mapped or shared-memory files");
}

const std::string& detail::saved_path_of(const Node& node) noexcept {
  static const std::string none;
  const FileBacking* files = file_backing(node);
  return files != nullptr ? files->saved_path : none;
}

bool TensorDictBase::is_shared() const { return detail::is_shared_node(node()); }
bool TensorDictBase::is_memmap() const { return detail::is_memmap_node(node()); }

namespace {

void lock_rec(const std::shared_ptr<Node>& n) {
  n->set_locked_flag(true);
  for (auto& c : detail::children(*n)) {
    auto& parents = c.node().lock_parents();
    bool known = false;
    for (auto& p : parents)
      if (!p.owner_before(n) && !n.owner_before(p)) known = true;
    if (!known) parents.emplace_back(n);
    lock_rec(c.node_ptr());
  }
}

void collect_subtree(const std::shared_ptr<Node>& n, std::unordered_set<const Node*>& seen,
                     std::vector<std::shared_ptr<Node>>& out) {
  if (!seen.insert(n.get()).second) return;
  out.push_back(n);
  for (auto& c : detail::children(*n)) collect_subtree(c.node_ptr(), seen, out);
}

}  // namespace

TensorDictBase& TensorDictBase::lock_() {
  lock_rec(node_ ? node_ : throw ValueError("null handle"));
  return *this;
}

TensorDictBase& TensorDictBase::unlock_() {
  std::unordered_set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> subtree;
  collect_subtree(node_ ? node_ : throw ValueError("null handle"), seen, subtree);
  // Check everything first so that a refused unlock changes nothing.
  for (auto& n : subtree) {
    for (auto& wp : n->lock_parents()) {
      auto p = wp.lock();
      if (p && p->locked() && !seen.count(p.get()))
        throw LockedError(
            "Cannot unlock a tensordict that is part of a locked graph. A "
            "nested tensordict is still held by a locked " +
            p->type_name() + "; unlock the root tensordict first.");
    }
  }
  for (auto& n : subtree) {
    n->set_locked_flag(false);
    if (FileBacking* files = n->file_backing()) files->memmap = files->shared = false;
    auto& parents = n->lock_parents();
    parents.erase(std::remove_if(parents.begin(), parents.end(),
                                 [&](const std::weak_ptr<Node>& wp) {
                                   auto p = wp.lock();
                                   return !p || seen.count(p.get());
                                 }),
                  parents.end());
  }
  return *this;
}

}  // namespace tensordict
