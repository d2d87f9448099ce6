// The example's replay buffer: the library's tensordict::rb::ReplayBuffer
// (round-robin writer, prioritized sampler) over storage pre-allocated from a
// typed transition schema in any storage (a memmap directory by default).
// What the example adds is a directory that outlives the process, without
// copying the rows into a checkpoint at every save (rb::ReplayBuffer::dumps
// would: the memmap storage is already on disk):
//   DIR/storage/      the transitions, a memmap tensordict Python can load too
//   DIR/priorities/   the sampler's state (rb::PrioritizedSampler::dumps,
//                     TorchRL's layout)
//   DIR/state.json    capacity, write position, fill level (written last)
// Buffer::open(DIR) resumes with the write position of the last flush().
// Rows written after that flush are treated as never written: the state file
// lags the data, never leads it, so a crash loses at most the unflushed rows.
//
// Bad input is a tensordict:: error naming what was expected: ValueError for
// arguments, FormatError for a directory or state file that is missing,
// corrupt or foreign (nothing is modified then).
#pragma once

#include <tensordict/errors.h>
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/rb/sampler.h>
#include <tensordict/schema.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/typed_tensor_dict.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace replay {

namespace td = tensordict;
namespace rb = tensordict::rb;
namespace fs = std::filesystem;

/// The state after a transition: the nested "next" level.
struct NextState : td::TypedTensorDict<NextState> {
  TENSORDICT_FIELDS(obs);
};

/// One transition (or a batch of them): obs uint8[84,84,3], action float[4],
/// reward float, done bool, and the nested next/obs (`t.next().obs()`).
struct Transition : td::TypedTensorDict<Transition> {
  TENSORDICT_FIELDS(obs, action, reward, done);
  TENSORDICT_NESTED_FIELDS((NextState, next));

  /// The element layout of a transition, without batch dims.
  static td::Schema schema() {
    return td::Schema{{"obs", {{84, 84, 3}, at::kByte}},
                      {"action", {{4}, at::kFloat}},
                      {"reward", {{}, at::kFloat}},
                      {"done", {{}, at::kBool}},
                      {{"next", "obs"}, {{84, 84, 3}, at::kByte}}};
  }
};

/// The prioritized sampler's settings (Schaul et al. 2016's alpha and beta).
inline std::shared_ptr<rb::PrioritizedSampler> make_prioritized_sampler(int64_t capacity) {
  return std::make_shared<rb::PrioritizedSampler>(capacity, 0.6, 0.4, 1e-6);
}

/// An rb::ReplayBuffer with a prioritized sampler, kept in a directory when
/// its storage is memmap.
class Buffer {
 public:
  /// A zero-filled buffer of `capacity` transitions in `storage` ("memory",
  /// "memmap", "shared", ...). A memmap buffer is created under `dir`
  /// (required for "memmap"), replacing a buffer already there.
  static Buffer create(int64_t capacity, const std::string& storage,
                       const std::optional<fs::path>& dir = std::nullopt) {
    if (capacity <= 0)
      throw td::ValueError("Buffer::create: the capacity must be positive, got " +
                           std::to_string(capacity));
    td::StorageOptions options;
    if (storage == "memmap") {
      if (!dir) throw td::ValueError("Buffer::create: a memmap buffer needs a directory");
      fs::create_directories(*dir);
      fs::remove(*dir / "state.json");  // a half-replaced buffer must not look resumable
      fs::remove_all(*dir / "priorities");
      options["prefix"] = (*dir / "storage").string();
    }
    Buffer b(Transition::from_schema(Transition::schema(), {capacity}, storage, options),
             storage == "memmap" ? dir : std::nullopt);
    b.flush();
    return b;
  }

  /// True when `dir` holds a memmap buffer that open() can resume.
  static bool exists(const fs::path& dir) { return fs::exists(dir / "state.json"); }

