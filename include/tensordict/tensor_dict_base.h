#pragma once
/// @file tensor_dict_base.h
/// TensorDictBase: the handle every tensordict API accepts, and Value, one entry
/// of a tensordict (a tensor, a nested tensordict or a non-tensor value).

#include <ATen/TensorIndexing.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <tensordict/errors.h>
#include <tensordict/nested_key.h>
#include <tensordict/non_tensor.h>
#include <tensordict/row_selection.h>
#include <tensordict/state_dict.h>
#include <tensordict/storage/memmap_options.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace tensordict {

class Node;
class Value;
class TensorDict;
/// What an EntriesView yields: keys (std::string_view) or (key, const Value&).
enum class EntryProjection : std::uint8_t { Key, KeyValue };
template <EntryProjection P>
class EntriesView;
class KeyList;
class ItemList;

/// The kind of one entry. NonTensor is a NonTensorData (one value for the
/// whole batch), NonTensorStack one value per batch element.
enum class EntryKind : std::uint8_t { Tensor, TensorDict, NonTensor, NonTensorStack };

/// "Tensor", "TensorDict", "NonTensorData" or "NonTensorStack".
const char* to_string(EntryKind kind) noexcept;

namespace detail {
/// The hot path of TensorDictBase::get(): the tensor at the path `parts`
/// (string_views or strings) when every level is an in-memory tensordict
/// holding the next part with the right kind; nullptr otherwise (null root,
/// empty path, missing key, wrong kind, another storage), and get() takes its
/// out-of-line path, which reports the error. Defined in tensor_dict.h, so
/// that the lookup is inlined where that header is seen (tensordict.h includes
/// it) and literal keys are folded at compile time; the library instantiates
/// it for the translation units that see only this declaration.
template <class Part>
const at::Tensor* find_memory_tensor(const Node* root, const Part* parts,
                                     std::size_t count) noexcept;
}  // namespace detail

/// Which keys keys()/values()/items() visit.
struct KeysOptions {
  /// Descend into nested tensordicts; a nested tensordict is listed before its
  /// own keys (unless leaves_only).
  bool include_nested = false;
  /// Only tensor leaves (Python's default is_leaf): nested tensordicts and,
  /// unless non_tensor_leaves, non-tensor entries are skipped.
  bool leaves_only = false;
  /// With leaves_only: count non-tensor entries (NonTensorData and
  /// NonTensorStack) as leaves too (Python's is_leaf=is_leaf_nontensor).
  bool non_tensor_leaves = false;
  /// Sort by the "."-joined key instead of insertion order.
  bool sort = false;
};

/// Options of TensorDictBase::named_apply (Python's keyword arguments).
struct NamedApplyOptions {
  /// Pass the full nested key (("nested", "a")) instead of the leaf's own
  /// name ("a"), Python's nested_keys=True.
  bool nested_keys = false;
};

/// Options of TensorDictBase::update.
struct UpdateOptions {
  /// Clone the source values before storing them.
  bool clone = false;
  /// Copy into existing leaves (like set_) where the key exists; add the others.
  /// Allowed on a locked tensordict only when every key exists.
  bool inplace = false;
  /// Restrict the update to these keys of the source (empty: all keys).
  std::vector<NestedKey> keys_to_update = {};
  /// Bypass the lock of the destination.
  bool ignore_lock = false;
};

/// A handle to a tensordict of any storage: a nested, ordered dictionary of
/// tensors sharing leading batch dimensions.
///
/// Handles behave like torch::Tensor: copying a handle aliases the same data,
/// clone() copies it. Every storage (in memory, memory-mapped, HDF5, Redis, lazy
/// stacks) is reached through this type; concrete types (TensorDict, ...) derive
/// from it and add their own constructors. is<T>() / as<T>() are checked
/// downcasts.
///
/// Thread safety: like a standard container. Concurrent const calls are safe;
/// any mutation needs external synchronization against every other call on the
/// same tensordict or one that shares nested tensordicts with it.
class TensorDictBase {
 public:
  /// A null handle; most calls on it throw. Use defined() to test.
  TensorDictBase() = default;
  explicit TensorDictBase(std::shared_ptr<Node> node);

  bool defined() const noexcept { return node_ != nullptr; }
  /// The storage behind this handle.
  Node& node() const;
  const std::shared_ptr<Node>& node_ptr() const noexcept { return node_; }
  /// True when both handles refer to the same tensordict.
  bool is_same(const TensorDictBase& other) const noexcept { return node_ == other.node_; }
  /// The class name Python would print ("TensorDict", ...).
  std::string type_name() const;

  /// True when the storage is of the concrete type T (TensorDict, ...).
  template <class T>
  bool is() const {
    return defined() && T::is_node(node());
  }
  /// Checked downcast; TypeError when the storage is not a T.
  template <class T>
  T as() const {
    if (!is<T>())
      throw TypeError("cannot view a " + (defined() ? type_name() : std::string("null handle")) +
                      " as " + T::static_type_name());
    return T(node_);
  }

  // ---- shape and device -------------------------------------------------
  /// The leading dimensions every entry shares.
  at::IntArrayRef batch_size() const;
  /// Alias of batch_size().
  at::IntArrayRef shape() const { return batch_size(); }
  /// Sets the batch size, checking every entry (Python's batch_size setter):
  /// each tensor must start with `new_size`; nested tensordicts with fewer dims
  /// are resized to `new_size` first. ShapeError otherwise, and nothing changes.
  TensorDictBase& set_batch_size(at::IntArrayRef new_size);
  /// Number of batch dimensions.
  int64_t batch_dims() const;
  int64_t ndim() const { return batch_dims(); }
  int64_t dim() const { return batch_dims(); }
  /// Product of the batch size (1 for batch []).
  int64_t numel() const;
  /// batch_size()[d], d may be negative. IndexError when out of range.
  int64_t size(int64_t d) const;
  /// Python's len(td): batch_size()[0], 0 when there is no batch dim.
  int64_t len() const;
  /// The device every entry lives on, or nullopt when devices may be mixed.
  std::optional<at::Device> device() const;
  /// Sets the device to nullopt, recursively (entries stay where they are).
  TensorDictBase& clear_device_();

