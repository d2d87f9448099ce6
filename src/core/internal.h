#pragma once
// Helpers shared by the core's translation units. Not installed.

#include <tensordict/detail/format.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/node.h>
#include <tensordict/tensor_dict.h>

#include <c10/util/SmallVector.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tensordict::detail {

/// The key made of the first `n` parts of `key`.
inline NestedKey prefix(const NestedKey& key, std::size_t n) {
  NestedKey out;
  for (std::size_t i = 0; i < n && i < key.size(); ++i) out = out.child(key[i]);
  return out;
}

/// Throws UnsupportedError when td's storage keeps its data outside the
/// process (Node::keeps_data_outside): "<op>: a PersistentTensorDict keeps its
/// data outside the process, <why>; call to_tensordict() first...".
void refuse_outside_storage(const TensorDictBase& td, std::string_view op, std::string_view why);

/// "key ('a', 'b') not found in TensorDict: ('a',) has keys ['x', 'y']"
[[noreturn]] void throw_missing(const NestedKey& key, std::size_t level, const Node& node);

/// Inside a catch of StorageError: rethrows it as the same type with
/// `operation` and the full key `path` prepended and key_path() set, the
/// original nested. An error that already names its path is rethrown as is.
[[noreturn]] void rethrow_storage_error(const NestedKey& path, const char* operation);

/// The node holding the last part of `key`, walking from `root` (the one
/// key-path walk of the core). With `create`, missing intermediate levels are
/// created (LockedError naming `operation` when locked). KeyError for a
/// missing level, TypeError for a level that is not a tensordict.
/// With `storage`, also gives the topmost level of the path (the root, the
/// levels walked, the parent) whose storage does not hold values: the node a
/// batched write goes to; null when every level holds values.
std::shared_ptr<Node> walk_parent(const std::shared_ptr<Node>& root, const NestedKey& key,
                                  bool create, const char* operation = "set",
                                  std::shared_ptr<Node>* storage = nullptr);

/// "Cannot modify locked TensorDict ..."
[[noreturn]] void throw_locked(const NestedKey& key, const char* operation);

/// Checks that `value` starts with `batch` (ShapeError naming the key).
void check_leaf_batch(const at::Tensor& value, at::IntArrayRef batch, const NestedKey& key);
/// The same check of a shape (a storage's metadata).
void check_leaf_batch(at::IntArrayRef sizes, at::IntArrayRef batch, const NestedKey& key);

/// ValueError naming `key` and `op` when `leaf` cannot be written in place
/// because several of its elements share memory (an expand()ed tensor, a
/// stride of 0), where LibTorch's copy_ would throw its own error, perhaps
/// after other leaves were written. Metadata only.
void check_writable_leaf(const at::Tensor& leaf, const NestedKey& key, const char* op);

/// Makes `value` fit into a node with batch size `batch` and device `device`
/// (moves tensors, resizes nested tensordicts, broadcasts non-tensors).
Value validate_value(Value value, at::IntArrayRef batch, std::optional<at::Device> device,
                     const NestedKey& key);

/// A new in-memory TensorDict handle with the given batch size and device.
inline TensorDict make_tensordict(at::IntArrayRef batch, std::optional<at::Device> device) {
  return TensorDict(std::make_shared<MemoryNode>(batch, device));
}

/// The nested tensordicts directly under `node` (handles to the live children).
std::vector<TensorDictBase> children(const Node& node);

}  // namespace tensordict::detail

