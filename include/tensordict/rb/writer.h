#pragma once
/// @file rb/writer.h
/// RoundRobinWriter: where a replay buffer writes next (TorchRL's
/// RoundRobinWriter), a cursor cycling over the rows of the storage.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tensordict::rb {

/// The writer's position, the fields of TorchRL's writer/metadata.json:
/// `cursor` is the row the next write goes to, `write_count` the rows
/// written since the buffer was created (or emptied).
struct WriterState {
  int64_t cursor = 0;
  int64_t write_count = 0;

  bool operator==(const WriterState&) const = default;
};

/// Writes go to consecutive rows, wrapping at the capacity: the oldest rows
/// are overwritten first. Not synchronised itself (the ReplayBuffer holding it
/// is).
class RoundRobinWriter {
 public:
  /// The rows (int64 [n]) an extend of n items writes, item k to row
  /// (cursor + k) % capacity, and advances the cursor and write_count by n as
  /// TorchRL does. When n > capacity the first n - capacity items land on rows
  /// that later items overwrite: only the last `capacity` items survive.
  /// ValueError when n < 0 or capacity <= 0 (nothing changes).
  at::Tensor next_rows(int64_t n, int64_t capacity);
  /// The row the next single add() goes to, advancing the cursor by one.
  int64_t next_row(int64_t capacity);

  const WriterState& state() const noexcept { return state_; }
  /// ValueError when the cursor is outside [0, capacity) or write_count < 0
  /// (nothing changes).
  void load_state(const WriterState& state, int64_t capacity);
  /// Back to cursor 0, nothing written.
  void reset() noexcept { state_ = WriterState{}; }

 private:
  WriterState state_;
};

}  // namespace tensordict::rb
