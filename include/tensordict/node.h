#pragma once
/// @file node.h
/// Node: the storage interface. A storage (in memory, memory-mapped, HDF5,
/// Redis, ...) implements this interface once; everything else (key paths,
/// batch-size rules, locking, indexing, shape ops, printing) is written once in
/// the generic core against it. docs/storage_backends.md is the guide for
/// writing one.
///
/// The contract, in short:
/// - The core validates before it calls: keys are single path components,
///   values already have the right batch size, dtype and device, shapes have
///   been checked against tensor_meta(), the lock has been checked. A Node
///   only stores.
/// - Metadata is cheap: keys(), kind() and tensor_meta() read no tensor data.
///   The core answers every shape, dtype and key question through them (shape
///   checks of set_, update, update_, set_batch_size, repr, keys, empty) and
///   reads data only when the user asked for data.
/// - One call per user operation: the core reads and writes rows of many
///   leaves with one read_leaves / write_leaves_ call (td[idx], index_put_,
///   update_at_, update_, to_tensordict, clone) and pre-allocates many leaves
///   with one create_leaves call (from_schema). That call is where a storage
///   sends one pipeline, one transaction or one file selection.
/// - Errors: throw tensordict::StorageError (ConnectionError, TimeoutError for
///   servers) naming what the storage knows; the core adds the full key path.
///
/// Thread safety: Node methods are not synchronized by the core. Concurrent
/// const calls must be safe (a storage whose library is not thread-safe, such
/// as HDF5 or a single server connection, serializes internally); a mutating
/// call never runs concurrently with another call on the same tensordict
/// (that is the user's side of the contract, as for a standard container).

#include <tensordict/row_selection.h>
#include <tensordict/tensor_dict_base.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict {

/// Shape, dtype and device of a tensor leaf, read without its data.
struct TensorMeta {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
};

/// One leaf of a batched read (Node::read_leaves).
struct LeafRead {
  /// The level holding the leaf: the node read_leaves is called on or a
  /// nested level of it (which may belong to another storage).
  const Node* node = nullptr;
  /// The leaf's full key from the tensordict the user operated on; its last
  /// part is the key in `node`.
  NestedKey path;
  /// Filled by read_leaves: the selected rows of the leaf.
  at::Tensor out;
  std::string_view key() const noexcept { return path.back(); }
};

/// One leaf of a batched write (Node::write_leaves_).
struct LeafWrite {
  /// The level holding the leaf (as LeafRead::node).
  Node* node = nullptr;
  /// Full key from the tensordict the user operated on; last part: the key.
  NestedKey path;
  /// Exactly the selected shape, with the leaf's dtype and device.
  at::Tensor value;
  std::string_view key() const noexcept { return path.back(); }
};

/// One leaf to pre-allocate (Node::create_leaves).
struct LeafCreate {
  /// The level that receives the leaf (this node or a nested level of it).
  Node* node = nullptr;
  NestedKey path;
  std::vector<int64_t> shape;
  at::TensorOptions options;
  std::string_view key() const noexcept { return path.back(); }
};

/// Where the entries of a memory-mapped or shared-memory tensordict live:
/// owned by the nodes that can stand for such files (Node::file_backing).
struct FileBacking {
  bool memmap = false;  // is_memmap()
  bool shared = false;  // is_shared()
  /// Directory this tensordict was memmapped to or loaded from ("" if none).
  std::string saved_path;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The class name printed by repr ("TensorDict", "PersistentTensorDict"...).
  virtual std::string type_name() const = 0;

  // -- shape and device -------------------------------------------------------
  virtual at::IntArrayRef batch_size() const = 0;
  /// Stores a new batch size; the core has checked every entry.
  virtual void set_batch_size(std::vector<int64_t> batch_size) = 0;
  virtual std::optional<at::Device> device() const = 0;
  virtual void set_device(std::optional<at::Device> device) = 0;

  // -- metadata (never reads tensor data) --------------------------------------
  /// The keys of this level in insertion order.
  virtual std::vector<std::string> keys() const = 0;
  virtual std::size_t size() const = 0;
  /// The kind of the entry at key, nullopt when missing.
  virtual std::optional<EntryKind> kind(std::string_view key) const = 0;
  /// Shape, dtype and device of the tensor at key; nullopt when missing or not
  /// a tensor.
  virtual std::optional<TensorMeta> tensor_meta(std::string_view key) const = 0;

  // -- reads ------------------------------------------------------------------
  /// The entry at key, nullopt when missing. For a tensor this reads the whole
  /// leaf; for a nested tensordict it is a handle to the live child (writes
  /// through it reach this storage).
  virtual std::optional<Value> find(std::string_view key) const = 0;
  /// The selected rows of the tensor at key. Storages that can read a part of
  /// a leaf override this so that only those rows are read. The default reads
  /// the whole leaf (find) and applies the selection.
  virtual at::Tensor read_at(std::string_view key, const RowSelection& rows) const;
  /// Reads the selected rows of many leaves, of this node and of nested levels
  /// below it, in one go: the core calls it once per user operation. Fills
  /// every `out`. The default calls read_at on each leaf's node. An override
  /// serves the leaves whose node it owns and hands the others to the
  /// default (Node::read_leaves).
  virtual void read_leaves(const RowSelection& rows, std::span<LeafRead> leaves) const;