namespace tensordict::detail {

/// An index translated once per call (not once per leaf): Ellipsis expanded
/// over the batch dims, bool masks turned into long indices, and the common
/// "one long index on the first dim" case recognised for index_select.
struct TranslatedIndex {
  /// One step of a basic index, with bounds already resolved.
  struct BasicOp {
    enum Kind : std::uint8_t { Select, Slice, Unsqueeze, Empty } kind;
    int64_t start = 0, stop = 0, step = 1;  // Select uses start
  };
  // Inline capacities: an index of a few items over a few batch dims
  // allocates nothing.
  c10::SmallVector<at::indexing::TensorIndex, 4> items;  // applies to any leaf
  at::Tensor first_dim_long;           // defined: the index is exactly this on dim 0
  c10::SmallVector<int64_t, 5> batch;  // the indexed batch size
  bool basic = true;                   // only ints, slices, None, Ellipsis, bools
  c10::SmallVector<BasicOp, 4> ops;    // when basic: select/slice/unsqueeze per leaf
  // When basic with ints and slices only: one range per leading dim (the
  // RowSelection::Box storages receive).
  bool box = false;
  c10::SmallVector<RowRange, 4> ranges;
  // first_dim_long bounds-checked and wrapped to [0, n) (RowSelection::Rows),
  // made on first use: in-memory reads let index_select check instead.
  mutable at::Tensor rows_in_range;
  mutable std::int8_t rows_sorted = -1, rows_unique = -1;  // -1: not computed
};

/// `rows` (a long index of batch dim 0 of size n) checked and wrapped into
/// [0, n): IndexError naming the first row out of range.
at::Tensor rows_in_range(const at::Tensor& rows, int64_t n);

/// With check_bounds (writes), a long index is bounds-checked up front.
TranslatedIndex translate_index(IndexList index, at::IntArrayRef batch, bool check_bounds);

/// leaf[index] using the fast paths of the translation.
at::Tensor apply_index(const at::Tensor& leaf, const TranslatedIndex& index);

/// leaf[index] = value (value already broadcastable, cast to leaf's dtype).
void put_index(at::Tensor& leaf, const TranslatedIndex& index, const at::Tensor& value);

/// Leaf reads from storages that do not hold values, gathered over one
/// operation's walk and sent as one Node::read_leaves call per storage (the
/// topmost node of that storage met by the walk). Each result lands in an
/// in-memory node of the operation's output, under the leaf's key.
class BatchedReads {
 public:
  /// Queues the leaf `path` (last part: its key in `node`), to be stored in
  /// `dest` (which already holds a placeholder at that key).
  void add(const Node* root, std::shared_ptr<const Node> node, NestedKey path, MemoryNode* dest);
  bool empty() const noexcept { return groups_.empty(); }
  /// One read_leaves per storage; results stored (cloned with
  /// clone_results). StorageError gets the path of the leaves, a LibTorch
  /// error becomes an IndexError naming them.
  void run(const RowSelection& rows, bool clone_results = false);

 private:
  struct Group {
    const Node* root = nullptr;
    std::vector<LeafRead> leaves;
    std::vector<MemoryNode*> dests;
  };
  std::vector<Group> groups_;
  std::vector<std::shared_ptr<const Node>> keep_alive_;
};

/// Leaf writes into storages that do not hold values, gathered after every
/// check of one operation and sent as one Node::write_leaves_ call per storage.
class BatchedWrites {
 public:
  void add(Node* root, const std::shared_ptr<Node>& node, NestedKey path, at::Tensor value);
  bool empty() const noexcept { return groups_.empty(); }
  void run(const RowSelection& rows);

 private:
  struct Group {
    Node* root = nullptr;
    std::vector<LeafWrite> leaves;
  };
  std::vector<Group> groups_;
  std::vector<std::shared_ptr<const Node>> keep_alive_;
};

/// Copies the lock state of `src` onto `out` (shape ops propagate the lock).
inline void propagate_lock(const TensorDictBase& src, TensorDictBase& out) {
  if (src.is_locked() && !out.is_locked()) out.lock_();
}

/// Normalizes a batch dim in [-n, n) (n = number of dims), IndexError otherwise.
int64_t wrap_dim(int64_t dim, int64_t n, const char* op);

}  // namespace tensordict::detail

