#include <tensordict/errors.h>
#include <tensordict/rb/writer.h>

#include <ATen/ops/arange.h>

#include <string>

namespace tensordict::rb {

namespace {

void check_capacity(int64_t capacity, const char* where) {
  if (capacity <= 0)
    throw ValueError(std::string(where) + ": the capacity must be positive, got " +
                     std::to_string(capacity));
}

}  // namespace

at::Tensor RoundRobinWriter::next_rows(int64_t n, int64_t capacity) {
  check_capacity(capacity, "RoundRobinWriter::next_rows");
  if (n < 0)
    throw ValueError("RoundRobinWriter::next_rows: cannot write " + std::to_string(n) + " items");
  at::Tensor rows = at::arange(state_.cursor, state_.cursor + n, at::kLong).remainder_(capacity);
  state_.cursor = (state_.cursor + n) % capacity;
  state_.write_count += n;
  return rows;
}

int64_t RoundRobinWriter::next_row(int64_t capacity) {
  check_capacity(capacity, "RoundRobinWriter::next_row");
  const int64_t row = state_.cursor;
  state_.cursor = (row + 1) % capacity;
  state_.write_count += 1;
  return row;
}

void RoundRobinWriter::load_state(const WriterState& state, int64_t capacity) {
  check_capacity(capacity, "RoundRobinWriter::load_state");
  if (state.cursor < 0 || state.cursor >= capacity || state.write_count < 0)
    throw ValueError("RoundRobinWriter::load_state: cursor " + std::to_string(state.cursor) +
                     " and write_count " + std::to_string(state.write_count) +
                     " do not fit a capacity of " + std::to_string(capacity) +
                     " (expected 0 <= cursor < capacity, write_count >= 0)");
  state_ = state;
}

}  // namespace tensordict::rb
