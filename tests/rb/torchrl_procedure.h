#pragma once
// The C++ side of the procedure of tests/rb/python/torchrl_checkpoint.py
// (its docstring): the same buffer, rows, samples and priorities, and the
// same checks of a loaded checkpoint, so that a directory written by either
// side can be checked by the other.
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/schema.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tensordict::rb::test {

inline constexpr int64_t kBatch = 4;    // every sample drawn
inline constexpr int64_t kSamples = 3;  // samples after the writes
inline constexpr int64_t kChunk = 7;    // rows per extend
inline constexpr double kAlpha = 0.7, kBeta = 0.5, kEps = 1e-8;

/// The rows numbered `i` (int64 [n]): obs = i + [0, .25, .5, .75],
/// action = 10 i + 1, reward = i / 2 - 3, done = i % 3 == 0,
/// next.obs = obs + 1.
inline TensorDict expected_rows(const at::Tensor& i) {
  const at::Tensor base = i.to(at::kFloat);
  const at::Tensor obs = base.unsqueeze(1) + at::tensor({0.0f, 0.25f, 0.5f, 0.75f});
  return TensorDict({{"obs", obs},
                     {"action", i * 10 + 1},
                     {"reward", base * 0.5 - 3.0},
                     {"done", i.remainder(3).eq(0)},
                     {"next", TensorDict({{"obs", obs + 1.0}}, {i.numel()})}},
                    {i.numel()});
}

/// The steps [start, stop) of `envs` envs, batch [envs, stop - start], for an
/// [env, time] buffer: env e's step j is row number j * envs + e (its
/// position in TorchRL's time-major storage, which the checks count in).
inline TensorDict env_steps(int64_t envs, int64_t start, int64_t stop) {
  const at::Tensor number = at::arange(start, stop, at::kLong).mul(envs).unsqueeze(0) +
                            at::arange(envs, at::kLong).unsqueeze(1);
  return expected_rows(number.flatten()).reshape({envs, stop - start}).to_tensordict();
}

/// An [env, time] storage of `capacity` elements ([envs, capacity / envs])
/// for the rows of expected_rows(), in memory.
inline TensorDictBase env_storage(int64_t envs, int64_t capacity) {
  const TensorDict one = expected_rows(at::zeros({1}, at::kLong));
  Schema schema;
  for (const NestedKey& key : one.keys(/*include_nested=*/true, /*leaves_only=*/true)) {
    const at::Tensor t = one.get(key);
    schema.add(key, FieldSpec{std::vector<int64_t>(t.sizes().begin() + 1, t.sizes().end()),
                              t.scalar_type()});
  }
  return from_schema(schema, {envs, capacity / envs});
}

/// The raw priority given to slot s: 0.5 + (s % 7) / 4.
inline at::Tensor slot_priority(const at::Tensor& slot) {
  return slot.remainder(7).to(at::kFloat) * 0.25 + 0.5;
}

inline std::shared_ptr<Sampler> make_sampler(const std::string& name, int64_t capacity) {
  if (name == "random") return std::make_shared<RandomSampler>();
  if (name == "without_replacement") return std::make_shared<SamplerWithoutReplacement>();
  if (name == "prioritized")
    return std::make_shared<PrioritizedSampler>(capacity, kAlpha, kBeta, kEps);
  throw std::invalid_argument("unknown sampler " + name);
}

/// Rows 0..rows-1 by extends of kChunk, kSamples samples of kBatch, then
/// (prioritized) every filled slot given slot_priority(s).
/// With `envs`, the buffer is [env, time] and `rows` counts the steps of
/// every env, written by extends of [envs, kChunk].
inline void fill(ReplayBuffer& buffer, int64_t rows, int64_t envs = 0) {
  for (int64_t start = 0; start < rows; start += kChunk)
    buffer.extend(
        envs ? env_steps(envs, start, std::min(start + kChunk, rows))
             : expected_rows(at::arange(start, std::min(start + kChunk, rows), at::kLong)));
  for (int64_t k = 0; k < kSamples; ++k) buffer.sample(kBatch);
  if (buffer.sampler()->prioritized()) {
    // Slot s is element s of TorchRL's time-major numbering; an [env, time]
    // buffer takes it as its (env, time) pair.
    const at::Tensor slots = at::arange(buffer.size(), at::kLong);
    buffer.update_priority(
        envs ? at::stack({slots.remainder(envs), slots.div(envs, "floor")}, 1) : slots,
        slot_priority(slots));
  }
}

/// The prioritized sampler's checks of check_loaded() over the first `length`
/// of `capacity` slots (elements, time-major, for an [env, time] buffer).
inline void check_prioritized(ReplayBuffer& buffer, int64_t capacity, int64_t length,
                              std::ostringstream& err) {
  auto* s = dynamic_cast<PrioritizedSampler*>(buffer.sampler().get());
  if (s == nullptr) {
    err << "not a PrioritizedSampler; ";
    return;
  }
  if (s->alpha() != kAlpha || s->beta() != kBeta || s->eps() != kEps)
    err << "alpha/beta/eps " << s->alpha() << "/" << s->beta() << "/" << s->eps() << "; ";
  const double want_max = std::max(
      1.0, slot_priority(at::arange(std::min<int64_t>(length, 7), at::kLong)).max().item<double>());
  if (!(std::fabs(s->max_priority() - want_max) <= 1e-6))
    err << "max_priority " << s->max_priority() << ", expected " << want_max << "; ";
  const PrioritizedSamplerState st = s->state();
  if (st.max_capacity != capacity) err << "max_capacity " << st.max_capacity << "; ";
  const at::Tensor slots = at::arange(length, at::kLong);
  const at::Tensor weights = (slot_priority(slots).to(at::kDouble) + kEps).pow(kAlpha);
  // TorchRL's trees hold float32: compare at that precision.
  for (const at::Tensor& leaves : {st.sum_leaves, st.min_leaves})
    if (!at::allclose(leaves.narrow(0, 0, length), weights, 1e-6, 0))
      err << "tree leaves differ from (p + eps)^alpha; ";
  if (st.sum_leaves.narrow(0, length, capacity - length).ne(0).any().item<bool>())
    err << "sum leaves past len are not 0; ";
  if (st.min_leaves.narrow(0, length, capacity - length)
          .lt(std::numeric_limits<float>::max())
          .any()
          .item<bool>())
    err << "min leaves past len are not empty; ";
  const at::Tensor w = buffer.sample(kBatch).get("priority_weight");
  if (!(w.gt(0).all().item<bool>() && w.le(1 + 1e-6).all().item<bool>()))
    err << "priority weights not in (0, 1]; ";
}

/// check_loaded() for an [env, time] buffer of `envs` envs and `capacity`
/// elements after `rows` steps of every env.
inline std::string check_loaded_env(ReplayBuffer& buffer, const std::string& sampler,
                                    int64_t capacity, int64_t envs, int64_t rows) {
  std::ostringstream err;
  const int64_t steps = capacity / envs, filled = std::min(rows, steps);
  if (buffer.size() != filled * envs)
    err << "len " << buffer.size() << ", expected " << filled * envs << "; ";
  const WriterState w = buffer.writer_state();
  if (w.cursor != rows % steps || w.write_count != rows)
    err << "writer " << w.cursor << "/" << w.write_count << ", expected " << rows % steps << "/"
        << rows << "; ";
  // Time t of env e holds the last step j < rows with j % steps == t.
  const at::Tensor t = at::arange(filled, at::kLong);
  const at::Tensor j = t + steps * (rows - 1 - t).div(steps, "floor");
  const TensorDict want = env_steps(envs, 0, 1);  // for the keys
  const TensorDictBase storage = buffer.storage();
  for (const NestedKey& key : want.keys(/*include_nested=*/true, /*leaves_only=*/true)) {
    const at::Tensor number = j.mul(envs).unsqueeze(0) + at::arange(envs, at::kLong).unsqueeze(1);
    const at::Tensor expected = expected_rows(number.flatten()).get(key);
    const at::Tensor got = storage.get(key).narrow(1, 0, filled).flatten(0, 1);
    if (!got.sizes().equals(expected.sizes()) || !got.equal(expected))
      err << key.repr() << " differs from the rows' formula; ";
  }
  if (sampler == "without_replacement") {
    auto* s = dynamic_cast<SamplerWithoutReplacement*>(buffer.sampler().get());
    if (s == nullptr) return err.str() + "not a SamplerWithoutReplacement";
    const int64_t left = s->remaining();
    if (left <= 0 || left > filled * envs) err << "remaining " << left << "; ";
    std::vector<bool> seen(static_cast<std::size_t>(filled * envs), false);
    for (int64_t drawn = 0; drawn < left;) {
      const at::Tensor index = buffer.sample(kBatch).get("index");
      for (int64_t k = 0; k < index.size(0); ++k, ++drawn) {
        const int64_t e = index[k][0].item<int64_t>(), time = index[k][1].item<int64_t>();
        const int64_t flat = time * envs + e;
        if (e < 0 || e >= envs || time < 0 || time >= filled ||
            seen[static_cast<std::size_t>(flat)]) {
          err << "the saved order repeats or leaves the elements; ";
          drawn = left;
          break;
        }
        seen[static_cast<std::size_t>(flat)] = true;
      }
    }
  }
  if (sampler == "prioritized") check_prioritized(buffer, capacity, filled * envs, err);
  const at::Tensor index = buffer.sample(kBatch).get("index");
  if (index.dim() != 2 || index.size(1) != 2 || index.select(1, 1).ge(filled).any().item<bool>() ||
      index.select(1, 0).ge(envs).any().item<bool>())
    err << "a sample's [env, time] index leaves the filled elements; ";
  return err.str();
}

/// What differs between a buffer loaded from a checkpoint of `rows` rows
/// made by this procedure and what it must hold; empty when nothing does.
/// Samples from the buffer (as TorchRL's check does).
inline std::string check_loaded(ReplayBuffer& buffer, const std::string& sampler, int64_t capacity,
                                int64_t rows) {
  std::ostringstream err;
  const int64_t length = std::min(rows, capacity);
  if (buffer.size() != length) err << "len " << buffer.size() << ", expected " << length << "; ";
  const WriterState w = buffer.writer_state();
  if (w.cursor != rows % capacity || w.write_count != rows)
    err << "writer " << w.cursor << "/" << w.write_count << ", expected " << rows % capacity << "/"
        << rows << "; ";
  const TensorDictBase storage = buffer.storage();
  const at::Tensor slots = at::arange(length, at::kLong);
  // The last row number i < rows landing in slot s.
  const at::Tensor written = slots + capacity * (rows - 1 - slots).div(capacity, "floor");
  const TensorDict want = expected_rows(written);
  for (const NestedKey& key : want.keys(/*include_nested=*/true, /*leaves_only=*/true)) {
    if (!storage.contains(key)) {
      err << "storage has no " << key.repr() << "; ";
      continue;
    }
    const at::Tensor got = storage.get(key).narrow(0, 0, length);
    const at::Tensor expected = want.get(key);
    if (got.scalar_type() != expected.scalar_type() || !got.sizes().equals(expected.sizes()) ||
        !got.equal(expected))
      err << key.repr() << " differs from the rows' formula; ";
  }
  if (sampler == "without_replacement") {
    auto* s = dynamic_cast<SamplerWithoutReplacement*>(buffer.sampler().get());
    if (s == nullptr) return err.str() + "not a SamplerWithoutReplacement";
    if (s->drop_last()) err << "drop_last set; ";
    if (s->remaining() <= 0 || s->remaining() > length)
      err << "remaining " << s->remaining() << " not in [1, " << length << "]; ";
    // The saved order goes on: the next batches drain it, distinct rows.
    const int64_t left = s->remaining();
    std::vector<bool> seen(static_cast<std::size_t>(length), false);
    for (int64_t drawn = 0; drawn < left;) {
      const at::Tensor index = buffer.sample(kBatch).get("index");
      const int64_t* r = index.data_ptr<int64_t>();
      for (int64_t k = 0; k < index.numel(); ++k, ++drawn) {
        if (r[k] < 0 || r[k] >= length || seen[static_cast<std::size_t>(r[k])]) {
          err << "the saved order repeats or leaves the rows (" << r[k] << "); ";
          drawn = left;
          break;
        }
        seen[static_cast<std::size_t>(r[k])] = true;
      }
    }
  } else if (sampler == "prioritized") {
    check_prioritized(buffer, capacity, length, err);
  }
  const TensorDict sample = buffer.sample(kBatch);
  const at::Tensor index = sample.get("index");
  if (index.lt(0).any().item<bool>() || index.ge(length).any().item<bool>())
    err << "a sample reads rows past len; ";
  return err.str();
}

}  // namespace tensordict::rb::test
