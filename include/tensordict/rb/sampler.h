#pragma once
/// @file rb/sampler.h
/// Samplers: which rows of a replay buffer a sample reads (TorchRL's
/// RandomSampler, SamplerWithoutReplacement and PrioritizedSampler).
///
/// A sampler sees the buffer through three calls: sample() draws row indices
/// among the `size` rows filled so far, on_write() tells it which rows were
/// just written, on_empty() that the buffer was emptied. A sampler that reads
/// the stored rows themselves (SliceSampler, slice_sampler.h) overrides
/// sample_from(), which the buffer calls with a view of its storage. Samplers are not
/// synchronised themselves: the ReplayBuffer holding one serialises the calls
/// (see replay_buffer.h); a sampler used alone needs the caller's lock.

#include <tensordict/nested_key.h>
#include <tensordict/rb/segment_tree.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::rb {

/// What a sampler draws: the rows, and for prioritized sampling the
/// importance weights.
struct SampleInfo {
  at::Tensor index;   ///< int64 [B], rows in [0, size)
  at::Tensor weight;  ///< float32 [B] importance weights; undefined unless prioritized
  /// Entries of batch [B] the sample gets beside the stored rows, replacing
  /// a stored entry of the same key (SliceSampler's truncated and done flags).
  std::vector<std::pair<NestedKey, at::Tensor>> entries;
};

/// The buffer as sample_from() sees it.
struct StorageView {
  /// The storage, batch size [capacity] (or [envs, steps], see envs).
  const TensorDictBase* storage = nullptr;
  int64_t size = 0;  ///< rows filled: [0, size)
  int64_t capacity = 0;
  /// The row written last (where the newest data ends), -1 when unknown.
  int64_t last_row = -1;
  /// An [env, time] storage (batch size [envs, steps]): the number of envs,
  /// 0 for a storage of batch size [capacity]. Then size and capacity count
  /// elements (envs per time step), a sampler numbers element (env, time) as
  /// time * envs + env (TorchRL's time-major order) and last_row is the time
  /// step written last.
  int64_t envs = 0;
};

/// The sampler interface. `generator` may be null (LibTorch's default CPU
/// generator is used then). The built-in samplers take their draws from it
/// directly, not through at::randint / at::rand / at::randperm: the same
/// generator state gives the same rows, but not the rows those calls would.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// `batch_size` rows among the first `size` filled rows. ValueError when
  /// size <= 0 or batch_size <= 0 (and as each sampler documents).
  virtual SampleInfo sample(int64_t size, int64_t batch_size, at::Generator* generator) = 0;
  /// What ReplayBuffer::sample calls. The default is sample(view.size,
  /// batch_size, generator); a sampler that reads the stored rows overrides it.
  virtual SampleInfo sample_from(const StorageView& view, int64_t batch_size,
                                 at::Generator* generator) {
    return sample(view.size, batch_size, generator);
  }
  /// The rows (int64 [n], distinct) that a write has just filled.
  virtual void on_write(const at::Tensor& rows) {}
  /// One row just written (ReplayBuffer::add). The default calls on_write()
  /// with a one-element tensor; samplers override it to skip making that
  /// tensor (an add costs well under a microsecond otherwise).
  virtual void on_write_row(int64_t row);
  /// The buffer was emptied: forget every row.
  virtual void on_empty() {}
  /// True for samplers whose sample() fills SampleInfo::weight and that
  /// use update_priority().
  virtual bool prioritized() const noexcept { return false; }
  /// New priorities of rows (TorchRL's Sampler.update_priority). The base does
  /// nothing, as TorchRL's samplers without priorities.
  virtual void update_priority(const at::Tensor& index, const at::Tensor& priority) {}
  /// The class name, for messages ("RandomSampler", ...).
  virtual std::string name() const = 0;

  /// Writes the sampler's state under `dir`, the sampler/ directory of a
  /// checkpoint (TorchRL's Sampler.dumps; ReplayBuffer::dumps calls it). A
  /// sampler with state creates `dir`; one without writes nothing. The base
  /// throws UnsupportedError naming the sampler: a sampler of one's own is
  /// checkpointed only when it overrides dumps() and loads().
  virtual void dumps(const std::filesystem::path& dir) const;
  /// Reads what dumps() wrote under `dir` (which may not exist for a sampler
  /// that writes nothing). All or nothing: FormatError naming the file and
  /// field for a malformed, truncated or missing file, ValueError when the
  /// files are another sampler's or of another capacity; the sampler is
  /// unchanged then. The base throws UnsupportedError, as dumps().
  virtual void loads(const std::filesystem::path& dir);
};

/// Uniform sampling with replacement over the filled rows.
class RandomSampler : public Sampler {
 public:
  SampleInfo sample(int64_t size, int64_t batch_size, at::Generator* generator) override;
  void on_write_row(int64_t) override {}
  std::string name() const override { return "RandomSampler"; }
  /// Writes nothing (RandomSampler has no state).
  void dumps(const std::filesystem::path& dir) const override;
  /// ValueError when `dir` holds another sampler's state.
  void loads(const std::filesystem::path& dir) override;
};