namespace tensordict::detail {

/// fn(leaf, key) -> new leaf; key is the full nested key.
using MapFn = std::function<at::Tensor(const at::Tensor&, const NestedKey&)>;

/// What map_leaves does with a NonTensorStack entry.
enum class StackPolicy : std::uint8_t {
  /// fn moves batch elements (shape ops): fn is applied to the stack's
  /// positions tensor and the values follow.
  MoveElements,
  /// fn computes on values (apply, arithmetic, casts): the stack is kept;
  /// if the batch changes (reductions), a stack of equal values becomes a
  /// NonTensorData of the new batch and any other is a ShapeError.
  Keep,
  /// Stacks are left out of the result (the caller adds them back).
  Drop,
};

/// A new TensorDict whose batch size is `new_batch` (for nested tensordicts:
/// new_batch + their own dims beyond the root's `root_dims`), with fn applied
/// to every tensor leaf. Leaves for which fn returns an undefined tensor are
/// dropped; non-tensors are kept with the new batch size. Leaf errors from
/// LibTorch are rethrown as `ErrorT` naming the key.
/// `on_lazy`, when given, maps a nested lazy stack as a whole (so that the
/// operation stays member-wise); otherwise lazy stacks are read stacked.
using LazyChildFn = std::function<TensorDictBase(const TensorDictBase&)>;
TensorDict map_leaves(const TensorDictBase& src, std::size_t root_dims, at::IntArrayRef new_batch,
                      const MapFn& fn, const char* op,
                      std::optional<std::optional<at::Device>> device = std::nullopt,
                      const LazyChildFn* on_lazy = nullptr, StackPolicy stacks = StackPolicy::Keep);

/// Calls fn(leaf, key) on every tensor leaf, in place semantics up to fn.
void for_each_leaf(const TensorDictBase& src,
                   const std::function<void(const at::Tensor&, const NestedKey&)>& fn);

}  // namespace tensordict::detail

namespace tensordict::detail {

/// The checks of target.index_put_(index, value) (allow_create) or of
/// target.update_at_(value, index) (!allow_create), without writing: the same
/// errors, nothing changed. Lazy stacks check each member.
void check_index_put(const TensorDictBase& target, IndexList index, const TensorDictBase& value,
                     bool allow_create);

}  // namespace tensordict::detail