  // ---- keys and iteration -----------------------------------------------
  /// The keys, in insertion order (see KeysOptions). A KeyList is an
  /// immutable list: the top-level keys of an in-memory level are built once
  /// per key set and shared by every call (and by the results of indexing),
  /// so listing them costs about what copying a shared_ptr does.
  KeyList keys(bool include_nested = false, bool leaves_only = false) const;
  KeyList keys(const KeysOptions& options) const;
  std::vector<Value> values(bool include_nested = false, bool leaves_only = false) const;
  std::vector<Value> values(const KeysOptions& options) const;
  /// The (key, value) pairs (see KeysOptions and ItemList: a view of the
  /// level's values, as Python's items(); convert it to a std::vector for a
  /// copy that outlives changes of the tensordict).
  ItemList items(bool include_nested = false, bool leaves_only = false) const;
  ItemList items(const KeysOptions& options) const;
  /// (key, value) of every non-tensor entry (a NonTensorStack gives its
  /// nested list, as get_non_tensor).
  std::vector<std::pair<NestedKey, nlohmann::json>> non_tensor_items(
      bool include_nested = false) const;
  /// Calls fn(key, value) on each entry (KeysOptions as in keys()). Cheaper
  /// than items() for large trees.
  void for_each(const std::function<void(const NestedKey&, const Value&)>& fn,
                const KeysOptions& options = {}) const;
  /// The top-level keys as std::string_view, in insertion order, without
  /// building a NestedKey (or a string) per key: `for (std::string_view k :
  /// td.keys_view())`. See EntriesView for what the view refers to.
  EntriesView<EntryProjection::Key> keys_view() const;
  /// The top-level (key, value) pairs, in insertion order, without building a
  /// key per entry: `for (auto [k, v] : td.items_view())`, k a std::string_view,
  /// v a const Value&.
  EntriesView<EntryProjection::KeyValue> items_view() const;
  /// Number of entries at the top level.
  std::size_t num_keys() const;
  bool contains(const NestedKey& key) const;
  /// The kind of the entry at key, nullopt when missing.
  std::optional<EntryKind> entry_kind(const NestedKey& key) const;
  /// True when there is no leaf, recursively (non-tensors count as leaves).
  bool is_empty() const;

  // ---- reads --------------------------------------------------------------
  /// The entry at key, whatever its kind. KeyError names the path and the keys
  /// present at the level where the lookup failed.
  Value at(const NestedKey& key) const;
  /// The entry at key, or nullopt when any level is missing.
  std::optional<Value> find(const NestedKey& key) const;
  /// The tensor at key. KeyError when missing, TypeError when the entry is not
  /// a tensor.
  at::Tensor get(const NestedKey& key) const {
    if (const at::Tensor* t =
            detail::find_memory_tensor(node_.get(), key.parts().data(), key.size()))
      return *t;
    return get_checked(key);
  }
  /// get() of a braced path, e.g. get({"next", "obs"}): same result, without
  /// building a NestedKey (the hot path of nested reads).
  at::Tensor get(std::initializer_list<std::string_view> path) const {
    if (const at::Tensor* t = detail::find_memory_tensor(node_.get(), path.begin(), path.size()))
      return *t;
    return get_checked(path);
  }
  /// The tensor at key, or `default_value` when the key is missing.
  at::Tensor get(const NestedKey& key, const at::Tensor& default_value) const;
  /// The nested tensordict at key (KeyError / TypeError as get()).
  TensorDictBase get_tensordict(const NestedKey& key) const;
  /// The value of the non-tensor entry at key: a NonTensorData's value, or a
  /// NonTensorStack's nested list of per-element values (Python's td[key]).
  /// KeyError when missing, TypeError for a tensor or a tensordict.
  nlohmann::json get_non_tensor(const NestedKey& key) const;
  nlohmann::json get_non_tensor(const NestedKey& key, nlohmann::json default_value) const;
  /// The per-element values at key: a NonTensorStack as stored, or a
  /// NonTensorData repeated over its batch size (Python's maybe_to_stack).
  /// KeyError when missing; TypeError for a tensor, a tensordict, or a
  /// NonTensorData of batch size [].
  NonTensorStack get_non_tensor_stack(const NestedKey& key) const;
  /// True when the entry at key exists and is a non-tensor (NonTensorData or
  /// NonTensorStack, as Python's is_non_tensor).
  bool is_non_tensor(const NestedKey& key) const;
  /// Shape of the entry at key without reading it (a tensordict's batch size).
  std::vector<int64_t> get_item_shape(const NestedKey& key) const;

