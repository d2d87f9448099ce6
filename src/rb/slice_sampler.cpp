// SliceSampler: trajectories found in the stored rows at each sample (as
// TorchRL's find_start_stop_traj), then slices drawn within them.
#include <tensordict/errors.h>
#include <tensordict/rb/slice_sampler.h>

#include <ATen/TensorIndexing.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Optional.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>

namespace tensordict::rb {

namespace fs = std::filesystem;

namespace {

c10::optional<at::Generator> maybe(at::Generator* generator) {
  if (generator == nullptr) return c10::nullopt;
  return *generator;
}

// The entry the trajectories are read from and how.
struct Signal {
  NestedKey key;
  bool ids;  // trajectory ids (else end flags)
};

// `key` with its last part replaced by `last`.
NestedKey sibling(const NestedKey& key, const std::string& last) {
  std::vector<std::string> parts = key.to_vector();
  parts.back() = last;
  return NestedKey(parts);
}

bool has_tensor(const TensorDictBase& td, const NestedKey& key) {
  const std::optional<Value> v = td.find(key);
  return v && v->is_tensor();
}

// A stored entry of one element per row, as a [groups, rows] view: groups
// is 1 for a storage of batch size [capacity], envs for an [env, time]
// storage (rows then counts the time steps filled).
at::Tensor per_row(const TensorDictBase& storage, const NestedKey& key, int64_t envs, int64_t rows,
                   const char* what) {
  at::Tensor t = storage.get(key);
  if (envs == 0) {
    if (t.dim() < 1 || t.numel() != t.size(0))
      throw ShapeError("SliceSampler: the " + std::string(what) + " entry " + key.repr() +
                       " has shape " + c10::str(t.sizes()) +
                       ", expected one element per row ([capacity] or [capacity, 1])");
    return t.narrow(0, 0, rows).reshape({1, rows});
  }
  if (t.dim() < 2 || t.numel() != t.size(0) * t.size(1))
    throw ShapeError("SliceSampler: the " + std::string(what) + " entry " + key.repr() +
                     " has shape " + c10::str(t.sizes()) +
                     ", expected one element per (env, time) ([envs, steps] or [envs, steps, 1])");
  return t.narrow(1, 0, rows).reshape({envs, rows});
}

}  // namespace

SliceSampler::SliceSampler(SliceSamplerOptions options) : options_(std::move(options)) {
  const bool by_len = options_.slice_len > 0, by_count = options_.num_slices > 0;
  if (by_len == by_count || options_.slice_len < 0 || options_.num_slices < 0)
    throw ValueError(
        "SliceSampler: set exactly one of slice_len and num_slices (positive), got "
        "slice_len " +
        std::to_string(options_.slice_len) + " and num_slices " +
        std::to_string(options_.num_slices));
  if (options_.end_key && !options_.end_keys.empty())
    throw ValueError(
        "SliceSampler: end_key and end_keys are exclusive; give every end flag entry in "
        "end_keys");
  for (const NestedKey& key : options_.end_keys)
    if (key.empty()) throw ValueError("SliceSampler: an empty key was given in end_keys");
  if (options_.pad_output && options_.strict_length)
    throw ValueError(
        "SliceSampler: pad_output pads slices of trajectories shorter than the slice, which "
        "strict_length never samples; set strict_length = false with it");
  for (const int64_t span : {options_.span_left, options_.span_right})
    if (span < 0 && span != SliceSamplerOptions::kWholeSpan)
      throw ValueError("SliceSampler: a span is a step count >= 0 or kWholeSpan, got " +
                       std::to_string(span));
  for (const auto* key :
       {&options_.traj_key, &options_.end_key, &options_.truncated_key, &options_.init_key})
    if (key->has_value() && (*key)->empty())
      throw ValueError("SliceSampler: an empty key was given");
}

std::vector<Trajectory> SliceSampler::trajectories(const StorageView& view) const {
  if (view.storage == nullptr || !view.storage->defined())
    throw ValueError("SliceSampler: the buffer has no storage yet");
  const TensorDictBase& storage = *view.storage;
  if (view.size <= 0) throw ValueError("SliceSampler: nothing to sample, the buffer is empty");
  if (view.envs < 0 || (view.envs > 0 && view.size % view.envs != 0))
    throw ValueError("SliceSampler: an [env, time] view of " + std::to_string(view.envs) +
                     " envs holds whole time steps, got " + std::to_string(view.size) +
                     " elements");

  Signal signal;
  std::vector<NestedKey> end_entries;  // end_keys' entries the storage has
  if (!options_.traj_key && !options_.end_keys.empty()) {
    for (const NestedKey& key : options_.end_keys)
      if (has_tensor(storage, key)) end_entries.push_back(key);
    if (end_entries.empty()) {
      std::string names;
      for (const NestedKey& key : options_.end_keys)
        names += (names.empty() ? "" : ", ") + key.repr();
      throw KeyError("SliceSampler: the storage has none of the end flag entries " + names);
    }
    signal = {end_entries.front(), false};
  } else if (options_.traj_key) {
    signal = {*options_.traj_key, true};
    if (!has_tensor(storage, signal.key))
      throw KeyError("SliceSampler: the storage has no trajectory id entry " + signal.key.repr());
  } else if (options_.end_key) {
    signal = {*options_.end_key, false};
    if (!has_tensor(storage, signal.key))
      throw KeyError("SliceSampler: the storage has no end flag entry " + signal.key.repr());
  } else {
    // TorchRL's order: a collector's trajectory ids, a dataset's episode ids, done flags.
    const NestedKey collector{"collector", "traj_ids"}, episode("episode"), done{"next", "done"};
    if (has_tensor(storage, collector))
      signal = {collector, true};
    else if (has_tensor(storage, episode))
      signal = {episode, true};
    else if (has_tensor(storage, done))
      signal = {done, false};
    else
      throw KeyError("SliceSampler: the storage has none of " + collector.repr() + ", " +
                     episode.repr() + " (trajectory ids) and " + done.repr() +
                     " (end flags); set traj_key or end_key");
  }

  // end[g][i]: row (time step) i of group g is the last step of a
  // trajectory; one group, or one per env of an [env, time] storage, each
  // searched along time on its own.
  const int64_t envs = view.envs;
  const int64_t groups = envs ? envs : 1;
  const int64_t rows = envs ? view.size / envs : view.size;
  const bool full = view.size >= view.capacity;
  at::Tensor end = at::empty({groups, rows}, at::kBool);
  if (signal.ids) {
    const at::Tensor ids = per_row(storage, signal.key, envs, rows, "trajectory id");
    if (c10::isComplexType(ids.scalar_type()))
      throw TypeError("SliceSampler: the trajectory id entry " + signal.key.repr() + " is " +
                      std::string(c10::toString(ids.scalar_type())));
    end.narrow(1, 0, rows - 1).copy_(ids.narrow(1, 0, rows - 1).ne(ids.narrow(1, 1, rows - 1)));
    // Full: the last row's trajectory goes on at row 0 when the ids agree.
    end.narrow(1, rows - 1, 1).copy_(ids.narrow(1, rows - 1, 1).ne(ids.narrow(1, 0, 1)));
  } else {
    if (end_entries.empty()) end_entries.push_back(signal.key);
    for (std::size_t k = 0; k < end_entries.size(); ++k) {
      const at::Tensor flags = per_row(storage, end_entries[k], envs, rows, "end flag");
      if (!c10::isIntegralType(flags.scalar_type(), /*includeBool=*/true))
        throw TypeError("SliceSampler: the end flag entry " + end_entries[k].repr() + " is " +
                        std::string(c10::toString(flags.scalar_type())) + ", expected bool");
      // Bool flags (the usual ones) are copied as they are: ne(0) over every
      // row cost 4x the copy.
      const at::Tensor set = flags.scalar_type() == at::kBool ? flags : flags.ne(0);
      if (k == 0)
        end.copy_(set);
      else
        end.logical_or_(set);
    }
  }
  // The stop rows, group after group (group g's in [bounds[g], bounds[g + 1])),
  // first, so that the trajectories are made in one reserved vector.
  std::vector<int64_t> stops;
  std::vector<std::size_t> bounds{0};
  // The flags are bytes 0 or 1 (a bool tensor): memchr finds the few 1s of
  // a long buffer far faster than a loop over every row.
  auto* flags = reinterpret_cast<unsigned char*>(end.data_ptr<bool>());
  const auto row_bytes = static_cast<std::size_t>(rows);
  for (int64_t g = 0; g < groups; ++g) {
    unsigned char* e = flags + g * rows;
    if (!full) {
      e[rows - 1] = 1;  // the newest row: nothing written after it yet
    } else {
      // What followed the newest row was overwritten: its trajectory ends there.
      if (view.last_row >= 0 && view.last_row < rows) e[view.last_row] = 1;
      if (std::memchr(e, 1, row_bytes) == nullptr) e[rows - 1] = 1;
    }
    for (const unsigned char* p = e;
         (p = static_cast<const unsigned char*>(
              std::memchr(p, 1, row_bytes - static_cast<std::size_t>(p - e)))) != nullptr;
         ++p)
      stops.push_back(p - e);
    bounds.push_back(stops.size());
  }
  std::vector<Trajectory> out;
  out.reserve(stops.size());
  for (int64_t g = 0; g < groups; ++g) {
    const std::size_t first = bounds[g], last = bounds[g + 1];
    for (std::size_t k = first; k < last; ++k) {
      // The first trajectory of a group starts after the group's last stop.
      const int64_t start = k > first ? stops[k - 1] + 1 : (stops[last - 1] + 1) % rows;
      int64_t length = stops[k] - start + 1;
      if (length <= 0) length += rows;
      out.push_back({start, stops[k], length, g});
    }
  }
  return out;
}

std::pair<int64_t, int64_t> SliceSampler::slice_shape(int64_t batch_size) const {
  if (batch_size <= 0)
    throw ValueError(name() + "::sample: the batch size must be positive, got " +
                     std::to_string(batch_size));
  if (options_.slice_len > 0) {
    if (batch_size % options_.slice_len != 0)
      throw ValueError(name() + "::sample: the batch size " + std::to_string(batch_size) +
                       " is not a multiple of slice_len " + std::to_string(options_.slice_len));
    return {options_.slice_len, batch_size / options_.slice_len};
  }
  if (batch_size % options_.num_slices != 0)
    throw ValueError(name() + "::sample: the batch size " + std::to_string(batch_size) +
                     " is not a multiple of num_slices " + std::to_string(options_.num_slices));
  return {batch_size / options_.num_slices, options_.num_slices};
}

namespace {

int64_t longest_of(const std::vector<Trajectory>& trajectories) {
  int64_t longest = 0;
  for (const Trajectory& t : trajectories) longest = std::max(longest, t.length);
  return longest;
}

// pad_output applies when a stored trajectory is shorter than the slice (as
// TorchRL decides it, over all of them, not only the drawn ones).
bool any_shorter(const std::vector<Trajectory>& trajectories, int64_t seq) {
  return std::any_of(trajectories.begin(), trajectories.end(),
                     [seq](const Trajectory& t) { return t.length < seq; });
}

}  // namespace

SampleInfo SliceSampler::sample_from(const StorageView& view, int64_t batch_size,
                                     at::Generator* generator) {
  // Not a structured binding: a lambda below captures `seq`, which clang
  // before 16 (so clang-tidy 14) refuses for a binding.
  const std::pair<int64_t, int64_t> shape = slice_shape(batch_size);
  const int64_t seq = shape.first, count = shape.second;
  std::vector<Trajectory> scratch, long_enough;
  const std::vector<Trajectory>& all = found(view, scratch);
  const bool pad = options_.pad_output && any_shorter(all, seq);
  const std::vector<Trajectory>* pool = &all;
  if (options_.strict_length) {
    std::copy_if(all.begin(), all.end(), std::back_inserter(long_enough),
                 [seq](const Trajectory& t) { return t.length >= seq; });
    if (long_enough.empty())
      throw ValueError(name() + "::sample: no trajectory has " + std::to_string(seq) +
                       " steps (the longest has " + std::to_string(longest_of(all)) +
                       "); use strict_length = false to sample shorter ones whole");
    pool = &long_enough;
  }
  // The draws TorchRL makes: a trajectory per slice, then a start in each.
  const at::Tensor which =
      at::randint(static_cast<int64_t>(pool->size()), {count}, maybe(generator), at::kLong);
  const int64_t* w = which.data_ptr<int64_t>();
  std::vector<Trajectory> chosen;
  chosen.reserve(static_cast<std::size_t>(count));
  for (int64_t k = 0; k < count; ++k) chosen.push_back((*pool)[static_cast<std::size_t>(w[k])]);
  return slices_of(view, chosen, seq, pad, generator);
}

const std::vector<Trajectory>& SliceSampler::found(const StorageView& view,
                                                   std::vector<Trajectory>& scratch) {
  if (!options_.cache_values) {
    scratch = trajectories(view);
    return scratch;
  }
  const bool same = cache_ && cache_->storage == view.storage && cache_->size == view.size &&
                    cache_->capacity == view.capacity && cache_->last_row == view.last_row &&
                    cache_->envs == view.envs;
  if (!same)
    cache_ =
        Cache{view.storage, view.size, view.capacity, view.last_row, view.envs, trajectories(view)};
  return cache_->trajectories;
}

SampleInfo SliceSampler::slices_of(const StorageView& view, const std::vector<Trajectory>& chosen,
                                   int64_t seq, bool pad, at::Generator* generator) const {
  const auto count = static_cast<int64_t>(chosen.size());
  const int64_t span_left = options_.span_left, span_right = options_.span_right;
  for (const int64_t span : {span_left, span_right})
    if (span >= seq)
      throw ValueError(name() + "::sample: a span of " + std::to_string(span) +
                       " steps is not below the slice length " + std::to_string(seq));
  const at::Tensor where = at::rand({count}, maybe(generator), at::kFloat);
  const float* u = where.data_ptr<float>();
  std::vector<int64_t> starts(count), lengths(count);
  int64_t total = 0;
  for (int64_t k = 0; k < count; ++k) {
    const Trajectory& t = chosen[static_cast<std::size_t>(k)];
    int64_t length = std::min(seq, t.length);
    // The starts drawn from, relative to the trajectory's first step: [low, high).
    const int64_t high = span_right == 0                                 ? t.length - length + 1
                         : span_right == SliceSamplerOptions::kWholeSpan ? t.length + 1
                                                                         : t.length - span_right;
    const int64_t low = span_left == 0                                 ? 0
                        : span_left == SliceSamplerOptions::kWholeSpan ? 1 - length
                                                                       : -span_left;
    const int64_t positions = high - low;
    int64_t offset =
        low + std::min(positions - 1, static_cast<int64_t>(std::floor(u[k] * float(positions))));
    if (span_left && offset < 0) {  // cut at the trajectory's first step
      length += offset;
      offset = 0;
    }
    if (span_right) length = std::min(length, t.length - offset);  // cut at its last
    starts[k] = t.start + offset;
    lengths[k] = std::max<int64_t>(length, 0);
    total += pad ? seq : lengths[k];
  }
  at::Tensor index = at::empty({total}, at::kLong);
  at::Tensor last = at::zeros({total}, at::kBool), first = at::zeros({total}, at::kBool);
  at::Tensor real = pad ? at::zeros({total}, at::kBool) : at::Tensor();
  int64_t* r = index.data_ptr<int64_t>();
  bool* l = last.data_ptr<bool>();
  bool* f = first.data_ptr<bool>();
  bool* m = pad ? real.data_ptr<bool>() : nullptr;
  // The element of time step `step` (taken round the ring) of the k-th
  // slice's trajectory: the row itself, or time * envs + env.
  const int64_t envs = view.envs;
  const int64_t period = envs ? view.size / envs : view.size;
  auto element = [&](int64_t k, int64_t step) {
    const int64_t time = step % period;
    return envs ? time * envs + chosen[static_cast<std::size_t>(k)].env : time;
  };
  for (int64_t k = 0, p = 0; k < count; ++k) {
    const int64_t slice_begin = p;
    if (lengths[k] > 0 || pad) f[p] = true;  // an empty slice (a whole right span) has no step
    for (int64_t s = 0; s < lengths[k]; ++s, ++p) {
      r[p] = element(k, starts[k] + s);
      if (m) m[p] = true;
    }
    // Padded, an empty slice is marked at its first step, as TorchRL does.
    if (pad)
      l[slice_begin + std::max<int64_t>(lengths[k] - 1, 0)] = true;
    else if (lengths[k] > 0)
      l[p - 1] = true;
    if (pad) {  // the last real step again (the start's row for an empty slice)
      const int64_t repeated = element(k, starts[k] + std::max<int64_t>(lengths[k] - 1, 0));
      for (; p < slice_begin + seq; ++p) r[p] = repeated;
    }
  }

  SampleInfo info;
  info.index = index;
  if (pad) info.entries.emplace_back(NestedKey{"collector", "mask"}, real);
  const TensorDictBase& storage = *view.storage;
  // A stored per-row flag at `index`, and `mark` shaped like it.
  auto stored = [&](const NestedKey& key) {
    if (!envs) return storage.get(key).index_select(0, index);
    return storage.get(key).index({index.remainder(envs), index.div(envs, "floor")});
  };
  auto shaped = [&](const at::Tensor& mark, const at::Tensor& like) {
    if (like.numel() != total) {
      std::vector<int64_t> shape(static_cast<std::size_t>(like.dim()), 1);
      shape[0] = total;
      return mark.view(shape);
    }
    return mark.view(like.sizes());
  };
  if (options_.truncated_key) {
    const NestedKey done_key = sibling(*options_.truncated_key, "done");
    const NestedKey terminated_key = sibling(*options_.truncated_key, "terminated");
    at::Tensor truncated = last.view({total, 1}), done = truncated;
    if (has_tensor(storage, done_key)) {
      const at::Tensor kept = stored(done_key);
      truncated = shaped(last, kept);
      done = at::logical_or(kept, truncated);
    }
    const at::Tensor terminated = has_tensor(storage, terminated_key)
                                      ? stored(terminated_key)
                                      : at::zeros(truncated.sizes(), at::kBool);
    info.entries.emplace_back(*options_.truncated_key, truncated);
    info.entries.emplace_back(done_key, done);
    info.entries.emplace_back(terminated_key, terminated);
  }
  if (options_.init_key && has_tensor(storage, *options_.init_key)) {
    const at::Tensor kept = stored(*options_.init_key);
    info.entries.emplace_back(*options_.init_key, at::logical_or(kept, shaped(first, kept)));
  }
  return info;
}

SliceSamplerWithoutReplacement::SliceSamplerWithoutReplacement(SliceSamplerOptions options,
                                                               bool drop_last, bool shuffle)
    : SliceSampler(std::move(options)), epoch_(drop_last, shuffle) {}

SampleInfo SliceSamplerWithoutReplacement::sample_from(const StorageView& view, int64_t batch_size,
                                                       at::Generator* generator) {
  const auto [seq, count] = slice_shape(batch_size);
  std::vector<Trajectory> scratch;
  const std::vector<Trajectory>& all = found(view, scratch);
  // The next trajectory numbers of the epoch (fewer at its end).
  const at::Tensor drawn =
      epoch_.sample(static_cast<int64_t>(all.size()), count, generator).index.contiguous();
  const int64_t* d = drawn.data_ptr<int64_t>();
  std::vector<Trajectory> chosen;
  for (int64_t k = 0; k < drawn.numel(); ++k) {
    const Trajectory& t = all[static_cast<std::size_t>(d[k])];
    if (!options().strict_length || t.length >= seq) chosen.push_back(t);
  }
  if (chosen.empty())
    throw ValueError(name() + "::sample: every trajectory drawn is shorter than " +
                     std::to_string(seq) + " steps (the longest stored has " +
                     std::to_string(longest_of(all)) +
                     "); use strict_length = false to sample shorter ones whole");
  return slices_of(view, chosen, seq, options().pad_output && any_shorter(all, seq), generator);
}

SampleInfo SliceSampler::sample(int64_t, int64_t, at::Generator*) {
  throw UnsupportedError(
      "SliceSampler::sample: a SliceSampler reads the trajectories from the stored rows; sample "
      "through a ReplayBuffer (or call sample_from() with a StorageView)");
}

}  // namespace tensordict::rb