  /// Resumes the memmap buffer in `dir` at the write position of its last
  /// flush(), with the sampler's saved priorities (or, when none were saved,
  /// every stored row at the same priority).
  static Buffer open(const fs::path& dir) {
    const std::string file = (dir / "state.json").string();
    std::ifstream in(file);
    if (!in)
      throw td::FormatError("Buffer::open: no replay buffer to resume in " + dir.string() + " (" +
                            file + " is missing)");
    int64_t capacity = 0;
    rb::WriterState position;
    try {
      nlohmann::json state = nlohmann::json::parse(in);
      capacity = state.at("capacity").get<int64_t>();
      position.cursor = state.at("cursor").get<int64_t>();
      position.write_count = state.at("total_written").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw td::FormatError("Buffer::open: corrupt " + file +
                            " (expected integers capacity, cursor, total_written): " + e.what());
    }
    if (capacity <= 0 || position.cursor < 0 || position.cursor >= capacity ||
        position.write_count < 0)
      throw td::FormatError("Buffer::open: corrupt " + file + ": capacity " +
                            std::to_string(capacity) + ", cursor " +
                            std::to_string(position.cursor) + ", total_written " +
                            std::to_string(position.write_count));
    Buffer b(Transition::load_memmap((dir / "storage").string()), dir);
    if (b.capacity() != capacity)
      throw td::FormatError("Buffer::open: " + file + " says capacity " + std::to_string(capacity) +
                            " but " + (dir / "storage").string() + " holds " +
                            std::to_string(b.capacity()) + " rows");
    b.buffer_.load_writer_state(position);
    if (fs::exists(dir / "priorities"))
      b.priorities_->loads(dir / "priorities");
    else if (b.size() > 0)
      b.priorities_->on_write(at::arange(b.size(), at::kLong));
    return b;
  }

  /// Persists the priorities, then the write position (memmap buffers; a
  /// no-op otherwise).
  void flush() const {
    if (!dir_) return;
    // The sampler writes a directory: put a complete one in place.
    const fs::path saved = *dir_ / "priorities", fresh = *dir_ / "priorities.tmp";
    fs::remove_all(fresh);
    priorities_->dumps(fresh);
    fs::remove_all(saved);
    fs::rename(fresh, saved);
    const rb::WriterState position = buffer_.writer_state();
    nlohmann::json state{{"capacity", capacity()},
                         {"cursor", position.cursor},
                         {"size", size()},
                         {"total_written", position.write_count}};
    write_file_atomic(*dir_ / "state.json", state.dump(2));
  }

  rb::ReplayBuffer& buffer() { return buffer_; }
  rb::PrioritizedSampler& priorities() const { return *priorities_; }
  /// The stored transitions (all `capacity` rows; the first size() are filled).
  Transition storage() const { return Transition::from_tensordict(buffer_.storage()); }
  /// The transitions at `rows` (a 1-D long tensor): one index_select per leaf.
  Transition at(const at::Tensor& rows) const {
    return Transition::from_tensordict(buffer_.storage().index({rows}));
  }

  int64_t capacity() const { return buffer_.capacity(); }
  int64_t size() const { return buffer_.size(); }
  int64_t cursor() const { return buffer_.writer_state().cursor; }
  int64_t total_written() const { return buffer_.writer_state().write_count; }
  const std::optional<fs::path>& dir() const { return dir_; }

 private:
  // Writes `text` beside `file`, then renames it over the file: a crash
  // leaves the old state or the new one, never half of either.
  static void write_file_atomic(const fs::path& file, const std::string& text) {
    fs::path tmp = file;
    tmp += ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.flush();
      if (!out) throw td::StorageError("Buffer: cannot write " + tmp.string());
    }
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec) throw td::StorageError("Buffer: cannot replace " + file.string() + ": " + ec.message());
  }

  Buffer(Transition storage, std::optional<fs::path> dir)
      : priorities_(make_prioritized_sampler(storage.batch_size().at(0))),
        buffer_(std::move(storage), priorities_),
        dir_(std::move(dir)) {}

  std::shared_ptr<rb::PrioritizedSampler> priorities_;
  rb::ReplayBuffer buffer_;
  std::optional<fs::path> dir_;
};

}  // namespace replay