  // ---- writes -------------------------------------------------------------
  /// Stores `value` at key, replacing any entry. Missing intermediate levels
  /// are created with this batch size and device. The value must start with
  /// the batch size (ShapeError); with a device, tensors are moved there.
  /// A nested tensordict whose batch size starts with ours is stored as the
  /// same object; otherwise a shallow copy with our batch size is stored.
  /// LockedError when locked.
  TensorDictBase& set(const NestedKey& key, Value value);
  /// set() of a tensor at a top-level key: the same checks and errors, with a
  /// fast path for replacing a tensor of an in-memory level (no key or entry
  /// is built), the usual write of a training loop.
  TensorDictBase& set(const char* key, const at::Tensor& value);
  /// With inplace=true: copies into the existing tensor when key exists (as
  /// set_), otherwise adds it (as set). Python's set(..., inplace=True).
  TensorDictBase& set(const NestedKey& key, Value value, bool inplace);
  /// Copies `value` into the existing tensor at key, casting to its dtype and
  /// broadcasting. KeyError when missing, ShapeError when the shape differs.
  /// Allowed on locked tensordicts.
  TensorDictBase& set_(const NestedKey& key, const at::Tensor& value);
  /// Stores a NonTensorData holding `value` at key.
  TensorDictBase& set_non_tensor(const NestedKey& key, nlohmann::json value);
  /// Stores a NonTensorStack at key: `values` is a nested list with one level
  /// per batch dim of the entry's tensordict (a list of batch_size[0] lists
  /// of batch_size[1] ... values). ValueError naming the key when `values` is
  /// not a list or a length differs from the batch size.
  TensorDictBase& set_non_tensor_stack(const NestedKey& key, const nlohmann::json& values);
  /// Creates (or returns) an empty nested tensordict at key with this batch
  /// size and device.
  TensorDictBase create_nested(const NestedKey& key);
  /// Recursive merge of `other` into this tensordict: keys are added or
  /// replaced; nested tensordicts are merged. See UpdateOptions.
  TensorDictBase& update(const TensorDictBase& other, const UpdateOptions& options = {});
  /// Strictly in-place update: every key of `other` (or of keys_to_update)
  /// must exist here (KeyError); values are copied into the existing storage.
  /// Allowed on locked tensordicts.
  TensorDictBase& update_(const TensorDictBase& other,
                          const std::vector<NestedKey>& keys_to_update = {});
  /// Removes the entry at key. KeyError when missing, LockedError when locked.
  TensorDictBase& del_(const NestedKey& key);
  /// Removes and returns the entry at key. KeyError when missing.
  Value pop(const NestedKey& key);
  /// Removes and returns the entry at key, or `default_value` when missing.
  Value pop(const NestedKey& key, Value default_value);
  /// Renames an entry; `safe` makes an existing `new_key` a KeyError instead of
  /// being overwritten. The renamed entry moves to the end of its level.
  TensorDictBase& rename_key_(const NestedKey& old_key, const NestedKey& new_key,
                              bool safe = false);
  /// A new TensorDict (sharing the tensors) with only `keys`. With strict, a
  /// missing key is a KeyError; otherwise it is skipped.
  TensorDictBase select(const std::vector<NestedKey>& keys, bool strict = true) const;
  /// A new TensorDict (sharing the tensors) without `keys` (missing keys are
  /// ignored).
  TensorDictBase exclude(const std::vector<NestedKey>& keys) const;
  /// In-place select: removes every other key. LockedError when locked.
  TensorDictBase& select_(const std::vector<NestedKey>& keys, bool strict = true);
  /// In-place exclude. LockedError when locked (Python does not check; we do).
  TensorDictBase& exclude_(const std::vector<NestedKey>& keys);
  /// A TensorDict with the same batch size and device and no entries; with
  /// recurse, the nested structure is kept without leaves.
  TensorDictBase empty(bool recurse = false) const;
  /// Nested keys joined with `separator` into one level (a new TensorDict
  /// sharing the tensors). KeyError on a collision.
  TensorDict flatten_keys(std::string_view separator = ".") const;
  /// The inverse of flatten_keys: keys are split on `separator`.
  TensorDict unflatten_keys(std::string_view separator = ".") const;

  // ---- copies ---------------------------------------------------------------
  /// A new in-memory TensorDict. recurse=true clones every tensor; false
  /// makes new containers over the same tensors. Clones are unlocked.
  TensorDictBase clone(bool recurse = true) const;
  /// clone(false).
  TensorDictBase copy() const;
  /// A dense in-memory copy of this content (tensors are cloned, as Python's
  /// to_tensordict does); unlocked.
  TensorDict to_tensordict() const;

  // ---- locking --------------------------------------------------------------
  /// Locks this tensordict and every nested one: entries can no longer be added,
  /// removed or replaced; in-place writes (set_, update_, index_put_) still work.
  TensorDictBase& lock_();
  /// Unlocks this tensordict and its nested ones. LockedError when a nested
  /// tensordict is still held by another locked tensordict ("part of a locked
  /// graph"); then nothing changes. Unlocking clears is_shared/is_memmap.
  TensorDictBase& unlock_();
  bool is_locked() const;
  /// True after share_memory_() (until unlocked).
  bool is_shared() const;
  /// True after memmap_()/memmap()/memmap_like() (until unlocked).
  bool is_memmap() const;

  // ---- memory-mapped and shared-memory storage --------------------------------
  /// Writes this tensordict to the directory `prefix` in Python tensordict's
  /// memmap layout (one `.memmap` file per leaf, one sub-directory per nested
  /// tensordict, `meta.json` per directory) and returns a new TensorDict whose
  /// leaves are mapped from those files. The result is locked and is_memmap():
  /// write with set_, update_, index_put_; set() is refused.
  TensorDictBase memmap(const std::string& prefix, const MemmapOptions& options = {}) const;
  /// As memmap(), but this tensordict's leaves are replaced by the mapped ones
  /// and it is locked.
  TensorDictBase& memmap_(const std::string& prefix, const MemmapOptions& options = {});
  /// Same layout and shapes, files allocated (zero-filled, sparse) but no data
  /// copied: with an expanded source, nothing is allocated in RAM.
  TensorDictBase memmap_like(const std::string& prefix, const MemmapOptions& options = {}) const;
  /// memmap(prefix): Python's save().
  TensorDictBase save(const std::string& prefix, const MemmapOptions& options = {}) const;
  /// Re-reads this memmapped tensordict from the directory it was saved to
  /// (after another process changed it). ValueError when it was never saved.
  TensorDictBase& memmap_refresh_();
  /// The directory this tensordict was memmapped to or loaded from, if any.
  std::optional<std::string> saved_path() const;
  /// Moves every leaf into POSIX shared memory (files under /dev/shm) and locks
  /// the tensordict; another process attaches with attach_shared(shared_name()).
  TensorDictBase& share_memory_();
  /// The name another process passes to attach_shared() (empty if not shared).
  std::string shared_name() const;

