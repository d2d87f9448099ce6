#pragma once
/// @file storage/memory.h
/// The in-memory storage: detail::MemoryNode, the Node behind every TensorDict
/// (and behind memory-mapped and shared-memory tensordicts, whose leaves are
/// mapped files). Its lookups are inlined into TensorDictBase::get() (see
/// tensor_dict.h), which is why the class is in a public header.

#include <tensordict/node.h>
#include <tensordict/tensor_dict_base.h>

#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensordict {

namespace detail {

/// Storage of an in-memory TensorDict: entries in insertion order plus a hash
/// index from key to position. The index depends only on the keys and their
/// order, so nodes with the same keys (a tensordict and the results of
/// indexing it) share one copy; a node that adds or removes a key first makes
/// its own (copy on write).
class MemoryNode final : public Node {
 public:
  using Entries = std::vector<std::pair<std::string, Value>>;

  MemoryNode(at::IntArrayRef batch_size, std::optional<at::Device> device)
      : batch_size_(batch_size.begin(), batch_size.end()), device_(device) {
    holds_values_ = true;
    is_memory_node_ = true;
  }
  /// A node holding `entries`, whose keys are exactly those of `same_keys`,
  /// in the same order (the caller guarantees it): the key index of
  /// `same_keys` is shared instead of being built key by key.
  MemoryNode(at::IntArrayRef batch_size, std::optional<at::Device> device, Entries entries,
             const MemoryNode& same_keys);
  /// Non-virtual peek, for the core's hot paths.
  const Value* lookup(std::string_view key) const {
    auto pos = position(key);
    return pos == npos ? nullptr : &entries_[pos].second;
  }
  std::string type_name() const override { return "TensorDict"; }
  at::IntArrayRef batch_size() const override { return batch_size_; }
  void set_batch_size(std::vector<int64_t> b) override { batch_size_.assign(b.begin(), b.end()); }
  std::optional<at::Device> device() const override { return device_; }
  void set_device(std::optional<at::Device> d) override { device_ = d; }
  std::vector<std::string> keys() const override;
  std::size_t size() const override { return entries_.size(); }
  std::optional<EntryKind> kind(std::string_view key) const override;
  std::optional<TensorMeta> tensor_meta(std::string_view key) const override;
  std::optional<Value> find(std::string_view key) const override;
  void write(std::string_view key, Value value) override;
  void write_(std::string_view key, const at::Tensor& value) override;
  void remove(std::string_view key) override;
  /// For a memory-mapped level: msync(MS_SYNC) of every leaf mapped shared
  /// from a file, and fsync of the files of its non-tensor entries, nested
  /// levels included. Nothing for leaves in RAM.
  void flush() override;
  /// Non-virtual (final class): detail::file_backing reads it inline.
  const FileBacking* file_backing() const noexcept override { return &file_backing_; }
  FileBacking* file_backing() noexcept override { return &file_backing_; }
  const Value* peek(std::string_view key) const override {
    auto pos = position(key);
    return pos == npos ? nullptr : &entries_[pos].second;
  }
  /// Mutable access for the core's in-place paths.
  Value* peek_mut(std::string_view key) {
    auto pos = position(key);
    return pos == npos ? nullptr : &entries_[pos].second;
  }
  const Entries& entries() const { return entries_; }
  /// The keys as a shared list, built once per key set (and shared with the
  /// nodes sharing this key index).
  std::shared_ptr<const std::vector<NestedKey>> key_list() const;
  /// The same list, kept by this node until key_changes() moves.
  const std::vector<NestedKey>* key_list_view() const;
  /// Counts the changes of this level's key index (a key added or removed,
  /// or the index copied or rebuilt), for views that must notice them
  /// (ItemList, which holds key_list_view() until this count moves).
  const std::uint64_t* key_changes() const noexcept { return &key_changes_; }
  /// True when both nodes share one key index: the same keys at the same
  /// positions (e.g. a tensordict and the results of indexing it), so their
  /// entries can be paired by position without looking keys up.
  bool shares_keys_with(const MemoryNode& other) const noexcept {
    return index_ != nullptr && index_ == other.index_;
  }
  void reserve(std::size_t n);

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  // The first 8 bytes and the length of a key, compared before anything
  // else: for keys of up to 8 bytes a tag match is a key match, and the scan
  // touches one small contiguous array instead of the entries.
  struct KeyTag {
    std::uint64_t head;
    std::size_t size;
  };
  static KeyTag tag_of(std::string_view key) noexcept {
    // Fixed-size loads only (a variable-length memcpy is a library call that
    // costs more than the lookup): 8 bytes, or two overlapping 4-byte loads
    // for keys of 4 to 7 bytes, or a short byte loop.
    const char* p = key.data();
    const std::size_t n = key.size();
    std::uint64_t head = 0;
    if (n >= 8) {
      head = load8(p);
    } else if (n >= 4) {
      std::uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + n - 4, 4);
      head = lo | (static_cast<std::uint64_t>(hi) << (8 * (n - 4)));
    } else {
      for (std::size_t i = 0; i < n; ++i)
        head |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    }
    return KeyTag{head, key.size()};
  }
  static std::uint64_t load8(const char* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  // The bytes of a key past the first 8 (which its tag holds), in 8-byte
  // words, the last one overlapping its predecessor. No call to memcmp: the
  // lookup is inlined into every get(), and a call there would make each
  // caller save its registers around it.
  static bool tail_equal(const char* stored, std::string_view key) noexcept {
    const std::size_t n = key.size();
    const char* k = key.data();
    if (n <= 8) return true;
    for (std::size_t i = 8; i + 8 < n; i += 8)
      if (load8(stored + i) != load8(k + i)) return false;
    return load8(stored + n - 8) == load8(k + n - 8);
  }
  // Fibonacci hashing: the slot is taken from the top bits of the product,
  // which depend on every bit of the tag (the low bits of a product depend
  // only on the low bits of its input, i.e. on the first characters).
  std::size_t slot_of(const KeyTag& t) const noexcept {
    const std::uint64_t h =
        (t.head ^ (static_cast<std::uint64_t>(t.size) << 56)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> slot_shift_);
  }
  // Open addressing over the tags (linear probing): one multiply instead of
  // hashing the string, and no scan of the level.
  std::size_t position(std::string_view key) const {
    if (slot_mask_ == 0) return npos;  // no entries, no table
    const KeyTag t = tag_of(key);
    for (std::size_t i = slot_of(t);; i = (i + 1) & slot_mask_) {
      const std::int32_t s = slots_[i];
      if (s < 0) return npos;
      const auto pos = static_cast<std::size_t>(s);
      const KeyTag& e = tags_[pos];
      if (e.head == t.head && e.size == t.size && tail_equal(entries_[pos].first.data(), key))
        return pos;
    }
  }
  // At most a quarter of the slots are used: a successful lookup then nearly
  // always hits on its first probe (a probe costs as much as the hash).
  static constexpr std::size_t kSlotsPerEntry = 4;
  // The key index, shared by the nodes whose keys are the same, in the same
  // order; never modified while shared.
  struct KeyIndex {
    std::vector<KeyTag> tags;         // tags[i] belongs to entries_[i]
    std::vector<std::int32_t> slots;  // power of two; -1 = empty
    std::size_t slot_mask = 0;        // slots.size() - 1; 0 while slots is empty
    unsigned slot_shift = 64;         // 64 - log2(slots.size())
    // keys() of the nodes sharing this index, built by the first call (under
    // key_list_mutex: readers may call it concurrently) and dropped when the
    // index is modified (own_index()). Not copied with the index.
    mutable std::shared_ptr<const std::vector<NestedKey>> key_list;
    mutable std::atomic<bool> has_key_list{false};
    mutable std::mutex key_list_mutex;

    KeyIndex() = default;
    KeyIndex(const KeyIndex& o)
        : tags(o.tags), slots(o.slots), slot_mask(o.slot_mask), slot_shift(o.slot_shift) {}
    KeyIndex& operator=(const KeyIndex&) = delete;
  };
  KeyIndex& own_index();        // index_, unshared (copied or created if needed)
  void cache_index() noexcept;  // copies index_'s fields below
  void rebuild_index();
  void insert_slot(std::size_t pos);  // the slots have room

  c10::SmallVector<int64_t, 5> batch_size_;
  std::optional<at::Device> device_;
  Entries entries_;
  std::uint64_t key_changes_ = 0;
  std::shared_ptr<KeyIndex> index_;  // null until the first key
  // index_'s arrays and fields, read by position() without going through
  // index_ (a lookup is inlined into every get()).
  const KeyTag* tags_ = nullptr;
  const std::int32_t* slots_ = nullptr;
  std::size_t slot_mask_ = 0;
  unsigned slot_shift_ = 64;
  FileBacking file_backing_;  // memmap / shared memory (src/storage/memmap)
};

}  // namespace detail

}  // namespace tensordict
