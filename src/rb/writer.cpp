#include <tensordict/errors.h>
#include <tensordict/rb/writer.h>

#include <ATen/ops/arange.h>

#include <string>

#include "rb/checkpoint_io.h"

namespace tensordict::rb {

namespace fs = std::filesystem;
using detail::field;
using detail::format_error;
using detail::integer_value;
using detail::ojson;

namespace detail {

void check_capacity(int64_t capacity, const char* where) {
  if (capacity <= 0)
    throw ValueError(std::string(where) + ": the capacity must be positive, got " +
                     std::to_string(capacity));
}

void check_writer_counts(const fs::path& file, const WriterState& state, int64_t capacity,
                         int64_t len) {
  if (state.cursor < 0 || state.cursor >= capacity)
    format_error(file, "\"cursor\" " + std::to_string(state.cursor) + " is not in [0, " +
                           std::to_string(capacity) + ")");
  if (state.write_count < 0 || std::min(state.write_count, capacity) != len)
    format_error(file, "\"write_count\" " + std::to_string(state.write_count) +
                           " does not fit the storage's \"len\" " + std::to_string(len) +
                           " (expected min(write_count, capacity) = len)");
}

}  // namespace detail

// Only the interface's calls keep what undo() needs: the buffer's own
// round-robin path never undoes, and next_row() stays two stores.
at::Tensor RoundRobinWriter::write_rows(const TensorDictBase& batch, int64_t capacity) {
  const WriterState before = state_;
  at::Tensor rows = next_rows(batch.batch_size().empty() ? 1 : batch.batch_size()[0], capacity);
  previous_ = before;
  return rows;
}

int64_t RoundRobinWriter::write_row(const TensorDictBase&, int64_t capacity) {
  const WriterState before = state_;
  const int64_t row = next_row(capacity);
  previous_ = before;
  return row;
}

at::Tensor RoundRobinWriter::next_rows(int64_t n, int64_t capacity) {
  detail::check_capacity(capacity, "RoundRobinWriter::next_rows");
  if (n < 0)
    throw ValueError("RoundRobinWriter::next_rows: cannot write " + std::to_string(n) + " items");
  at::Tensor rows = at::arange(state_.cursor, state_.cursor + n, at::kLong).remainder_(capacity);
  state_.cursor = (state_.cursor + n) % capacity;
  state_.write_count += n;
  return rows;
}

int64_t RoundRobinWriter::next_row(int64_t capacity) {
  detail::check_capacity(capacity, "RoundRobinWriter::next_row");
  const int64_t row = state_.cursor;
  state_.cursor = (row + 1) % capacity;
  state_.write_count += 1;
  return row;
}

void RoundRobinWriter::load_state(const WriterState& state, int64_t capacity) {
  detail::check_capacity(capacity, "RoundRobinWriter::load_state");
  if (state.cursor < 0 || state.cursor >= capacity || state.write_count < 0)
    throw ValueError("RoundRobinWriter::load_state: cursor " + std::to_string(state.cursor) +
                     " and write_count " + std::to_string(state.write_count) +
                     " do not fit a capacity of " + std::to_string(capacity) +
                     " (expected 0 <= cursor < capacity, write_count >= 0)");
  state_ = previous_ = state;
}

void RoundRobinWriter::dumps(const fs::path& dir) const {
  detail::write_json_file(dir / "metadata.json",
                          ojson{{"cursor", state_.cursor}, {"write_count", state_.write_count}});
}

std::function<void()> RoundRobinWriter::read_checkpoint(const fs::path& dir, int64_t capacity,
                                                        int64_t len) {
  const fs::path file = dir / "metadata.json";
  const ojson meta = detail::read_json_object(file);
  if (meta.contains("rank_key"))
    throw ValueError("replay buffer checkpoint: " + file.string() +
                     " is a TensorDictMaxValueWriter's, this buffer's writer is a "
                     "RoundRobinWriter (a checkpoint loads into a buffer with the same kind of "
                     "writer)");
  WriterState state;
  state.cursor = integer_value(field(meta, "cursor", file), "cursor", file);
  for (const char* name : {"generation_shape", "generation_dtype"})
    if (meta.contains(name))
      format_error(file, std::string("\"") + name +
                             "\": a writer tracking generations, which this library "
                             "does not have");
  // Older checkpoints have no write_count: as many rows as filled.
  state.write_count =
      meta.contains("write_count") ? integer_value(meta["write_count"], "write_count", file) : len;
  detail::check_writer_counts(file, state, capacity, len);
  return [this, state] { state_ = previous_ = state; };
}

}  // namespace tensordict::rb