  // ---- state dict -------------------------------------------------------------
  /// Python's td.state_dict(): the tensor leaves and the batch size and device
  /// of every node, in the layout `options` asks for (see state_dict.h).
  /// Leaves are detached views unless keep_vars (the legacy layout clones).
  /// A lazy stack gives its stacked leaves; ValueError when its members have
  /// exclusive keys. KeyError when two keys flatten to the same name.
  StateDict state_dict(const StateDictOptions& options = {}) const;
  /// Python's td.load_state_dict(sd, strict): copies the leaves of `state_dict`
  /// (flat, nested or legacy, detected as Python does) into the existing
  /// leaves and sets each node's batch size (and device, when this tensordict
  /// has none) from its metadata. Everything is checked before anything is
  /// written: a leaf of another shape is a ShapeError, of another dtype a
  /// TypeError, a batch size the entries do not start with a ShapeError, a
  /// device other than ours a DeviceError, all naming the key path. With
  /// strict, a key missing from `state_dict` or unknown to this tensordict is
  /// a KeyError (empty nested tensordicts excepted, as in Python); without it,
  /// missing keys are left alone and unknown keys are added (as clones).
  /// Adding keys to, or replacing a non-tensor of, a locked tensordict is a
  /// LockedError.
  TensorDictBase& load_state_dict(const StateDict& state_dict, bool strict = true);

  // ---- consolidated storage -----------------------------------------------------
  /// Python's td.consolidate(): a copy of this tensordict whose tensor leaves
  /// are views into one contiguous uint8 buffer, visited depth-first in key
  /// order (a lazy stack member by member), each leaf padded with zeros to a
  /// multiple of 8 bytes; non-tensors are kept. The result is locked and keeps
  /// the structure (a lazy stack stays one). KeyError for a nested tensordict
  /// named "cls", "non_tensors", "leaves", "cls_metadata" or "size" (reserved
  /// in the metadata); DeviceError for a leaf that is not on the CPU.
  TensorDictBase consolidate() const;
  /// Writes the consolidated file (the buffer, the metadata as compact JSON,
  /// its length as int64 little-endian) to `path` and returns the result of
  /// consolidate() over the file mapped shared: in-place writes reach the file.
  /// StorageError when the file cannot be written.
  TensorDictBase consolidate(const std::string& path) const;
  /// True when every tensor leaf is a contiguous view into one buffer, 8-byte
  /// aligned and not overlapping another (what consolidate() and
  /// TensorDict::from_consolidated() return). True without tensor leaves.
  bool is_consolidated() const;
  /// The buffer of a consolidated tensordict: a 1-D uint8 tensor of the bytes
  /// up to the end of the last leaf's padding. ValueError naming a leaf when
  /// the tensordict is not consolidated.
  at::Tensor consolidated_storage() const;
  /// The metadata of Python's consolidated format for this tensordict and its
  /// buffer (keys in Python's order: "cls", "non_tensors", "leaves",
  /// "cls_metadata", then nested tensordicts or the members "0", "1", ... of a
  /// lazy stack). ValueError when not consolidated.
  nlohmann::ordered_json consolidated_metadata() const;

  // ---- indexing -------------------------------------------------------------
  /// td[idx] with any LibTorch index list. The batch size follows LibTorch:
  /// zeros(batch_size).index(idx).sizes(). Basic indices give views.
  TensorDictBase index(IndexList index) const;
  /// td[i]: integer index along the first batch dimension.
  TensorDictBase operator[](int64_t i) const;
  /// td[idx] = value: writes every key of `value` in place at `idx`, casting to
  /// the destination dtype. A non-tensor value different from the stored
  /// NonTensorData turns it into a NonTensorStack (allowed while locked, as in
  /// Python, but not on a memory-mapped or shared tensordict: LockedError);
  /// a NonTensorStack is written element by element. `value`'s batch size must equal the indexed
  /// batch size or be a suffix of it (then it is broadcast). Keys missing here are pre-allocated as
  /// zeros of shape [*batch_size, *feature] (LockedError when locked); keys of this tensordict
  /// absent from `value` are untouched. Everything is checked before anything is written.
  TensorDictBase& index_put_(IndexList index, const TensorDictBase& value);
  /// Writes `value` (broadcast) at `idx` into every tensor leaf.
  TensorDictBase& index_put_(IndexList index, const at::Tensor& value);
  TensorDictBase& index_put_(IndexList index, const at::Scalar& value);
  /// get(key)[idx], reading only those rows from storages that can.
  at::Tensor get_at(const NestedKey& key, IndexList index) const;
  /// Writes `value` into get(key)[idx] in place (KeyError when missing).
  TensorDictBase& set_at_(const NestedKey& key, const at::Tensor& value, IndexList index);
  /// index_put_ restricted to existing keys: every key of `other` must exist
  /// here (KeyError), nothing is pre-allocated. Allowed on locked tensordicts.
  TensorDictBase& update_at_(const TensorDictBase& other, IndexList index,
                             const std::vector<NestedKey>& keys_to_update = {});

