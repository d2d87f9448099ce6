#pragma once
/// @file rb/writer.h
/// Writers: where a replay buffer writes next (TorchRL's Writer classes).
/// RoundRobinWriter cycles a cursor over the rows; TensorDictMaxValueWriter
/// keeps the rows that rank highest by one entry.

#include <tensordict/nested_key.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::rb {

/// The writer's position, the fields of TorchRL's writer/metadata.json:
/// `cursor` is the row the next write goes to, `write_count` the rows
/// written since the buffer was created (or emptied).
struct WriterState {
  int64_t cursor = 0;
  int64_t write_count = 0;

  bool operator==(const WriterState&) const = default;
};

/// The writer interface, as ReplayBuffer uses it. A writer decides which row
/// each written item goes to (or that it is not kept); the buffer copies the
/// items there. Writers are not synchronised themselves (the ReplayBuffer
/// holding one is).
class Writer {
 public:
  virtual ~Writer() = default;
  /// The class name, for messages ("RoundRobinWriter", ...).
  virtual std::string name() const = 0;

  /// The rows (int64 [n]) the n items of `batch` (batch size [n]) go to in a
  /// storage of `capacity` rows, -1 for an item not kept; when two items get
  /// the same row the later one is kept and the earlier one is -1. Advances
  /// the writer's state; undo() takes the last call back. Checks everything
  /// it reads of `batch` before changing anything.
  virtual at::Tensor write_rows(const TensorDictBase& batch, int64_t capacity) = 0;
  /// The row one item (batch size []) goes to, -1 when it is not kept.
  virtual int64_t write_row(const TensorDictBase& item, int64_t capacity) = 0;
  /// Takes back the last write_rows()/write_row() (the buffer calls it when
  /// copying the items failed, so that a failed write changes nothing).
  virtual void undo() = 0;

  virtual WriterState state() const = 0;
  /// Replaces the cursor and write count (see each writer for what else it
  /// needs). ValueError when they do not fit `capacity`; nothing changes.
  virtual void load_state(const WriterState& state, int64_t capacity) = 0;
  /// Nothing written, as when the buffer was created.
  virtual void reset() = 0;

  /// Writes the writer's files into the existing directory `dir`, the
  /// writer/ directory of a checkpoint (TorchRL's Writer.dumps).
  virtual void dumps(const std::filesystem::path& dir) const = 0;
  /// Reads and checks what dumps() (or TorchRL) wrote under `dir` for a
  /// storage of `capacity` rows of which `len` are filled, without changing
  /// the writer: FormatError naming the file and field for a missing or
  /// malformed file, ValueError for another writer's files. Returns what
  /// puts that state in place (it does not fail), so that a buffer can check
  /// every part of a checkpoint before it changes any.
  virtual std::function<void()> read_checkpoint(const std::filesystem::path& dir, int64_t capacity,
                                                int64_t len) = 0;
};

/// Writes go to consecutive rows, wrapping at the capacity: the oldest rows
/// are overwritten first.
class RoundRobinWriter : public Writer {
 public:
  std::string name() const override { return "RoundRobinWriter"; }
  /// next_rows(batch size, capacity).
  at::Tensor write_rows(const TensorDictBase& batch, int64_t capacity) override;
  int64_t write_row(const TensorDictBase& item, int64_t capacity) override;
  /// Takes back the last write_rows()/write_row() (not next_rows()/next_row()).
  void undo() override { state_ = previous_; }

  /// The rows (int64 [n]) an extend of n items writes, item k to row
  /// (cursor + k) % capacity, and advances the cursor and write_count by n as
  /// TorchRL does. When n > capacity the first n - capacity items land on rows
  /// that later items overwrite: only the last `capacity` items survive.
  /// ValueError when n < 0 or capacity <= 0 (nothing changes).
  at::Tensor next_rows(int64_t n, int64_t capacity);
  /// The row the next single add() goes to, advancing the cursor by one.
  int64_t next_row(int64_t capacity);

  WriterState state() const override { return state_; }
  /// state() without a virtual call (the buffer's hot path reads it).
  const WriterState& position() const noexcept { return state_; }
  /// ValueError when the cursor is outside [0, capacity) or write_count < 0
  /// (nothing changes).
  void load_state(const WriterState& state, int64_t capacity) override;
  /// Back to cursor 0, nothing written.
  void reset() override { state_ = WriterState{}; }

