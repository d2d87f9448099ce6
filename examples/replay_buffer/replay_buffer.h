// A LibTorch RL replay buffer built on tensordict: a typed transition schema,
// storage pre-allocated by from_schema in any storage (a memmap directory by
// default), a circular writer of single transitions and of batches, uniform
// sampling, and a prioritized sampler over a sum tree.
//
// A memmap buffer lives in a directory that outlives the process:
//   DIR/storage/      the transitions, a memmap tensordict Python can load too
//   DIR/state.json    capacity, write position, fill level (written by flush())
//   DIR/priorities/   the prioritized sampler's priorities (its save())
// ReplayBuffer::open(DIR) resumes with the write position of the last flush().
// Rows written after that flush are treated as never written: the state file
// lags the data, never leads it, so a crash loses at most the unflushed rows.
//
// Bad input is a tensordict:: error naming what was expected: ValueError for
// arguments, IndexError for rows out of range, FormatError for a directory or
// state file that is missing, corrupt or foreign (nothing is modified then).
#pragma once

#include <tensordict/errors.h>
#include <tensordict/schema.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/typed_tensor_dict.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace replay {

namespace td = tensordict;
namespace fs = std::filesystem;
using at::indexing::Slice;

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

/// A fixed-capacity circular buffer of transitions in any storage.
class ReplayBuffer {
 public:
  /// A zero-filled buffer of `capacity` transitions in `storage` ("memory",
  /// "memmap", "shared", ...). A memmap buffer is created under `dir`
  /// (required for "memmap"), replacing a buffer already there.
  static ReplayBuffer create(int64_t capacity, const std::string& storage,
                             const std::optional<fs::path>& dir = std::nullopt) {
    if (capacity <= 0)
      throw td::ValueError("ReplayBuffer::create: the capacity must be positive, got " +
                           std::to_string(capacity));
    td::StorageOptions options;
    if (storage == "memmap") {
      if (!dir) throw td::ValueError("ReplayBuffer::create: a memmap buffer needs a directory");
      fs::create_directories(*dir);
      fs::remove(*dir / "state.json");  // a half-replaced buffer must not look resumable
      options["prefix"] = (*dir / "storage").string();
    }
    ReplayBuffer rb(Transition::from_schema(Transition::schema(), {capacity}, storage, options),
                    storage == "memmap" ? dir : std::nullopt);
    rb.flush();
    return rb;
  }

  /// True when `dir` holds a memmap buffer that open() can resume.
  static bool exists(const fs::path& dir) { return fs::exists(dir / "state.json"); }

  /// Resumes the memmap buffer in `dir` at the write position of its last flush().
  static ReplayBuffer open(const fs::path& dir) {
    const std::string file = (dir / "state.json").string();
    std::ifstream in(file);
    if (!in)
      throw td::FormatError("ReplayBuffer::open: no replay buffer to resume in " + dir.string() +
                            " (" + file + " is missing)");
    int64_t capacity = 0, cursor = 0, size = 0, total_written = 0;
    try {
      nlohmann::json state = nlohmann::json::parse(in);
      capacity = state.at("capacity").get<int64_t>();
      cursor = state.at("cursor").get<int64_t>();
      size = state.at("size").get<int64_t>();
      total_written = state.at("total_written").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw td::FormatError(
          "ReplayBuffer::open: corrupt " + file +
          " (expected integers capacity, cursor, size, total_written): " + e.what());
    }
    if (capacity <= 0 || cursor < 0 || cursor >= capacity || size < 0 || size > capacity ||
        total_written < size)
      throw td::FormatError("ReplayBuffer::open: corrupt " + file + ": capacity " +
                            std::to_string(capacity) + ", cursor " + std::to_string(cursor) +
                            ", size " + std::to_string(size) + ", total_written " +
                            std::to_string(total_written));
    ReplayBuffer rb(Transition::load_memmap((dir / "storage").string()), dir);
    if (rb.capacity() != capacity)
      throw td::FormatError("ReplayBuffer::open: " + file + " says capacity " +
                            std::to_string(capacity) + " but " + (dir / "storage").string() +
                            " holds " + std::to_string(rb.capacity()) + " rows");
    rb.cursor_ = cursor;
    rb.size_ = size;
    rb.total_written_ = total_written;
    return rb;
  }

  /// Writes one transition (batch size []) at the write position; returns its row.
  int64_t add(const td::TensorDictBase& transition) {
    const int64_t row = cursor_;
    storage_.index_put_({row}, transition);
    advance(1);
    return row;
  }

  /// Writes a batch of transitions (batch size [n]) at the write position,
  /// wrapping around the end; returns the rows written.
  at::Tensor extend(const td::TensorDictBase& batch) {
    if (batch.batch_dims() != 1)
      throw td::ShapeError(
          "ReplayBuffer::extend: expected a batch of transitions (batch size "
          "[n]), got batch size " +
          c10::str(batch.batch_size()));
    int64_t n = batch.batch_size()[0];
    td::TensorDictBase rows = batch;
    if (n > capacity()) {  // only the last `capacity` rows survive
      rows = batch.index({Slice(n - capacity(), n)});
      advance(n - capacity());
      n = capacity();
    }
    const int64_t first = cursor_;
    const int64_t head = std::min(n, capacity() - first);
    storage_.index_put_({Slice(first, first + head)}, rows.index({Slice(0, head)}));
    if (head < n) storage_.index_put_({Slice(0, n - head)}, rows.index({Slice(head, n)}));
    advance(n);
    return at::arange(first, first + n, at::kLong).remainder_(capacity());
  }