  // ---- shape operations (on batch dims; feature dims follow) ----------------
  /// Each leaf viewed as [*shape, *feature]; -1 is inferred. Returns this
  /// tensordict when the shape is unchanged. Locked if this one is.
  TensorDictBase view(at::IntArrayRef shape) const;
  TensorDictBase reshape(at::IntArrayRef shape) const;
  TensorDictBase flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  TensorDictBase unflatten(int64_t dim, at::IntArrayRef sizes) const;
  /// Removes batch dim `dim` when its size is 1 (no-op otherwise).
  TensorDictBase squeeze(int64_t dim) const;
  /// Removes every batch dim of size 1.
  TensorDictBase squeeze() const;
  TensorDictBase unsqueeze(int64_t dim) const;
  TensorDictBase permute(at::IntArrayRef dims) const;
  TensorDictBase transpose(int64_t dim0, int64_t dim1) const;
  /// Expands to `shape` (at least batch_dims() dims; new leading dims allowed).
  TensorDictBase expand(at::IntArrayRef shape) const;
  /// Views along batch dim `dim`, one per element.
  std::vector<TensorDictBase> unbind(int64_t dim = 0) const;
  std::vector<TensorDictBase> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<TensorDictBase> split(at::IntArrayRef split_sizes, int64_t dim = 0) const;
  std::vector<TensorDictBase> chunk(int64_t chunks, int64_t dim = 0) const;
  TensorDictBase narrow(int64_t dim, int64_t start, int64_t length) const;
  /// `index` has the batch shape (up to dim `dim`) and is expanded to the right
  /// for each leaf; the result's batch size is index.sizes().
  TensorDict gather(int64_t dim, const at::Tensor& index) const;
  /// td[mask] for a bool mask over the leading batch dims.
  TensorDict masked_select(const at::Tensor& mask) const;
  /// Leaves where `mask` (batch-shaped, expanded right) is true set to value.
  TensorDict masked_fill(const at::Tensor& mask, const at::Scalar& value) const;
  TensorDictBase& masked_fill_(const at::Tensor& mask, const at::Scalar& value);
  /// torch::where(condition, this, other) per leaf; `condition` is batch-shaped.
  TensorDict where(const at::Tensor& condition, const TensorDictBase& other) const;
  TensorDict where(const at::Tensor& condition, const at::Scalar& other) const;

  // ---- apply and arithmetic ---------------------------------------------------
  using LeafFn = std::function<at::Tensor(const at::Tensor&)>;
  using LeafFn2 = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
  using NamedLeafFn = std::function<at::Tensor(const NestedKey&, const at::Tensor&)>;
  /// A new TensorDict with fn applied to every tensor leaf (nested included).
  /// A leaf for which fn returns an undefined tensor is dropped. With
  /// `batch_size`, the result has that batch size (for shape-changing fns).
  TensorDictBase apply(const LeafFn& fn,
                       std::optional<std::vector<int64_t>> batch_size = std::nullopt) const;
  /// fn(leaf, other_leaf) for every tensor leaf; KeyError when `other` lacks a
  /// key of this tensordict.
  TensorDictBase apply(const LeafFn2& fn, const TensorDictBase& other) const;
  /// In place: each leaf receives fn(leaf) (copied into its storage). Allowed
  /// on locked tensordicts.
  TensorDictBase& apply_(const LeafFn& fn);
  /// fn(name, leaf) for every tensor leaf (nested included). As in Python,
  /// `name` is the leaf's own name ("a" for ("nested", "a")) unless
  /// options.nested_keys asks for the full nested key.
  TensorDictBase named_apply(const NamedLeafFn& fn, const NamedApplyOptions& options = {}) const;

  TensorDictBase add(const TensorDictBase& other) const;
  TensorDictBase add(const at::Tensor& other) const;
  TensorDictBase add(const at::Scalar& other) const;
  TensorDictBase sub(const TensorDictBase& other) const;
  TensorDictBase sub(const at::Tensor& other) const;
  TensorDictBase sub(const at::Scalar& other) const;
  TensorDictBase mul(const TensorDictBase& other) const;
  TensorDictBase mul(const at::Tensor& other) const;
  TensorDictBase mul(const at::Scalar& other) const;
  TensorDictBase div(const TensorDictBase& other) const;
  TensorDictBase div(const at::Tensor& other) const;
  TensorDictBase div(const at::Scalar& other) const;
  TensorDictBase pow(const at::Scalar& exponent) const;
  TensorDictBase& add_(const TensorDictBase& other);
  TensorDictBase& add_(const at::Tensor& other);
  TensorDictBase& add_(const at::Scalar& other);
  TensorDictBase& sub_(const TensorDictBase& other);
  TensorDictBase& sub_(const at::Tensor& other);
  TensorDictBase& sub_(const at::Scalar& other);
  TensorDictBase& mul_(const TensorDictBase& other);
  TensorDictBase& mul_(const at::Tensor& other);
  TensorDictBase& mul_(const at::Scalar& other);
  TensorDictBase& div_(const TensorDictBase& other);
  TensorDictBase& div_(const at::Tensor& other);
  TensorDictBase& div_(const at::Scalar& other);
  /// this += alpha * other, leaf by leaf (Python's add_(other, alpha=)); the
  /// key sets must match (KeyError). One fused LibTorch call over every leaf
  /// (at::_foreach_add_) when the leaves allow it, as in mul_, zero_, lerp_.
  TensorDictBase& add_(const TensorDictBase& other, const at::Scalar& alpha);
  /// this -= alpha * other (Python's sub_(other, alpha=)).
  TensorDictBase& sub_(const TensorDictBase& other, const at::Scalar& alpha);
  /// this += weight * (end - this), leaf by leaf (torch.lerp_; the soft update
  /// of a target network: `target.lerp_(online, tau)`). The key sets must
  /// match (KeyError naming the keys on one side only). A tensor weight is
  /// broadcast over the batch dims like every tensor operand here; a
  /// tensordict weight gives one weight tensor per leaf.
  TensorDictBase& lerp_(const TensorDictBase& end, const at::Scalar& weight);
  TensorDictBase& lerp_(const TensorDictBase& end, const at::Tensor& weight);
  TensorDictBase& lerp_(const TensorDictBase& end, const TensorDictBase& weight);
  /// Copies `other`'s values into this tensordict's storage (Python's copy_,
  /// which is update_): every key of `other` must be here (KeyError), shapes
  /// broadcast to the leaves'. Allowed on locked tensordicts. One fused
  /// LibTorch call (at::_foreach_copy_) when both are in memory and the
  /// leaves match in shape, dtype and device; update_() otherwise.
  TensorDictBase& copy_(const TensorDictBase& other);
  TensorDictBase neg() const;
  TensorDictBase abs() const;
  TensorDictBase exp() const;
  TensorDictBase log() const;
  TensorDictBase sqrt() const;
  TensorDictBase sigmoid() const;
  TensorDictBase clamp(std::optional<at::Scalar> min, std::optional<at::Scalar> max) const;