  // -- writes -----------------------------------------------------------------
  /// Inserts or replaces the entry at key.
  virtual void write(std::string_view key, Value value) = 0;
  /// Copies `value` (the leaf's shape, dtype and device) into the existing
  /// tensor at key. The default copies into the tensor returned by find.
  virtual void write_(std::string_view key, const at::Tensor& value);
  /// Writes `value` (the selected shape, the leaf's dtype and device) into the
  /// selected rows of the tensor at key. Storages that can write a part of a
  /// leaf override this. The default writes into the tensor returned by find.
  virtual void write_at_(std::string_view key, const RowSelection& rows, const at::Tensor& value);
  /// Writes the selected rows of many leaves (of this node and nested levels)
  /// in one go: the core calls it once per user operation, after checking
  /// every leaf, so it is the operation's commit point (a pipeline or a
  /// transaction is sent here). The default calls write_ (All) or write_at_
  /// on each leaf's node, in order.
  ///
  /// Failure guarantee: all or nothing where the storage can (a transaction);
  /// otherwise it throws a StorageError whose message says which leaves were
  /// written and which were not. Leaves are never left half-written by the
  /// core's own checks, which all run before this call.
  virtual void write_leaves_(const RowSelection& rows, std::span<const LeafWrite> leaves);
  /// Adds a zero-filled tensor leaf of the given shape and options
  /// (pre-allocation). The default writes at::zeros.
  virtual void create_leaf(std::string_view key, at::IntArrayRef shape,
                           const at::TensorOptions& options);
  /// Pre-allocates many zero-filled leaves (of this node and nested levels
  /// already created) in one go; from_schema calls it once. A storage that
  /// keeps data outside the process allocates without sending zeros where it
  /// can (sparse files, fill values, SETRANGE at the end). The default calls
  /// create_leaf on each leaf's node.
  virtual void create_leaves(std::span<const LeafCreate> leaves);
  /// Adds an empty nested tensordict at key with the given batch size and
  /// device and returns a handle to it. The default stores an in-memory
  /// TensorDict; a storage that keeps data outside the process overrides it
  /// to create the level in its own storage.
  virtual TensorDictBase create_nested(std::string_view key, at::IntArrayRef batch_size,
                                       std::optional<at::Device> device);
  /// Removes the entry at key (present: the core checked).
  virtual void remove(std::string_view key) = 0;
  /// Makes every write durable where that means something (files, servers).
  virtual void flush() {}

  // -- fast paths of the storages that live in memory ---------------------------
  // A new storage leaves these alone: holds_values() false, peek() null,
  // is_memory_node() and is_lazy_stack() false. The core then goes through
  // kind / tensor_meta / read_leaves / write_leaves_.

  /// For storages that keep their entries as Values in memory: a pointer to
  /// the stored entry, nullptr when missing; valid until the next mutation.
  /// Only called when holds_values() is true.
  virtual const Value* peek(std::string_view key) const;
  /// True when peek() is implemented (set by the storage's constructor).
  bool holds_values() const noexcept { return holds_values_; }
  /// True for the in-memory storage (detail::MemoryNode), whose lookups the
  /// core inlines (it static_casts to MemoryNode: never set it elsewhere).
  bool is_memory_node() const noexcept { return is_memory_node_; }
  /// True for a lazy stack (detail::LazyStackNode): the core keeps its
  /// structure (member-wise operations) instead of reading stacked leaves
  /// (it static_casts to LazyStackNode: never set it elsewhere).
  bool is_lazy_stack() const noexcept { return is_lazy_stack_; }
  /// True for a storage whose leaves live outside the process (an HDF5 file,
  /// a Redis server): every read is a copy, so the core refuses the operations
  /// that promise views or rewrite the storage in place (view, permute,
  /// squeeze, unsqueeze, transpose, memmap_, share_memory_), as Python does.
  bool keeps_data_outside() const noexcept { return keeps_data_outside_; }

  // -- state managed by the core ----------------------------------------------
  bool locked() const noexcept { return locked_; }
  /// Locked tensordicts that hold this one (weak: a dead parent does not count).
  std::vector<std::weak_ptr<Node>>& lock_parents() noexcept { return lock_parents_; }
  void set_locked_flag(bool v) noexcept { locked_ = v; }

  // -- files behind the entries ---------------------------------------------
  /// The file state of a storage whose entries can be mapped files (the
  /// in-memory storage and the lazy stack: memory-mapped and shared-memory
  /// tensordicts, src/storage/memmap and src/storage/shared); nullptr for
  /// the others, the default. A storage that keeps its data elsewhere leaves
  /// these alone: the core writes meta.json files into a locked node's
  /// FileBacking::saved_path.
  virtual const FileBacking* file_backing() const noexcept { return nullptr; }
  virtual FileBacking* file_backing() noexcept { return nullptr; }

 protected:
  bool holds_values_ = false;
  bool is_memory_node_ = false;
  bool is_lazy_stack_ = false;
  bool keeps_data_outside_ = false;

 private:
  bool locked_ = false;
  std::vector<std::weak_ptr<Node>> lock_parents_;
};

}  // namespace tensordict