  /// `batch_size` transitions drawn uniformly (with replacement) from the filled rows.
  Transition sample(int64_t batch_size) const { return at(sample_indices(batch_size)); }
  at::Tensor sample_indices(int64_t batch_size) const {
    if (batch_size <= 0)
      throw td::ValueError("ReplayBuffer::sample: the batch size must be positive, got " +
                           std::to_string(batch_size));
    if (size_ == 0) throw td::ValueError("ReplayBuffer::sample: the buffer is empty");
    return at::randint(size_, {batch_size}, at::kLong);
  }

  /// The transitions at `rows` (a 1-D long tensor): one index_select per leaf.
  Transition at(const at::Tensor& rows) const { return storage_.index({rows}); }

  /// Persists the write position (memmap buffers; a no-op otherwise).
  void flush() const {
    if (!dir_) return;
    nlohmann::json state{{"capacity", capacity()},
                         {"cursor", cursor_},
                         {"size", size_},
                         {"total_written", total_written_}};
    write_file_atomic(*dir_ / "state.json", state.dump(2));
  }

  int64_t capacity() const { return storage_.batch_size().at(0); }
  int64_t size() const { return size_; }
  int64_t cursor() const { return cursor_; }
  int64_t total_written() const { return total_written_; }
  const Transition& storage() const { return storage_; }
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
      if (!out) throw td::StorageError("ReplayBuffer: cannot write " + tmp.string());
    }
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec)
      throw td::StorageError("ReplayBuffer: cannot replace " + file.string() + ": " + ec.message());
  }

  ReplayBuffer(Transition storage, std::optional<fs::path> dir)
      : storage_(std::move(storage)), dir_(std::move(dir)) {}

  void advance(int64_t n) {
    cursor_ = (cursor_ + n) % capacity();
    size_ = std::min(size_ + n, capacity());
    total_written_ += n;
  }

  Transition storage_;
  std::optional<fs::path> dir_;
  int64_t cursor_ = 0;
  int64_t size_ = 0;
  int64_t total_written_ = 0;
};

/// A binary tree whose leaves hold non-negative weights and whose inner nodes
/// hold the sums of their children: O(log n) updates and prefix-sum search.
class SumTree {
 public:
  explicit SumTree(int64_t capacity) : capacity_(capacity) {
    while (leaves_ < capacity) leaves_ <<= 1;
    sums_.assign(static_cast<size_t>(2 * leaves_), 0.0);
  }

  void set(int64_t i, double weight) {
    if (i < 0 || i >= capacity_)
      throw td::IndexError("SumTree::set: row " + std::to_string(i) + " is out of range for " +
                           std::to_string(capacity_) + " rows");
    if (!(weight >= 0.0) || !std::isfinite(weight))
      throw td::ValueError("SumTree::set: the weight of row " + std::to_string(i) +
                           " must be finite and non-negative, got " + std::to_string(weight));
    int64_t n = i + leaves_;
    sums_[n] = weight;
    // Recomputed from the children rather than adjusted by a delta, so that
    // rounding errors do not accumulate over millions of updates.
    for (n >>= 1; n >= 1; n >>= 1) sums_[n] = sums_[2 * n] + sums_[2 * n + 1];
  }
  double get(int64_t i) const { return sums_[i + leaves_]; }
  double total() const { return sums_[1]; }
  int64_t capacity() const { return capacity_; }

  /// The leaf i where the running sum of weights first exceeds `mass`.
  int64_t find(double mass) const {
    int64_t n = 1;
    while (n < leaves_) {
      const double left = sums_[2 * n];
      if (mass < left || sums_[2 * n + 1] <= 0.0) {
        n = 2 * n;
      } else {
        mass -= left;
        n = 2 * n + 1;
      }
    }
    return std::min(n - leaves_, capacity_ - 1);
  }

 private:
  int64_t capacity_;
  int64_t leaves_ = 1;
  std::vector<double> sums_;
};

/// Prioritized experience replay (Schaul et al. 2016): row i is drawn with
/// probability p_i^alpha / sum_j p_j^alpha; importance weights
/// (N * P(i))^-beta are normalised by the largest weight of the batch. New
/// rows get the largest priority seen so far.
class PrioritizedSampler {
 public:
  explicit PrioritizedSampler(int64_t capacity, double alpha = 0.6, double beta = 0.4,
                              double eps = 1e-6)
      : tree_(capacity), alpha_(alpha), beta_(beta), eps_(eps) {}

  struct Batch {
    at::Tensor indices;  // long [B]
    at::Tensor weights;  // float [B]
  };