  // ---- reductions and comparisons ---------------------------------------------
  /// Without dims: every leaf fully reduced (batch []). With dims: those batch
  /// dims are reduced (IndexError for a feature dim).
  TensorDict sum(std::optional<std::vector<int64_t>> dims = std::nullopt,
                 bool keepdim = false) const;
  TensorDict mean(std::optional<std::vector<int64_t>> dims = std::nullopt,
                  bool keepdim = false) const;
  TensorDict amax(std::optional<std::vector<int64_t>> dims = std::nullopt,
                  bool keepdim = false) const;
  TensorDict amin(std::optional<std::vector<int64_t>> dims = std::nullopt,
                  bool keepdim = false) const;
  /// Values and indices of max/min along batch dim `dim` (Python's
  /// return_indices=True result).
  struct ValuesIndices;
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  /// True when every element of every leaf is non-zero.
  bool all() const;
  /// True when any element of any leaf is non-zero.
  bool any() const;
  /// all/any along batch dim `dim`: a TensorDict of bools.
  TensorDict all(int64_t dim) const;
  TensorDict any(int64_t dim) const;
  /// Element-wise comparisons: TensorDicts of bools with the same structure.
  /// Against a tensordict, the key sets must match exactly (KeyError).
  TensorDictBase eq(const TensorDictBase& other) const;
  TensorDictBase eq(const at::Tensor& other) const;
  TensorDictBase eq(const at::Scalar& other) const;
  TensorDictBase ne(const TensorDictBase& other) const;
  TensorDictBase ne(const at::Tensor& other) const;
  TensorDictBase ne(const at::Scalar& other) const;
  TensorDictBase lt(const at::Scalar& other) const;
  TensorDictBase le(const at::Scalar& other) const;
  TensorDictBase gt(const at::Scalar& other) const;
  TensorDictBase ge(const at::Scalar& other) const;
  /// Same keys, shapes and close values (at::allclose per leaf).
  bool allclose(const TensorDictBase& other, double rtol = 1e-5, double atol = 1e-8,
                bool equal_nan = false) const;
  /// Same keys, shapes, dtypes and values (non-tensors compared too).
  bool equal(const TensorDictBase& other) const;

  // ---- in-place fills, devices, dtypes ----------------------------------------
  TensorDictBase& zero_();
  TensorDictBase& fill_(const at::Scalar& value);
  /// Fills one tensor leaf.
  TensorDictBase& fill_(const NestedKey& key, const at::Scalar& value);
  /// Moves every tensor to `device` and sets the device. Returns this
  /// tensordict when it already has that device. Locked if this one is.
  TensorDictBase to(at::Device device, bool non_blocking = false) const;
  /// Casts every tensor leaf (integers included) to `dtype`.
  TensorDictBase to(at::ScalarType dtype) const;
  TensorDictBase cpu() const { return to(at::Device(at::kCPU)); }
  /// A contiguous copy (leaves already contiguous are shared).
  TensorDict contiguous() const;
  bool is_contiguous() const;
  TensorDictBase detach() const;
  TensorDictBase& detach_();
  /// Sets requires_grad on every floating-point leaf.
  TensorDictBase& requires_grad_(bool requires_grad = true);

  // ---- printing -------------------------------------------------------------
  /// Python's repr layout (fields sorted alphabetically).
  std::string repr() const;
  std::string to_string() const { return repr(); }

 protected:
  std::shared_ptr<Node> node_;

 private:
  // get() when detail::find_memory_tensor() found nothing: the same walk with
  // every error reported, and the other storages read through at().
  at::Tensor get_checked(const NestedKey& key) const;
  at::Tensor get_checked(std::initializer_list<std::string_view> path) const;
};

std::ostream& operator<<(std::ostream& os, const TensorDictBase& td);

/// One entry of a tensordict: a tensor, a nested tensordict, or a non-tensor.
class Value {
 public:
  Value(at::Tensor tensor) : v_(std::move(tensor)) {}    // NOLINT(implicit)
  Value(TensorDictBase td) : v_(std::move(td)) {}        // NOLINT(implicit)
  Value(NonTensorData data) : v_(std::move(data)) {}     // NOLINT(implicit)
  Value(NonTensorStack stack) : v_(std::move(stack)) {}  // NOLINT(implicit)
  /// A string is stored as NonTensorData.
  Value(const char* s) : v_(NonTensorData(nlohmann::json(s))) {}             // NOLINT
  Value(std::string s) : v_(NonTensorData(nlohmann::json(std::move(s)))) {}  // NOLINT
  /// Numbers are not converted implicitly (a literal 0 would otherwise become
  /// a null string): pass a tensor, or NonTensorData(json) for a JSON number.
  Value(std::nullptr_t) = delete;
  Value(int) = delete;

  EntryKind kind() const noexcept { return static_cast<EntryKind>(v_.index()); }
  bool is_tensor() const noexcept { return v_.index() == 0; }
  bool is_tensordict() const noexcept { return v_.index() == 1; }
  /// A NonTensorData (one value for the batch). See is_non_tensor_or_stack().
  bool is_non_tensor() const noexcept { return v_.index() == 2; }
  bool is_non_tensor_stack() const noexcept { return v_.index() == 3; }
  /// A NonTensorData or a NonTensorStack (Python's is_non_tensor).
  bool is_non_tensor_or_stack() const noexcept { return v_.index() >= 2; }

