#pragma once
/// @file node.h
/// Node: the storage interface. A backend (in memory, memory-mapped, HDF5,
/// Redis, ...) implements this small interface once; everything else (key
/// paths, batch-size rules, locking, indexing, shape ops, printing) is written
/// once in the generic core against it.
///
/// The core validates before it calls: keys are single path components, values
/// already have the right batch size and device, the lock has been checked.
/// A Node only stores.
///
/// Thread safety: Node methods are not synchronized. Concurrent const calls are
/// safe; a mutating call must not run concurrently with any other call on the
/// same node.

#include <tensordict/tensor_dict_base.h>

#include <memory>
#include <optional>
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

  // -- keys -------------------------------------------------------------------
  /// The keys of this level in insertion order.
  virtual std::vector<std::string> keys() const = 0;
  virtual std::size_t size() const = 0;
  /// The kind of the entry at key, nullopt when missing. The default calls find.
  virtual std::optional<EntryKind> kind(std::string_view key) const;

  // -- reads ------------------------------------------------------------------
  /// Shape, dtype and device of the tensor at key without reading its data;
  /// nullopt when missing or not a tensor. The default calls find.
  virtual std::optional<TensorMeta> tensor_meta(std::string_view key) const;
  /// The entry at key, nullopt when missing. For a nested tensordict this is a
  /// handle to the live child (writes through it reach this storage).
  virtual std::optional<Value> find(std::string_view key) const = 0;
  /// The rows `index` of the tensor at key. Storages that can read a part of a
  /// leaf override this so that only those rows are read. The default reads the
  /// whole leaf and indexes it.
  virtual at::Tensor read_at(std::string_view key, IndexList index) const;

  // -- writes -----------------------------------------------------------------
  /// Inserts or replaces the entry at key.
  virtual void write(std::string_view key, Value value) = 0;
  /// Copies `value` (same shape, any dtype) into the existing tensor at key.
  /// The default copies into the tensor returned by find.
  virtual void write_(std::string_view key, const at::Tensor& value);
  /// Writes `value` into the rows `index` of the tensor at key. Storages that
  /// can write a part of a leaf override this. The default uses index_put_ on
  /// the tensor returned by find.
  virtual void write_at_(std::string_view key, IndexList index,
                         const at::Tensor& value);
  /// Adds a zero-filled tensor leaf of the given shape and options
  /// (pre-allocation). The default writes at::zeros.
  virtual void create_leaf(std::string_view key, at::IntArrayRef shape,
                           const at::TensorOptions& options);
  /// Adds an empty nested tensordict at key with the given batch size and
  /// device and returns a handle to it. The default stores an in-memory
  /// TensorDict.
  virtual TensorDictBase create_nested(std::string_view key,
                                       at::IntArrayRef batch_size,
                                       std::optional<at::Device> device);
  /// Removes the entry at key (present: the core checked).
  virtual void remove(std::string_view key) = 0;
  /// Makes every write durable where that means something (files, servers).
  virtual void flush() {}

  // -- fast path --------------------------------------------------------------
  /// For storages that keep their entries as Values in memory: a pointer to
  /// the stored entry, nullptr when missing; valid until the next mutation.
  /// Only called when holds_values() is true.
  virtual const Value* peek(std::string_view key) const;
  /// True when peek() is implemented (set by the storage's constructor).
  bool holds_values() const noexcept { return holds_values_; }
  /// True for the in-memory storage (detail::MemoryNode), whose lookups the
  /// core inlines.
  bool is_memory_node() const noexcept { return is_memory_node_; }
  /// True for a lazy stack (detail::LazyStackNode): the core keeps its
  /// structure (member-wise operations) instead of reading stacked leaves.
  bool is_lazy_stack() const noexcept { return is_lazy_stack_; }

  // -- state managed by the core ----------------------------------------------
  bool locked() const noexcept { return locked_; }
  /// Locked tensordicts that hold this one (weak: a dead parent does not count).
  std::vector<std::weak_ptr<Node>>& lock_parents() noexcept {
    return lock_parents_;
  }
  bool shared_flag() const noexcept { return is_shared_; }
  bool memmap_flag() const noexcept { return is_memmap_; }
  void set_locked_flag(bool v) noexcept { locked_ = v; }
  void set_shared_flag(bool v) noexcept { is_shared_ = v; }
  void set_memmap_flag(bool v) noexcept { is_memmap_ = v; }
  /// Directory this tensordict was memmapped to or loaded from ("" if none).
  const std::string& saved_path() const noexcept { return saved_path_; }
  void set_saved_path(std::string p) { saved_path_ = std::move(p); }

 protected:
  bool holds_values_ = false;
  bool is_memory_node_ = false;
  bool is_lazy_stack_ = false;

 private:
  bool locked_ = false;
  bool is_shared_ = false;
  bool is_memmap_ = false;
  std::string saved_path_;
  std::vector<std::weak_ptr<Node>> lock_parents_;
};

}  // namespace tensordict