  /// Gives the rows just written the largest priority seen so far.
  void mark_written(const at::Tensor& rows) {
    const double w = std::pow(max_priority_, alpha_);
    at::Tensor r = rows.to(at::kLong).contiguous();
    const int64_t* p = r.data_ptr<int64_t>();
    for (int64_t k = 0; k < r.numel(); ++k) tree_.set(p[k], w);
  }
  void mark_written(int64_t row) { tree_.set(row, std::pow(max_priority_, alpha_)); }

  /// `batch_size` rows among the first `size`, stratified over the total mass.
  Batch sample(int64_t batch_size, int64_t size, std::mt19937_64& rng) const {
    const double total = tree_.total();
    if (batch_size <= 0)
      throw td::ValueError("PrioritizedSampler::sample: the batch size must be positive, got " +
                           std::to_string(batch_size));
    if (size <= 0 || size > tree_.capacity())
      throw td::ValueError("PrioritizedSampler::sample: size must be in [1, " +
                           std::to_string(tree_.capacity()) + "], got " + std::to_string(size));
    if (total <= 0.0) throw td::ValueError("PrioritizedSampler::sample: no priorities set");
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    at::Tensor indices = at::empty({batch_size}, at::kLong);
    at::Tensor weights = at::empty({batch_size}, at::kFloat);
    int64_t* idx = indices.data_ptr<int64_t>();
    float* w = weights.data_ptr<float>();
    const double segment = total / static_cast<double>(batch_size);
    double max_w = 0.0;
    for (int64_t b = 0; b < batch_size; ++b) {
      int64_t i = tree_.find((static_cast<double>(b) + uniform(rng)) * segment);
      i = std::min(i, size - 1);
      idx[b] = i;
      const double prob = tree_.get(i) / total;
      const double wi = prob > 0 ? std::pow(static_cast<double>(size) * prob, -beta_) : 0.0;
      w[b] = static_cast<float>(wi);
      max_w = std::max(max_w, wi);
    }
    if (max_w > 0) weights.div_(max_w);
    return {indices, weights};
  }

  /// New priorities (e.g. |TD error|) of the rows `indices`.
  void update_priorities(const at::Tensor& indices, const at::Tensor& priorities) {
    at::Tensor idx = indices.to(at::kLong).contiguous();
    at::Tensor pr = priorities.to(at::kDouble).abs().contiguous();
    if (idx.numel() != pr.numel())
      throw td::ShapeError("PrioritizedSampler::update_priorities: " + std::to_string(idx.numel()) +
                           " indices but " + std::to_string(pr.numel()) + " priorities");
    const int64_t* i = idx.data_ptr<int64_t>();
    const double* p = pr.data_ptr<double>();
    // Checked before any is applied, so a bad entry changes nothing.
    for (int64_t k = 0; k < idx.numel(); ++k) {
      if (i[k] < 0 || i[k] >= tree_.capacity())
        throw td::IndexError("PrioritizedSampler::update_priorities: row " + std::to_string(i[k]) +
                             " is out of range for " + std::to_string(tree_.capacity()) + " rows");
      if (!std::isfinite(p[k]))
        throw td::ValueError("PrioritizedSampler::update_priorities: the priority of row " +
                             std::to_string(i[k]) + " is " + std::to_string(p[k]));
    }
    for (int64_t k = 0; k < idx.numel(); ++k) {
      const double priority = p[k] + eps_;
      max_priority_ = std::max(max_priority_, priority);
      tree_.set(i[k], std::pow(priority, alpha_));
    }
  }

  /// The sampling weight p_i^alpha of row i.
  double weight(int64_t row) const { return tree_.get(row); }

  /// The weights and the largest priority as a tensordict (any storage can
  /// keep it); load_state() reads it back.
  td::TensorDict state() const {
    at::Tensor weights = at::empty({tree_.capacity()}, at::kDouble);
    double* p = weights.data_ptr<double>();
    for (int64_t i = 0; i < tree_.capacity(); ++i) p[i] = tree_.get(i);
    return td::TensorDict(
        {{"weights", weights}, {"max_priority", at::scalar_tensor(max_priority_, at::kDouble)}});
  }
  void load_state(const td::TensorDictBase& state, const std::string& where) {
    at::Tensor weights = state.get("weights").contiguous();
    if (weights.numel() != tree_.capacity() || weights.scalar_type() != at::kDouble)
      throw td::FormatError("PrioritizedSampler::load: " + where + " holds " +
                            std::to_string(weights.numel()) + " " +
                            std::string(c10::toString(weights.scalar_type())) +
                            " weights, expected " + std::to_string(tree_.capacity()) + " Double");
    const double* p = weights.data_ptr<double>();
    for (int64_t i = 0; i < tree_.capacity(); ++i) tree_.set(i, p[i]);
    max_priority_ = state.get("max_priority").item<double>();
  }

  /// Saves the weights as a memmap tensordict under `dir`; load() reads them back.
  void save(const fs::path& dir) const {
    fs::remove_all(dir);
    state().memmap(dir.string());
  }
  void load(const fs::path& dir) { load_state(td::load_memmap(dir.string()), dir.string()); }

 private:
  SumTree tree_;
  double alpha_, beta_, eps_;
  double max_priority_ = 1.0;
};

}  // namespace replay