  /// The tensor; TypeError when the entry is of another kind.
  const at::Tensor& tensor() const&;
  at::Tensor tensor() &&;
  /// The nested tensordict; TypeError otherwise.
  const TensorDictBase& tensordict() const&;
  /// The non-tensor value; TypeError otherwise.
  const NonTensorData& non_tensor() const&;
  NonTensorData& non_tensor() &;
  /// The per-element non-tensor values; TypeError otherwise.
  const NonTensorStack& non_tensor_stack() const&;
  NonTensorStack& non_tensor_stack() &;

  using Variant = std::variant<at::Tensor, TensorDictBase, NonTensorData, NonTensorStack>;
  const Variant& variant() const noexcept { return v_; }
  Variant& variant() noexcept { return v_; }

 private:
  Variant v_;
};

/// The top-level entries of a tensordict as a range, in insertion order
/// (TensorDictBase::keys_view(), items_view()). The in-memory storages
/// (TensorDict, memory-mapped, shared) are read in place: no copy of a key or a
/// value, so iterating costs about what iterating a std::vector does. Other
/// storages give a snapshot taken when the view is made (their keys are read
/// once; items_view() reads each value). The view keeps the storage alive;
/// like a container's iterators, it must not be used across a mutation of the
/// same level (set, remove, rename_key_, ...).
template <EntryProjection P>
class EntriesView {
 public:
  using Entry = std::pair<std::string, Value>;
  using reference = std::conditional_t<P == EntryProjection::Key, std::string_view,
                                       std::pair<std::string_view, const Value&>>;

  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = reference;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    iterator() = default;
    explicit iterator(const Entry* at) : at_(at) {}
    reference operator*() const {
      if constexpr (P == EntryProjection::Key)
        return at_->first;
      else
        return {at_->first, at_->second};
    }
    iterator& operator++() {
      ++at_;
      return *this;
    }
    iterator operator++(int) { return iterator(at_++); }
    bool operator==(const iterator& o) const noexcept { return at_ == o.at_; }
    bool operator!=(const iterator& o) const noexcept { return at_ != o.at_; }

   private:
    const Entry* at_ = nullptr;
  };

  /// `entries` is owned by `keep_alive` (a storage's own entries) or by
  /// `snapshot` (a copy made for the view).
  EntriesView(std::shared_ptr<const void> keep_alive, const std::vector<Entry>* entries)
      : keep_alive_(std::move(keep_alive)), entries_(entries) {}

  iterator begin() const { return iterator(entries_->data()); }
  iterator end() const { return iterator(entries_->data() + entries_->size()); }
  std::size_t size() const noexcept { return entries_->size(); }
  bool empty() const noexcept { return entries_->empty(); }

 private:
  std::shared_ptr<const void> keep_alive_;
  const std::vector<Entry>* entries_;
};

/// The list TensorDictBase::keys() returns: an immutable, shared list of
/// keys. Iterates as a `const std::vector<NestedKey>` does and converts to
/// one (`std::vector<NestedKey> ks = td.keys();`) for a list to modify.
class KeyList {
 public:
  using value_type = NestedKey;
  using const_iterator = std::vector<NestedKey>::const_iterator;
  using iterator = const_iterator;
  using size_type = std::size_t;

  KeyList() = default;
  explicit KeyList(std::shared_ptr<const std::vector<NestedKey>> keys) : keys_(std::move(keys)) {}
  explicit KeyList(std::vector<NestedKey> keys)
      : keys_(std::make_shared<const std::vector<NestedKey>>(std::move(keys))) {}

  const_iterator begin() const noexcept { return list().begin(); }
  const_iterator end() const noexcept { return list().end(); }
  std::size_t size() const noexcept { return keys_ ? keys_->size() : 0; }
  bool empty() const noexcept { return size() == 0; }
  const NestedKey& operator[](std::size_t i) const { return list()[i]; }
  const NestedKey& front() const { return list().front(); }
  const NestedKey& back() const { return list().back(); }
  /// True when `key` is in the list (a scan).
  bool contains(const NestedKey& key) const;
  std::vector<NestedKey> to_vector() const { return list(); }
  operator std::vector<NestedKey>() const { return list(); }  // NOLINT(implicit)

  friend bool operator==(const KeyList& a, const KeyList& b) { return a.list() == b.list(); }
  friend bool operator==(const KeyList& a, const std::vector<NestedKey>& b) {
    return a.list() == b;
  }

 private:
  const std::vector<NestedKey>& list() const noexcept {
    static const std::vector<NestedKey> none;
    return keys_ ? *keys_ : none;
  }
  std::shared_ptr<const std::vector<NestedKey>> keys_;
};

/// The list TensorDictBase::items() returns. Each element is a
/// `std::pair<const NestedKey&, const Value&>` (bind it as `const auto& [k, v]`
/// or `auto [k, v]`).
///
/// The top-level items of an in-memory level (TensorDict, memory-mapped,
/// shared memory) are a view, as Python's items() is: no key or value is
/// copied, a value is read when the iteration reaches it, and replacing a
/// value while iterating is seen by the iteration. Adding or removing a key of
/// that level while iterating makes the next step throw tensordict::Error
/// (Python's "changed size during iteration") instead of reading a moved
/// entry. Nested walks (include_nested, leaves_only, sort) and the other
/// storages give a snapshot taken by the call. Convert to
/// `std::vector<std::pair<NestedKey, Value>>` for a copy.
class ItemList {
 public:
  using Item = std::pair<const NestedKey&, const Value&>;
  using Entries = std::vector<std::pair<std::string, Value>>;
  using Owned = std::vector<std::pair<NestedKey, Value>>;