  /// metadata.json: {"cursor", "write_count"}, as TorchRL.
  void dumps(const std::filesystem::path& dir) const override;
  /// Takes cursor and write_count (len when a file has no write_count);
  /// FormatError for a writer tracking generations; ValueError for the
  /// files of a TensorDictMaxValueWriter.
  std::function<void()> read_checkpoint(const std::filesystem::path& dir, int64_t capacity,
                                        int64_t len) override;

 private:
  WriterState state_;
  WriterState previous_;
};

/// How a rank entry of more than one element per item becomes one number
/// (TorchRL's reduction argument); kNone refuses such entries.
enum class RankReduction { kSum, kMax, kMin, kMean, kMedian, kNone };

/// Keeps the `capacity` items that rank highest by the entry `rank_key`
/// (TorchRL's TensorDictMaxValueWriter): while the storage is not full items
/// go to consecutive rows; then an item replaces the lowest-ranked row when
/// it ranks strictly higher, and is dropped otherwise. Ties in rank are
/// broken by row, as TorchRL's heap of (rank, row) pairs does, so the same
/// stream of items leaves the same rows as TorchRL. A rank entry of more than
/// one element per item is reduced over all of them (sum by default).
class TensorDictMaxValueWriter : public Writer {
 public:
  /// TorchRL's defaults: rank by ("next", "reward"), reduced by sum.
  explicit TensorDictMaxValueWriter(NestedKey rank_key = NestedKey{"next", "reward"},
                                    RankReduction reduction = RankReduction::kSum);
  /// `reduction` by TorchRL's name: "sum", "max", "min", "mean", "median"
  /// (or "none"); ValueError for another name.
  TensorDictMaxValueWriter(NestedKey rank_key, const std::string& reduction);

  std::string name() const override { return "TensorDictMaxValueWriter"; }
  /// KeyError naming rank_key when `batch` lacks it; ShapeError for a rank
  /// entry of several elements per item with RankReduction::kNone; TypeError
  /// for a complex or non-numeric one. Nothing changes on error.
  at::Tensor write_rows(const TensorDictBase& batch, int64_t capacity) override;
  int64_t write_row(const TensorDictBase& item, int64_t capacity) override;
  void undo() override;

  WriterState state() const override { return {cursor_, write_count_}; }
  /// Only onto an empty writer with state {0, 0} (the kept ranks are not in
  /// a WriterState: a checkpoint carries them); UnsupportedError otherwise.
  void load_state(const WriterState& state, int64_t capacity) override;
  void reset() override;

  /// metadata.json {"cursor", "write_count", "rank_key", "dtype", "shape"}
  /// and current_top_values.memmap (float64 [k, 2]: rank, row), as TorchRL.
  void dumps(const std::filesystem::path& dir) const override;
  /// ValueError when the files' rank_key is not this writer's or they are a
  /// RoundRobinWriter's; FormatError when the (rank, row) pairs are not one
  /// per filled row.
  std::function<void()> read_checkpoint(const std::filesystem::path& dir, int64_t capacity,
                                        int64_t len) override;

  const NestedKey& rank_key() const noexcept { return rank_key_; }
  RankReduction reduction() const noexcept { return reduction_; }
  /// The kept (rank, row) pairs, lowest rank first.
  std::vector<std::pair<double, int64_t>> top_values() const;

 private:
  // The rank of each of the n items of `data` (lead 1) or of the one item
  // (lead 0), checked.
  std::vector<double> ranks(const TensorDictBase& data, int64_t lead) const;
  int64_t place(double rank, int64_t capacity);

  NestedKey rank_key_;
  RankReduction reduction_;
  int64_t cursor_ = 0;
  int64_t write_count_ = 0;
  // A min-heap on (rank, row) (std::greater), as TorchRL's heapq list.
  std::vector<std::pair<double, int64_t>> heap_;
  // What the last write changed, for undo().
  std::vector<std::pair<double, int64_t>> removed_, added_;
  int64_t previous_cursor_ = 0, previous_write_count_ = 0;
};

}  // namespace tensordict::rb
