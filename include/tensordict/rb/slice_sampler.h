#pragma once
/// @file rb/slice_sampler.h
/// SliceSampler: samples of consecutive steps of stored trajectories
/// (TorchRL's SliceSampler), for recurrent models and n-step targets.
///
/// A sample of B steps is B / slice_len slices (or num_slices slices of
/// B / num_slices steps), each slice_len consecutive steps of one trajectory.
/// Trajectories are found in the stored rows at each sample, as TorchRL
/// finds them: from a trajectory id entry (a new trajectory where the id
/// changes between consecutive rows) or from an end flag entry (a trajectory
/// ends at each row whose flag is set). The buffer is a ring: when it is full
/// a trajectory may run from its last row on to row 0, and the row written
/// last always ends one, since what followed it there has been overwritten;
/// while it is not full, the last filled row ends one.
///
/// In an [env, time] buffer (StorageView::envs > 0) each env's steps are
/// searched along time on their own, as TorchRL does for its ndim=2
/// storages: slices run along time within one env, never across envs, and
/// wrap at the ring's end within that env. The trajectories are listed env
/// by env.
///
/// @code
///   rb::SliceSamplerOptions options;
///   options.slice_len = 8;
///   options.traj_key = tensordict::NestedKey{"collector", "traj_ids"};
///   rb::ReplayBuffer buffer(100'000, std::make_shared<rb::SliceSampler>(options));
///   buffer.extend(rollout);                        // batch size [n], in time order
///   tensordict::TensorDict s = buffer.sample(64);  // 8 slices of 8 steps
///   // s["next", "truncated"] is true at the last step of each slice
/// @endcode

#include <tensordict/nested_key.h>
#include <tensordict/rb/sampler.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::rb {

struct SliceSamplerOptions {
  /// Steps per slice; exactly one of slice_len and num_slices is set (> 0).
  int64_t slice_len = 0;
  /// Slices per sample (then the batch size divided by it is the length).
  int64_t num_slices = 0;
  /// The trajectory id entry (one integer per row). When neither traj_key
  /// nor end_key is set, ("collector", "traj_ids"), then "episode", then
  /// ("next", "done") as an end key are tried, the first the storage holds
  /// (as TorchRL); when traj_key is set it is used.
  std::optional<NestedKey> traj_key;
  /// The end flag entry (one bool per row), when traj_key is not set.
  std::optional<NestedKey> end_key;
  /// Several end flag entries, or'ed (TorchRL's end_keys: e.g. done and
  /// truncated), when traj_key is not set; the ones the storage lacks are
  /// skipped (KeyError when it has none). Exclusive with end_key.
  std::vector<NestedKey> end_keys;
  /// Where the sample marks the last step of each slice (true there, false
  /// elsewhere); the entries of the same level named "done" (the stored flag
  /// or'ed with it) and "terminated" (the stored one, false when none) are
  /// set too, as TorchRL does. Unset: no such entries.
  std::optional<NestedKey> truncated_key = NestedKey{"next", "truncated"};
  /// When the storage holds this entry, the sample's copy is or'ed with true
  /// at the first step of each slice (so recurrent modules start afresh
  /// there); unset or absent: left as stored.
  std::optional<NestedKey> init_key = NestedKey{"is_init"};
  /// True: only trajectories of at least the slice length are sampled. False:
  /// a shorter trajectory gives a shorter slice (the whole trajectory), so a
  /// sample may hold fewer steps than asked.
  bool strict_length = true;
  /// TorchRL's span: how far a slice's start may be drawn before its
  /// trajectory's first step (span_left) or towards its end (span_right), the
  /// slice then cut at the trajectory's edge, so that the edges are sampled
  /// as often as the middle. 0: never (a slice fits in its trajectory).
  /// span_left = k: up to k steps before, the slice keeping at least
  /// length - k steps; span_right = k: a start up to k steps past the last
  /// whole slice's, the slice keeping at least k + 1 steps (TorchRL's draws,
  /// asymmetric as they are). kWholeSpan: as far as the slice length allows
  /// (TorchRL's span=True; on the right a start may fall just past the
  /// trajectory, an empty slice). A k not below the slice length is a
  /// ValueError at sample().
  int64_t span_left = 0;
  int64_t span_right = 0;
  static constexpr int64_t kWholeSpan = -1;
  /// With strict_length false: when some stored trajectory is shorter than
  /// the slice length, every slice is padded to it by repeating its last
  /// step, so a sample always has batch_size steps, and the entry
  /// ("collector", "mask") (bool [batch_size]) is true at the real steps
  /// (TorchRL's pad_output). ValueError with strict_length (at construction).
  bool pad_output = false;
  /// Keep the trajectories found at a sample for the next samples (TorchRL's
  /// cache_values, for datasets that do not change), until a row is written
  /// through the buffer or the buffer is emptied; also dropped when the
  /// buffer's size, capacity or newest row differ. Rows changed another way
  /// (the storage's tensors written directly) are not seen while it is kept.
  bool cache_values = false;
};