  // The keys and values are read through base pointers and strides, so that
  // a view (keys in one array, values inside the level's entries) and a
  // snapshot (pairs) iterate with the same few instructions per item.
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Item;
    using difference_type = std::ptrdiff_t;
    using pointer = const Item*;
    using reference = const Item&;
    iterator() = default;
    iterator(const ItemList* list, std::size_t i) : list_(list), i_(i) {}
    // The element is built in the iterator (range-for binds `auto&` to it);
    // copies start without one.
    iterator(const iterator& o) : list_(o.list_), i_(o.i_) {}
    iterator& operator=(const iterator& o) {
      if (this != &o) {
        list_ = o.list_;
        i_ = o.i_;
        item_.reset();
      }
      return *this;
    }
    const Item& operator*() const {
      item_.emplace(list_->at(i_));
      return *item_;
    }
    const Item* operator->() const { return &**this; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    iterator operator++(int) {
      iterator old(*this);
      ++i_;
      return old;
    }
    bool operator==(const iterator& o) const noexcept { return i_ == o.i_; }
    bool operator!=(const iterator& o) const noexcept { return i_ != o.i_; }

   private:
    const ItemList* list_ = nullptr;
    std::size_t i_ = 0;
    mutable std::optional<Item> item_;
  };
  using const_iterator = iterator;

  ItemList() = default;
  /// A view of a level's entries, both owned by `keep_alive`: `keys` is its
  /// key list (same order), `entries` its entries; `key_changes` counts the
  /// changes of the level's key index. The level keeps `keys` until that
  /// count moves, so the view reads neither once it has (one shared owner,
  /// not two: items() is a hot call).
  ItemList(std::shared_ptr<const void> keep_alive, const std::vector<NestedKey>* keys,
           const Entries* entries, const std::uint64_t* key_changes)
      : keep_alive_(std::move(keep_alive)),
        keys_(reinterpret_cast<const char*>(keys->data())),
        values_(entries->empty() ? nullptr
                                 : reinterpret_cast<const char*>(&entries->front().second)),
        key_stride_(sizeof(NestedKey)),
        value_stride_(sizeof(Entries::value_type)),
        entries_(entries),
        key_changes_(key_changes),
        key_changes_seen_(*key_changes) {}
  /// A snapshot.
  explicit ItemList(Owned items);

  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, size()); }
  std::size_t size() const noexcept { return entries_ ? entries_->size() : owned_size_; }
  bool empty() const noexcept { return size() == 0; }
  Item operator[](std::size_t i) const { return at(i); }
  Owned to_vector() const;
  operator Owned() const { return to_vector(); }  // NOLINT(implicit)

 private:
  Item at(std::size_t i) const {
    if (*key_changes_ != key_changes_seen_) throw_keys_changed();
    return {*reinterpret_cast<const NestedKey*>(keys_ + i * key_stride_),
            *reinterpret_cast<const Value*>(values_ + i * value_stride_)};
  }
  [[noreturn]] static void throw_keys_changed();
  static constexpr std::uint64_t kNoChanges = 0;

  std::shared_ptr<const void> keep_alive_;  // the level, or the snapshot
  const char* keys_ = nullptr;              // the first key
  const char* values_ = nullptr;            // the first value
  std::size_t key_stride_ = 0, value_stride_ = 0;
  const Entries* entries_ = nullptr;  // a view's entries (null for a snapshot)
  std::size_t owned_size_ = 0;        // a snapshot's size
  const std::uint64_t* key_changes_ = &kNoChanges;
  std::uint64_t key_changes_seen_ = 0;
};

// Arithmetic and comparison operators; see the named methods.
TensorDictBase operator+(const TensorDictBase& a, const TensorDictBase& b);
TensorDictBase operator+(const TensorDictBase& a, const at::Tensor& b);
TensorDictBase operator+(const TensorDictBase& a, const at::Scalar& b);
TensorDictBase operator-(const TensorDictBase& a, const TensorDictBase& b);
TensorDictBase operator-(const TensorDictBase& a, const at::Tensor& b);
TensorDictBase operator-(const TensorDictBase& a, const at::Scalar& b);
TensorDictBase operator*(const TensorDictBase& a, const TensorDictBase& b);
TensorDictBase operator*(const TensorDictBase& a, const at::Tensor& b);
TensorDictBase operator*(const TensorDictBase& a, const at::Scalar& b);
TensorDictBase operator/(const TensorDictBase& a, const TensorDictBase& b);
TensorDictBase operator/(const TensorDictBase& a, const at::Tensor& b);
TensorDictBase operator/(const TensorDictBase& a, const at::Scalar& b);
TensorDictBase operator-(const TensorDictBase& a);
TensorDictBase& operator+=(TensorDictBase& a, const TensorDictBase& b);
TensorDictBase& operator+=(TensorDictBase& a, const at::Scalar& b);
TensorDictBase& operator-=(TensorDictBase& a, const TensorDictBase& b);
TensorDictBase& operator-=(TensorDictBase& a, const at::Scalar& b);
TensorDictBase& operator*=(TensorDictBase& a, const TensorDictBase& b);
TensorDictBase& operator*=(TensorDictBase& a, const at::Scalar& b);
TensorDictBase& operator/=(TensorDictBase& a, const TensorDictBase& b);
TensorDictBase& operator/=(TensorDictBase& a, const at::Scalar& b);
/// Element-wise equality: a TensorDict of bools. Use (a == b).all() for a bool.
TensorDictBase operator==(const TensorDictBase& a, const TensorDictBase& b);
TensorDictBase operator==(const TensorDictBase& a, const at::Scalar& b);
TensorDictBase operator!=(const TensorDictBase& a, const TensorDictBase& b);
TensorDictBase operator!=(const TensorDictBase& a, const at::Scalar& b);

}  // namespace tensordict