namespace tensordict::detail {

// ---- non-tensor stacks (non_tensor_stack.cpp) ----------------------------------
// A NonTensorStack is indexed, reshaped and stacked through a tensor of the
// flat positions of its values: the positions go through the same LibTorch
// operation as a tensor leaf would, and the values are gathered after it.

/// arange(numel).view(batch_size): the flat position of every element.
at::Tensor stack_positions(const NonTensorStack& s);

/// The values of `pool` at `positions` (a long tensor of any shape): a
/// NonTensorData of batch [] for a 0-dim tensor, a NonTensorStack otherwise.
Value gather_non_tensor(const std::vector<nlohmann::json>& pool, const at::Tensor& positions,
                        std::optional<at::Device> device);

/// `s` indexed with an index translated against the leading dims of its batch.
Value index_non_tensor_stack(const NonTensorStack& s, const TranslatedIndex& t);

/// s[t] = value in place: a NonTensorData is written into every selected
/// element, a NonTensorStack is broadcast to the indexed shape (ShapeError
/// naming `key` otherwise).
void put_non_tensor_stack(NonTensorStack& s, const TranslatedIndex& t, const Value& value,
                          const NestedKey& key);

/// dest[t] = value for a non-tensor entry `dest` (NonTensorData or
/// NonTensorStack): nullopt when nothing changes (the same value is already
/// there), otherwise the new entry. A NonTensorData written with a different
/// value becomes a NonTensorStack.
std::optional<Value> put_non_tensor(const Value& dest, const TranslatedIndex& t, const Value& value,
                                    const NestedKey& key);

/// fn applied to the positions of `s` (a shape op), values gathered after it.
/// LibTorch errors become ShapeError naming `key`.
Value map_non_tensor_stack(const NonTensorStack& s,
                           const std::function<at::Tensor(const at::Tensor&)>& fn, const char* op,
                           const NestedKey& key);

/// Stacks non-tensor entries (NonTensorData or NonTensorStack, same batch
/// size) along a new dim `dim`. With collapse_equal, NonTensorData entries
/// that hold equal values give one NonTensorData of the stacked batch size;
/// anything else gives a NonTensorStack. ShapeError naming `key` when the
/// batch sizes differ.
Value stack_non_tensors(const std::vector<const Value*>& items, int64_t dim, const char* op,
                        const NestedKey& key, bool collapse_equal = true);

/// Concatenates non-tensor entries along `dim`; equal NonTensorData values
/// give one NonTensorData of the concatenated batch size.
Value cat_non_tensors(const std::vector<const Value*>& items, int64_t dim, const NestedKey& key);

/// `v` split along `dim` of its batch (v is a NonTensorStack; a NonTensorData
/// is repeated with that dim removed).
std::vector<Value> unbind_non_tensor(const Value& v, int64_t dim, const NestedKey& key);

/// The file state of `node` (Node::file_backing), nullptr for a storage
/// without files. The in-memory storage's is read inline, without a virtual
/// call: td[i] asks on every call.
inline const FileBacking* file_backing(const Node& node) noexcept {
  if (node.is_memory_node()) return static_cast<const MemoryNode&>(node).MemoryNode::file_backing();
  return node.file_backing();
}

/// The file state of `node` to change (a node of the in-memory storage or a
/// lazy stack); UnsupportedError for a storage that cannot have files.
FileBacking& mutable_file_backing(Node& node);

/// The directory `node` was memmapped to or loaded from, "" if none.
const std::string& saved_path_of(const Node& node) noexcept;

inline bool is_memmap_node(const Node& node) noexcept {
  const FileBacking* f = file_backing(node);
  return f != nullptr && f->memmap;
}
inline bool is_shared_node(const Node& node) noexcept {
  const FileBacking* f = file_backing(node);
  return f != nullptr && f->shared;
}
/// is_memmap() or is_shared(): the leaves are mapped files.
inline bool is_mapped(const Node& node) noexcept {
  const FileBacking* f = file_backing(node);
  return f != nullptr && (f->memmap || f->shared);
}

/// Gives `out`, a view of the leaves of a memory-mapped or shared tensordict
/// whose file state is `src`, the same memmap / shared status.
inline void copy_mapped_status(const FileBacking& src, Node& out) {
  FileBacking& f = mutable_file_backing(out);
  f.memmap = src.memmap;
  f.shared = src.shared;
}

/// True when `node` is (a level of) a memory-mapped or shared tensordict
/// whose files back its entries: flagged memmap/shared, or a locked nested
/// level that was saved (nested levels carry the lock and the path, not the
/// flags). Such a tensordict cannot change the kind of an entry.
inline bool backs_files(const Node& node) noexcept {
  const FileBacking* f = file_backing(node);
  return f != nullptr && (f->memmap || f->shared || (node.locked() && !f->saved_path.empty()));
}

/// A memory-mapped or shared tensordict keeps its non-tensor entries in
/// `<dir>/<key>/meta.json`: after an in-place write of the non-tensor entry
/// `key` of `parent`, rewrites that file (nothing unless backs_files(parent)).
/// Defined in src/memmap/memmap_dir.cpp.
void persist_non_tensor(const Node& parent, std::string_view key, const Value& value);

/// fsync() of the files persist_non_tensor writes for the entry `key` of
/// `parent` and of their directories (nothing unless backs_files(parent));
/// StorageError naming a file that cannot be synced. Node::flush calls it.
void sync_non_tensor_files(const Node& parent, std::string_view key);

/// persist_non_tensor for a write into part of the entry (index_put_):
/// under an exclusive lock (flock) on the entry's directory, `apply` runs on
/// the value in the file, which another process may have changed since this
/// one read it, and its result is written. Returns that result (nullopt:
/// nothing changed). Without files behind `parent`: apply(in_memory).
std::optional<Value> persist_non_tensor_rows(
    const Node& parent, std::string_view key, const Value& in_memory,
    const std::function<std::optional<Value>(const Value&)>& apply);

/// Python's repr of a JSON value: 'a', 1, 1.5, True, None, [1, 2], {'k': 'v'}.
std::string python_repr(const nlohmann::json& value);

/// Python's NonTensorStack repr of the nested list `values` (cut after 50
/// characters, as Python does).
std::string non_tensor_stack_repr(const nlohmann::json& values, at::IntArrayRef batch,
                                  std::optional<at::Device> device);

}  // namespace tensordict::detail