/// One trajectory found in the stored rows: `start` and `stop` (inclusive)
/// rows, `length` steps; start > stop when it runs on past the last row to
/// row 0. In an [env, time] storage, start and stop are time steps of env
/// `env` (a trajectory never crosses from one env to another).
struct Trajectory {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t length = 0;
  int64_t env = 0;

  bool operator==(const Trajectory&) const = default;
};

/// Sampling with replacement: each slice picks a trajectory uniformly among
/// those it may come from, then a start uniformly among the positions where
/// a slice fits in it. The sample's "index" lists the rows slice after
/// slice, in time order.
class SliceSampler : public Sampler {
 public:
  /// ValueError unless exactly one of slice_len and num_slices is positive
  /// (and the other 0), when end_key and end_keys are both set, when
  /// pad_output and strict_length are both set, or
  /// when a span is negative (other than kWholeSpan).
  explicit SliceSampler(SliceSamplerOptions options);

  /// Reads the trajectory signal from the storage. ValueError when the
  /// batch size is not a multiple of slice_len (or of num_slices), when
  /// strict_length and no trajectory is long enough; KeyError naming the key
  /// when the storage has no such entry; ShapeError/TypeError naming it when
  /// it is not one integer (or bool, for an end key) per row.
  SampleInfo sample_from(const StorageView& view, int64_t batch_size,
                         at::Generator* generator) override;
  /// Always UnsupportedError: a SliceSampler reads the stored rows, so it
  /// samples through a ReplayBuffer (or sample_from()).
  SampleInfo sample(int64_t size, int64_t batch_size, at::Generator* generator) override;
  /// Writes and emptying drop the trajectories kept with cache_values.
  void on_write(const at::Tensor&) override { cache_.reset(); }
  void on_write_row(int64_t) override { cache_.reset(); }
  void on_empty() override { cache_.reset(); }
  std::string name() const override { return "SliceSampler"; }
  /// Writes nothing: TorchRL's SliceSampler saves no state either.
  void dumps(const std::filesystem::path& dir) const override;
  /// ValueError when `dir` holds another sampler's state.
  void loads(const std::filesystem::path& dir) override;

  /// The trajectories in the rows of `view`, ordered by their stop row (env
  /// by env, then by stop time step, in an [env, time] storage; as TorchRL's
  /// sampler finds them); the errors of sample_from().
  std::vector<Trajectory> trajectories(const StorageView& view) const;
  const SliceSamplerOptions& options() const noexcept { return options_; }

 protected:
  /// The slice length and slice count of a sample of `batch_size` rows
  /// (ValueError when it is not a multiple).
  std::pair<int64_t, int64_t> slice_shape(int64_t batch_size) const;
  /// One slice of up to `seq` steps in each of `chosen`, its start drawn
  /// uniformly where it fits (or spans), with the sample's entries; `pad`:
  /// every slice padded to `seq` steps (pad_output, when a stored
  /// trajectory is shorter than `seq`).
  SampleInfo slices_of(const StorageView& view, const std::vector<Trajectory>& chosen, int64_t seq,
                       bool pad, at::Generator* generator) const;
  /// The trajectories of `view`: found now (into `scratch`), or the ones
  /// kept from an earlier sample with cache_values.
  const std::vector<Trajectory>& found(const StorageView& view, std::vector<Trajectory>& scratch);

 private:
  // The trajectories kept with cache_values, and the view they were found in.
  struct Cache {
    const TensorDictBase* storage;
    int64_t size, capacity, last_row, envs;
    std::vector<Trajectory> trajectories;
  };

  SliceSamplerOptions options_;
  std::optional<Cache> cache_;
};

/// Slices without replacement (TorchRL's SliceSamplerWithoutReplacement):
/// epochs over the trajectories found, each sample taking the next
/// num_slices of a permutation of them (in order when `shuffle` is false),
/// one slice from each. As in TorchRL, with strict_length a drawn trajectory
/// shorter than the slice is skipped, so a sample may hold fewer slices; the
/// last sample of an epoch is shorter unless `drop_last`; an epoch restarts
/// when the number of trajectories changed.
class SliceSamplerWithoutReplacement : public SliceSampler {
 public:
  /// The errors of SliceSampler's constructor.
  explicit SliceSamplerWithoutReplacement(SliceSamplerOptions options, bool drop_last = false,
                                          bool shuffle = true);
  /// The errors of SliceSampler::sample_from; ValueError also when every
  /// trajectory drawn is too short (strict_length).
  SampleInfo sample_from(const StorageView& view, int64_t batch_size,
                         at::Generator* generator) override;
  void on_empty() override {
    SliceSampler::on_empty();
    epoch_.on_empty();
  }
  std::string name() const override { return "SliceSamplerWithoutReplacement"; }
  /// SamplerWithoutReplacement's files over the trajectory numbers, as
  /// TorchRL (len_storage is the trajectory count).
  void dumps(const std::filesystem::path& dir) const override { epoch_.dumps(dir); }
  void loads(const std::filesystem::path& dir) override { epoch_.loads(dir); }

  /// The epoch over trajectory numbers (ran_out(), remaining()).
  const SamplerWithoutReplacement& epoch() const noexcept { return epoch_; }

 private:
  SamplerWithoutReplacement epoch_;
};

}  // namespace tensordict::rb