/// Epochs without replacement (TorchRL's SamplerWithoutReplacement): an epoch
/// is one pass over a permutation of the rows filled when it starts (their
/// order when `shuffle` is false); each sample takes the next batch_size rows
/// of it. The last batch of an epoch is shorter when batch_size does not
/// divide the row count, unless `drop_last`, which skips that remainder. A new
/// epoch starts when the current one is used up, or when the number of filled
/// rows changed since it started (as TorchRL, which then reshuffles).
class SamplerWithoutReplacement : public Sampler {
 public:
  explicit SamplerWithoutReplacement(bool drop_last = false, bool shuffle = true)
      : drop_last_(drop_last), shuffle_(shuffle) {}
  /// ValueError also when drop_last and batch_size > size.
  SampleInfo sample(int64_t size, int64_t batch_size, at::Generator* generator) override;
  void on_write_row(int64_t) override {}
  void on_empty() override;
  std::string name() const override { return "SamplerWithoutReplacement"; }
  /// A memory-mapped tensordict of batch [] under `dir`: len_storage (int64,
  /// the rows the current epoch was drawn for), _sample_list (int64 [k], the
  /// rows still to draw, in order; a non-tensor null before the first
  /// sample), drop_last and _ran_out (bool), as TorchRL.
  void dumps(const std::filesystem::path& dir) const override;
  /// Takes the epoch and drop_last from the files (shuffle is not saved);
  /// the next sample goes on with the saved order.
  void loads(const std::filesystem::path& dir) override;

  bool drop_last() const noexcept { return drop_last_; }
  bool shuffle() const noexcept { return shuffle_; }
  /// True when the last sample() finished an epoch (TorchRL's ran_out).
  bool ran_out() const noexcept { return ran_out_; }
  /// Rows left in the current epoch.
  int64_t remaining() const noexcept { return order_.defined() ? order_.numel() - next_ : 0; }

 private:
  void start_epoch(int64_t size, at::Generator* generator);

  bool drop_last_;
  bool shuffle_;
  bool ran_out_ = false;
  int64_t epoch_size_ = 0;  // filled rows when the epoch started
  at::Tensor order_;        // int64 [epoch_size_]
  int64_t next_ = 0;        // position of the next row in order_
};

/// TorchRL's sampler_metadata.json fields and the trees' leaves: what
/// PrioritizedSampler::state() gives and load_state() takes.
struct PrioritizedSamplerState {
  double alpha = 0;
  double beta = 0;
  double eps = 0;
  /// The largest priority given so far; NaN while none was (TorchRL's None,
  /// in which case written rows get priority 1).
  double max_priority = 0;
  /// The row max_priority was given to (TorchRL's second _max_priority
  /// entry); -1 while there is none.
  int64_t max_priority_slot = -1;
  int64_t max_capacity = 0;
  at::Tensor sum_leaves;  ///< float64 [max_capacity]: (p + eps)^alpha per row, 0 if unwritten
  at::Tensor min_leaves;  ///< float64 [max_capacity]: the same, +inf if unwritten
};

/// Prioritized experience replay (Schaul et al. 2016), as TorchRL's
/// PrioritizedSampler: row i is stored with weight w_i = (p_i + eps)^alpha
/// and drawn with probability w_i / sum_j w_j. A written row gets the
/// largest priority given so far (1 before any), so it is likely to be seen
/// soon. Importance weights are (w_i / min_j w_j)^-beta, min over the rows
/// set, so the rarest row has weight 1 and the others less.
class PrioritizedSampler : public Sampler {
 public:
  /// ValueError unless capacity > 0, alpha >= 0, beta >= 0 and eps >= 0.
  PrioritizedSampler(int64_t capacity, double alpha, double beta, double eps = 1e-8);

  /// ValueError also when no row has a positive weight.
  SampleInfo sample(int64_t size, int64_t batch_size, at::Generator* generator) override;
  /// Gives the rows the largest priority so far (TorchRL's mark_update).
  void on_write(const at::Tensor& rows) override;
  void on_write_row(int64_t row) override;
  /// Every row unwritten again; the largest priority forgotten.
  void on_empty() override;
  bool prioritized() const noexcept override { return true; }
  /// Sets p_i for each row (index int64, priority real, one priority is
  /// broadcast). Checked before any change: IndexError for an index outside
  /// [0, capacity), ValueError for a negative, NaN or infinite priority,
  /// ShapeError for a length mismatch.
  void update_priority(const at::Tensor& index, const at::Tensor& priority) override;
  std::string name() const override { return "PrioritizedSampler"; }
  /// sampler_metadata.json (_alpha, _beta, _eps, _max_priority as
  /// [value, slot] or [null, null], _max_capacity, _schema_version 1) and
  /// sumtree.memmap / mintree.memmap (float64 [capacity] leaves), as TorchRL.
  void dumps(const std::filesystem::path& dir) const override;
  /// Replaces alpha, beta, eps, the largest priority and both trees with
  /// the files' (load_state()). ValueError when _max_capacity differs from
  /// this sampler's capacity.
  void loads(const std::filesystem::path& dir) override;

  int64_t capacity() const noexcept { return sum_tree_.capacity(); }
  double alpha() const noexcept { return alpha_; }
  double beta() const noexcept { return beta_; }
  double eps() const noexcept { return eps_; }
  /// beta is often annealed towards 1 during training. ValueError if < 0.
  void set_beta(double beta);
  /// The largest priority given so far (NaN while none).
  double max_priority() const noexcept { return max_priority_; }
  /// The row the largest priority was given to (-1 while none).
  int64_t max_priority_slot() const noexcept { return max_priority_slot_; }
  const SumTree& sum_tree() const noexcept { return sum_tree_; }
  const MinTree& min_tree() const noexcept { return min_tree_; }

  PrioritizedSamplerState state() const;
  /// Replaces alpha, beta, eps, the largest priority (and its slot) and both
  /// trees. ValueError when max_capacity differs from this sampler's capacity or a
  /// value is out of range; ShapeError/TypeError for leaves that are not
  /// float64 [capacity]. Nothing changes on error.
  void load_state(const PrioritizedSamplerState& state);

 private:
  SumTree sum_tree_;
  MinTree min_tree_;
  double alpha_, beta_, eps_;
  double max_priority_;
  int64_t max_priority_slot_ = -1;
};

}  // namespace tensordict::rb
