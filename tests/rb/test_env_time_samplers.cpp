// PrioritizedSampler and SliceSampler over [env, time] buffers (TorchRL's
// ndim=2 storages), over memory, memmap (a directory on disk), shared memory
// and, when built, HDF5: one priority per (env, time) element numbered
// time-major as TorchRL does, new steps at the largest priority, samples
// with [env, time] "index" pairs and importance weights, priorities updated
// by pairs or by the sampled tensordict, bad indices refused before anything
// changes, checkpoints round trip; slices along time within one env (never
// across envs), by trajectory ids or end flags, wrapping at the ring's end,
// against hand-computed trajectories and against the real TorchRL (a child
// process, python/torchrl_slice_writer.py env_slice): the same trajectories
// and the same set of slices. The checkpoint exchanges with TorchRL are
// python/torchrl_interop.sh (rb.torchrl_checkpoint.env_prioritized.*).
#include <tensordict/errors.h>
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/rb/slice_sampler.h>
#include <tensordict/schema.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rb/env_storages.h"
#include "rb/torchrl_child.h"

namespace fs = std::filesystem;
namespace rb = tensordict::rb;
namespace td = tensordict;
using json = nlohmann::json;

namespace {

constexpr int64_t kEnvs = 3;
constexpr int64_t kSteps = 4;
constexpr double kAlpha = 0.7, kBeta = 0.5, kEps = 1e-8;

// The entries every test storage holds: an id per element and the
// trajectory signals (ids and end flags).
td::Schema element_schema() {
  return td::Schema{{"id", {{}, at::kLong}},
                    {"obs", {{2}, at::kFloat}},
                    {"traj", {{}, at::kLong}},
                    {{"next", "done"}, {{1}, at::kBool}}};
}

// Steps [first, first + n) of every env, batch [envs, n]: element (e, j) has
// id 1000 e + j (obs derived from it), trajectory id 100 e + j / 3 and done
// at every third step: a read tells where it came from.
td::TensorDict steps_of(int64_t first, int64_t n, int64_t envs = kEnvs) {
  const at::Tensor step = at::arange(first, first + n, at::kLong).unsqueeze(0).expand({envs, n});
  const at::Tensor env = at::arange(envs, at::kLong).unsqueeze(1).expand({envs, n});
  const at::Tensor id = (env * 1000 + step).contiguous();
  const at::Tensor f = id.to(at::kFloat);
  return td::TensorDict(
      {{"id", id},
       {"obs", at::stack({f, -f}, -1)},
       {"traj", (env * 100 + step.div(3, "floor")).contiguous()},
       {"next", td::TensorDict({{"done", step.remainder(3).eq(2).unsqueeze(-1)}}, {envs, n})}},
      {envs, n});
}

// Checks that every sampled row is the element its [env, time] index names
// after `written` steps, and returns the flat time-major numbers of the index.
at::Tensor check_rows(const td::TensorDictBase& s, int64_t written, int64_t envs = kEnvs,
                      int64_t steps = kSteps) {
  const at::Tensor index = s.get("index");
  EXPECT_EQ(index.dim(), 2);
  EXPECT_EQ(index.size(1), 2);
  const at::Tensor env = index.select(1, 0), time = index.select(1, 1);
  // Time t of env e holds the last step j < written with j % steps == t.
  const at::Tensor step = time + steps * (written - 1 - time).div(steps, "floor");
  EXPECT_TRUE(s.get("id").equal(env * 1000 + step)) << index;
  const at::Tensor f = s.get("id").to(at::kFloat);
  EXPECT_TRUE(s.get("obs").equal(at::stack({f, -f}, -1)));
  return time * envs + env;
}

struct Storages : rb::test::EnvStorages {
  Storages() : EnvStorages(element_schema(), kEnvs, kSteps) {}
};

std::shared_ptr<rb::PrioritizedSampler> prioritized(int64_t capacity = kEnvs * kSteps) {
  return std::make_shared<rb::PrioritizedSampler>(capacity, kAlpha, kBeta, kEps);
}

double weight_of(double priority) { return std::pow(priority + kEps, kAlpha); }

at::Tensor pairs(std::initializer_list<int64_t> flat) {
  return at::tensor(std::vector<int64_t>(flat), at::kLong).view({-1, 2});
}

class EnvTimePrioritized : public ::testing::TestWithParam<std::string> {
 protected:
  Storages storages;
};

}  // namespace

TEST_P(EnvTimePrioritized, OnePriorityPerElementNumberedTimeMajor) {
  auto sampler = prioritized();
  rb::ReplayBuffer buffer(storages.make(GetParam()), sampler);
  buffer.extend(steps_of(0, 2));
  // Elements (e, t) for t < 2 are 0..5 time-major, written at priority 1.
  at::Tensor sum = sampler->state().sum_leaves;
  EXPECT_TRUE(sum.narrow(0, 0, 6).allclose(at::full({6}, weight_of(1.0), at::kDouble)));
  EXPECT_TRUE(sum.narrow(0, 6, 6).eq(0).all().item<bool>());

  // (env 1, time 1) is element 1 * 3 + 1 = 4, as TorchRL numbers it.
  buffer.update_priority(pairs({1, 1}), at::tensor({5.0f}));
  sum = sampler->state().sum_leaves;
  EXPECT_NEAR(sum[4].item<double>(), weight_of(5.0), 1e-12);
  EXPECT_NEAR(sum[3].item<double>(), weight_of(1.0), 1e-12);
  EXPECT_EQ(sampler->max_priority(), 5.0);
  EXPECT_EQ(sampler->max_priority_slot(), 4);

  // New steps (a wrap: time 2, 3 then 0) come at the largest priority so far.
  buffer.extend(steps_of(2, 3));
  sum = sampler->state().sum_leaves;
  for (int64_t k : {0, 1, 2, 6, 7, 8, 9, 10, 11})
    EXPECT_NEAR(sum[k].item<double>(), weight_of(5.0), 1e-12) << k;
  EXPECT_NEAR(sum[3].item<double>(), weight_of(1.0), 1e-12);  // time 1 not rewritten
  // add(): one step of every env, at time 1.
  buffer.add(steps_of(5, 1).index({at::indexing::Slice(), 0}));
  sum = sampler->state().sum_leaves;
  for (int64_t k : {3, 4, 5}) EXPECT_NEAR(sum[k].item<double>(), weight_of(5.0), 1e-12) << k;
}

TEST_P(EnvTimePrioritized, SamplesFollowThePrioritiesWithImportanceWeights) {
  auto sampler = prioritized();
  rb::ReplayBuffer buffer(storages.make(GetParam()), sampler);
  buffer.manual_seed(11);
  buffer.extend(steps_of(0, 3));  // 9 elements, times 0..2
  // Element (env 2, time 1) = 5 gets 50x the priority of the others.
  const at::Tensor all = at::arange(9, at::kLong);
  buffer.update_priority(at::stack({all.remainder(kEnvs), all.div(kEnvs, "floor")}, 1),
                         at::where(all.eq(5), 50.0, 1.0).to(at::kFloat));
  const td::TensorDict s = buffer.sample(2000);
  const at::Tensor flat = check_rows(s, 3);
  EXPECT_TRUE(flat.lt(9).all().item<bool>());  // only filled elements
  const double heavy = flat.eq(5).sum().item<double>() / 2000.0;
  // Probability 50^0.7 / (50^0.7 + 8) ~ 0.59.
  const double p = weight_of(50) / (weight_of(50) + 8 * weight_of(1));
  EXPECT_NEAR(heavy, p, 0.05);
  // priority_weight = (w_i / min w)^-beta: 1 for the light ones, less for the heavy one.
  const at::Tensor w = s.get("priority_weight");
  ASSERT_EQ(w.scalar_type(), at::kFloat);
  const at::Tensor expected =
      at::where(flat.eq(5), std::pow(weight_of(50) / weight_of(1), -kBeta), 1.0).to(at::kFloat);
  EXPECT_TRUE(w.allclose(expected, 1e-5, 1e-6));
}

TEST_P(EnvTimePrioritized, UpdatesFromTheSampledTensorDict) {
  auto sampler = prioritized();
  rb::ReplayBuffer buffer(storages.make(GetParam()), sampler);
  buffer.manual_seed(2);
  buffer.extend(steps_of(0, 4));
  td::TensorDict s = buffer.sample(5);
  const at::Tensor flat = check_rows(s, 4);
  // td_error [5, 2] reduced by its max, as TorchRL's default reduction.
  const at::Tensor error = at::arange(10, at::kFloat).view({5, 2}).add(1);
  s.set("td_error", error);
  buffer.update_tensordict_priority(s);
  const at::Tensor sum = sampler->state().sum_leaves;
  // The last priority given to an element wins (an element may be drawn twice).
  std::map<int64_t, double> last;
  for (int64_t k = 0; k < 5; ++k) last[flat[k].item<int64_t>()] = 2.0 * k + 2;
  for (const auto& [element, priority] : last)
    EXPECT_NEAR(sum[element].item<double>(), weight_of(priority), 1e-9) << element;
}

TEST_P(EnvTimePrioritized, BadIndicesAreTypedErrorsAndChangeNothing) {
  auto sampler = prioritized();
  rb::ReplayBuffer buffer(storages.make(GetParam()), sampler);
  buffer.extend(steps_of(0, 2));
  const rb::PrioritizedSamplerState before = sampler->state();
  const auto unchanged = [&] {
    const rb::PrioritizedSamplerState now = sampler->state();
    EXPECT_TRUE(now.sum_leaves.equal(before.sum_leaves));
    EXPECT_TRUE(now.min_leaves.equal(before.min_leaves));
    EXPECT_EQ(sampler->max_priority_slot(), before.max_priority_slot);
  };
  // Flat (1-D) indices, or pairs of another width.
  EXPECT_THROW(buffer.update_priority(at::tensor({1, 2}, at::kLong), at::ones({2})),
               td::ShapeError);
  EXPECT_THROW(buffer.update_priority(at::zeros({2, 3}, at::kLong), at::ones({2})), td::ShapeError);
  // An env or a time out of range; the second pair only.
  EXPECT_THROW(buffer.update_priority(pairs({0, 0, 3, 0}), at::full({2}, 9.0)), td::IndexError);
  EXPECT_THROW(buffer.update_priority(pairs({0, 0, 1, kSteps}), at::full({2}, 9.0)),
               td::IndexError);
  EXPECT_THROW(buffer.update_priority(pairs({0, 0, -1, 1}), at::full({2}, 9.0)), td::IndexError);
  // Bad priorities: negative, NaN, a count that is not the pairs'.
  EXPECT_THROW(buffer.update_priority(pairs({0, 0, 1, 1}), at::tensor({9.0, -1.0})),
               td::ValueError);
  EXPECT_THROW(buffer.update_priority(pairs({0, 0}), at::tensor({NAN})), td::ValueError);
  EXPECT_THROW(buffer.update_priority(pairs({0, 0, 1, 1}), at::ones({3})), td::ShapeError);
  // A sampled tensordict without td_error.
  td::TensorDict s = buffer.sample(2);
  EXPECT_THROW(buffer.update_tensordict_priority(s), td::KeyError);
  unchanged();
  // A sampler of another capacity than envs * steps is refused.
  EXPECT_THROW(rb::ReplayBuffer(storages.make(GetParam()), prioritized(kSteps)), td::ValueError);
}

TEST_P(EnvTimePrioritized, CheckpointRoundTripsTreesAndDraws) {
  auto sampler = prioritized();
  rb::ReplayBuffer buffer(storages.make(GetParam()), sampler);
  buffer.extend(steps_of(0, 3));
  buffer.extend(steps_of(3, 3));  // wrapped: cursor 2
  const at::Tensor all = at::arange(12, at::kLong);
  buffer.update_priority(at::stack({all.remainder(kEnvs), all.div(kEnvs, "floor")}, 1),
                         all.remainder(5).add(1).to(at::kFloat));
  const fs::path dir = storages.dir("checkpoint");
  buffer.dumps(dir);

  auto other = prioritized();
  rb::ReplayBuffer loaded(storages.make("memory"), other);
  loaded.loads(dir);
  EXPECT_TRUE(other->state().sum_leaves.equal(sampler->state().sum_leaves));
  EXPECT_TRUE(other->state().min_leaves.equal(sampler->state().min_leaves));
  EXPECT_EQ(other->max_priority(), 5.0);
  EXPECT_EQ(other->max_priority_slot(), sampler->max_priority_slot());
  EXPECT_EQ(loaded.writer_state(), buffer.writer_state());
  EXPECT_TRUE(loaded.storage().get("id").equal(buffer.storage().get("id")));
  // The generator is saved too: both draw the same elements next.
  const td::TensorDict a = buffer.sample(16), b = loaded.sample(16);
  EXPECT_TRUE(a.get("index").equal(b.get("index")));
  EXPECT_TRUE(a.get("priority_weight").equal(b.get("priority_weight")));
  check_rows(b, 6);
}

namespace {

const std::vector<std::string> kStorageKinds = rb::test::env_storage_kinds();

}  // namespace

INSTANTIATE_TEST_SUITE_P(Storages, EnvTimePrioritized, ::testing::ValuesIn(kStorageKinds),
                         [](const auto& info) { return info.param; });

// ---- SliceSampler ---------------------------------------------------------------------

namespace {

// Each env's trajectories (id 100 e + t, done at each one's last step but the
// env's last trajectory's), as torchrl_slice_writer.py env_slice writes them.
struct EnvLayout {
  int64_t steps;                              // time steps per env
  std::vector<std::vector<int64_t>> lengths;  // per env
  int64_t written;                            // steps of every env written
  int64_t chunk;                              // steps per extend
};

td::TensorDict env_streams(const EnvLayout& layout) {
  const auto envs = static_cast<int64_t>(layout.lengths.size());
  const int64_t n = layout.written;
  at::Tensor traj = at::empty({envs, n}, at::kLong), done = at::empty({envs, n, 1}, at::kBool);
  for (int64_t e = 0; e < envs; ++e) {
    const std::vector<int64_t>& lengths = layout.lengths[static_cast<std::size_t>(e)];
    int64_t j = 0;
    for (std::size_t t = 0; t < lengths.size() && j < n; ++t)
      for (int64_t k = 0; k < lengths[t] && j < n; ++k, ++j) {
        traj[e][j] = 100 * e + static_cast<int64_t>(t);
        done[e][j][0] = k == lengths[t] - 1 && t + 1 < lengths.size();
      }
    EXPECT_EQ(j, n) << "env " << e << "'s trajectories are shorter than the steps written";
  }
  const at::Tensor id =
      at::arange(envs, at::kLong).mul(1000).unsqueeze(1) + at::arange(n, at::kLong).unsqueeze(0);
  const at::Tensor f = id.to(at::kFloat);
  return td::TensorDict({{"id", id},
                         {"obs", at::stack({f, -f}, -1)},
                         {"traj", traj},
                         {"next", td::TensorDict({{"done", done}}, {envs, n})}},
                        {envs, n});
}

rb::SliceSamplerOptions slice_options(int64_t slice_len, bool by_traj, bool strict = true) {
  rb::SliceSamplerOptions o;
  o.slice_len = slice_len;
  if (by_traj)
    o.traj_key = td::NestedKey("traj");
  else
    o.end_key = td::NestedKey{"next", "done"};
  o.strict_length = strict;
  return o;
}

rb::ReplayBuffer filled(Storages& storages, const std::string& kind, const EnvLayout& layout,
                        std::shared_ptr<rb::Sampler> sampler) {
  const auto envs = static_cast<int64_t>(layout.lengths.size());
  rb::ReplayBuffer buffer(storages.make(kind, envs, layout.steps), std::move(sampler));
  const td::TensorDict data = env_streams(layout);
  for (int64_t start = 0; start < layout.written; start += layout.chunk)
    buffer.extend(
        data.index({at::indexing::Slice(),
                    at::indexing::Slice(start, std::min(layout.written, start + layout.chunk))}));
  return buffer;
}

rb::StorageView view_of(const rb::ReplayBuffer& buffer, const td::TensorDictBase& storage,
                        int64_t envs, int64_t steps) {
  const rb::WriterState w = buffer.writer_state();
  return {&storage, buffer.size(), buffer.capacity(), (w.cursor + steps - 1) % steps, envs};
}

std::vector<int64_t> as_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous().view({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// One slice of a sample: its [env, time] pairs and flags.
struct EnvSlice {
  std::vector<std::vector<int64_t>> pairs;
  std::vector<int64_t> truncated, done, traj, id;
};

std::vector<EnvSlice> slices_of(const td::TensorDict& sample) {
  const std::vector<int64_t> index = as_vector(sample.get("index"));
  const std::vector<int64_t> truncated = as_vector(sample.get({"next", "truncated"}));
  const std::vector<int64_t> done = as_vector(sample.get({"next", "done"}));
  const std::vector<int64_t> traj = as_vector(sample.get("traj"));
  const std::vector<int64_t> id = as_vector(sample.get("id"));
  std::vector<EnvSlice> out;
  EnvSlice cur;
  for (std::size_t k = 0; k < truncated.size(); ++k) {
    cur.pairs.push_back({index[2 * k], index[2 * k + 1]});
    cur.truncated.push_back(truncated[k]);
    cur.done.push_back(done[k]);
    cur.traj.push_back(traj[k]);
    cur.id.push_back(id[k]);
    if (truncated[k]) {
      out.push_back(cur);
      cur = EnvSlice{};
    }
  }
  EXPECT_TRUE(cur.pairs.empty()) << "the last step of the sample is not truncated";
  return out;
}

// 2 envs of 8 steps, 14 steps written by extends of 4: wrapped, the newest
// time step 5.
const EnvLayout kWrapped{8, {{3, 2, 4, 3, 2}, {5, 1, 3, 6}}, 14, 4};

class EnvTimeSlices : public ::testing::TestWithParam<std::string> {
 protected:
  Storages storages;
};

}  // namespace

TEST_P(EnvTimeSlices, TrajectoriesAreFoundWithinEachEnvAsHandComputed) {
  // Env 0 holds steps 8..13 at times 0..5 and steps 6, 7 at times 6, 7:
  // trajectories [2, 3, 3, 3, 4, 4, 2, 2] by time; trajectory 2 runs from
  // time 6 on to time 0, trajectory 4 ends at the newest time 5. Env 1
  // (steps 8..13, then 6, 7): [2, 3, 3, 3, 3, 3, 2, 2]; trajectory 2 runs
  // from time 6 on to time 0, trajectory 3 is cut at the newest time 5.
  const std::vector<rb::Trajectory> expected = {
      {6, 0, 3, 0}, {1, 3, 3, 0}, {4, 5, 2, 0}, {6, 0, 3, 1}, {1, 5, 5, 1}};
  for (bool by_traj : {true, false}) {
    auto sampler = std::make_shared<rb::SliceSampler>(slice_options(2, by_traj));
    rb::ReplayBuffer buffer = filled(storages, GetParam(), kWrapped, sampler);
    const td::TensorDictBase storage = buffer.storage();
    EXPECT_EQ(sampler->trajectories(view_of(buffer, storage, 2, 8)), expected) << by_traj;
  }
}

TEST_P(EnvTimeSlices, EverySliceRunsAlongTimeInOneEnvAndOneTrajectory) {
  for (bool by_traj : {true, false}) {
    auto sampler = std::make_shared<rb::SliceSampler>(slice_options(3, by_traj));
    rb::ReplayBuffer buffer = filled(storages, GetParam(), kWrapped, sampler);
    buffer.manual_seed(5);
    std::set<std::vector<std::vector<int64_t>>> distinct;
    for (int k = 0; k < 100; ++k) {
      const td::TensorDict s = buffer.sample(12);
      ASSERT_EQ(s.batch_size(), std::vector<int64_t>{12});
      check_rows(s, kWrapped.written, 2, 8);
      for (const EnvSlice& slice : slices_of(s)) {
        ASSERT_EQ(slice.pairs.size(), 3u);
        for (std::size_t i = 0; i < 3; ++i) {
          EXPECT_EQ(slice.pairs[i][0], slice.pairs[0][0]) << "a slice crosses envs";
          EXPECT_EQ(slice.pairs[i][1], (slice.pairs[0][1] + i) % 8) << "not consecutive in time";
          EXPECT_EQ(slice.traj[i], slice.traj[0]) << "a slice crosses trajectories";
          EXPECT_EQ(slice.id[i], slice.id[0] + static_cast<int64_t>(i)) << "not the env's steps";
          EXPECT_EQ(slice.truncated[i], i == 2);
        }
        distinct.insert(slice.pairs);
      }
    }
    // Trajectories of at least 3 steps: env 0's two of 3 steps (one start
    // each), env 1's of 3 (one) and of 5 (three): 6 distinct slices, those
    // of times 6, 7, 0 wrapping within their env.
    EXPECT_EQ(distinct.size(), 6u) << by_traj;
    EXPECT_TRUE(distinct.count({{0, 6}, {0, 7}, {0, 0}})) << by_traj;
    EXPECT_TRUE(distinct.count({{1, 6}, {1, 7}, {1, 0}})) << by_traj;
  }
}

TEST_P(EnvTimeSlices, WithoutReplacementDrawsEachTrajectoryOncePerEpoch) {
  auto sampler = std::make_shared<rb::SliceSamplerWithoutReplacement>(
      slice_options(1, true, /*strict=*/false));
  rb::ReplayBuffer buffer = filled(storages, GetParam(), kWrapped, sampler);
  buffer.manual_seed(4);
  std::multiset<int64_t> seen;
  for (int k = 0; k < 5; ++k)
    for (const EnvSlice& slice : slices_of(buffer.sample(1))) seen.insert(slice.traj[0]);
  EXPECT_EQ(seen, (std::multiset<int64_t>{2, 3, 4, 102, 103}));
}

TEST_P(EnvTimeSlices, SignalsOfAnotherShapeAreTypedErrors) {
  auto sampler = std::make_shared<rb::SliceSampler>(slice_options(2, true));
  rb::ReplayBuffer buffer = filled(storages, GetParam(), kWrapped, sampler);
  // "obs" holds two numbers per element: not a trajectory id.
  rb::SliceSamplerOptions o = slice_options(2, true);
  o.traj_key = td::NestedKey("obs");
  rb::ReplayBuffer by_obs(storages.make(GetParam(), 2, 8), std::make_shared<rb::SliceSampler>(o));
  by_obs.extend(env_streams(kWrapped));
  EXPECT_THROW(by_obs.sample(4), td::ShapeError);
  o.traj_key = td::NestedKey("missing");
  rb::ReplayBuffer missing(storages.make(GetParam(), 2, 8), std::make_shared<rb::SliceSampler>(o));
  missing.extend(env_streams(kWrapped));
  EXPECT_THROW(missing.sample(4), td::KeyError);
  // A slice longer than the time steps of one env can never fit.
  EXPECT_THROW(rb::ReplayBuffer(storages.make(GetParam(), 2, 8),
                                std::make_shared<rb::SliceSampler>(slice_options(9, true))),
               td::ValueError);
  EXPECT_THROW(buffer.sample(5), td::ValueError);  // not a multiple of slice_len
}

INSTANTIATE_TEST_SUITE_P(Storages, EnvTimeSlices, ::testing::ValuesIn(kStorageKinds),
                         [](const auto& info) { return info.param; });

namespace {

using EnvTorchRLCase = rb::test::SliceCase<EnvLayout>;
using rb::test::join;
using rb::test::span_name;

class EnvSlicesAgainstTorchRL : public ::testing::TestWithParam<EnvTorchRLCase> {};

}  // namespace

TEST_P(EnvSlicesAgainstTorchRL, SameTrajectoriesSameSlices) {
  const EnvTorchRLCase c = GetParam();
  std::string lengths;
  for (const auto& env : c.layout.lengths) lengths += (lengths.empty() ? "" : "/") + join(env);
  const json torchrl = rb::test::run_torchrl(
      "env_slice --steps " + std::to_string(c.layout.steps) + " --lengths " + lengths +
      " --written " + std::to_string(c.layout.written) + " --chunk " +
      std::to_string(c.layout.chunk) + " --slice-len " + std::to_string(c.slice_len) +
      " --signal " + (c.by_traj ? "traj" : "end") + " --strict " + (c.strict ? "1" : "0") +
      " --span-left " + std::to_string(c.span_left) + " --span-right " +
      std::to_string(c.span_right) + " --pad " + (c.pad ? "1" : "0") + " --samples 400 --seed 1");
  const auto envs = static_cast<int64_t>(c.layout.lengths.size());
  Storages storages;
  rb::SliceSamplerOptions o = slice_options(c.slice_len, c.by_traj, c.strict);
  o.span_left = c.span_left;
  o.span_right = c.span_right;
  o.pad_output = c.pad;
  auto sampler = std::make_shared<rb::SliceSampler>(o);
  rb::ReplayBuffer buffer = filled(storages, "memory", c.layout, sampler);
  const td::TensorDictBase storage = buffer.storage();
  json found = json::array();
  for (const rb::Trajectory& t :
       sampler->trajectories(view_of(buffer, storage, envs, c.layout.steps)))
    found.push_back(json::array({t.env, t.start, t.stop, t.length}));
  EXPECT_EQ(found, torchrl["trajectories"]);  // the same order too: env by env, by stop

  buffer.manual_seed(1);
  std::map<std::vector<std::vector<int64_t>>, json> slices;
  auto flags = [](const std::vector<int64_t>& v) {
    json out = json::array();
    for (int64_t x : v) out.push_back(x != 0);
    return out;
  };
  for (int k = 0; k < 400; ++k) {
    const td::TensorDict sample = buffer.sample(4 * c.slice_len);
    if (c.pad && sample.contains(td::NestedKey{"collector", "mask"})) {
      // Padded: every slice is slice_len steps, listed with its mask (and
      // keyed by its pairs then its mask, as the Python side keys them).
      const std::vector<int64_t> index = as_vector(sample.get("index")),
                                 truncated = as_vector(sample.get({"next", "truncated"})),
                                 done = as_vector(sample.get({"next", "done"})),
                                 mask = as_vector(sample.get({"collector", "mask"}));
      for (int64_t begin = 0; begin < 4 * c.slice_len; begin += c.slice_len) {
        std::vector<std::vector<int64_t>> key;
        json pairs = json::array();
        for (int64_t p = begin; p < begin + c.slice_len; ++p) {
          key.push_back({index[2 * p], index[2 * p + 1]});
          pairs.push_back(key.back());
        }
        const auto cut = [&](const std::vector<int64_t>& v) {
          return std::vector<int64_t>(v.begin() + begin, v.begin() + begin + c.slice_len);
        };
        for (int64_t m : cut(mask)) key.push_back({m});
        slices[key] =
            json::array({pairs, flags(cut(truncated)), flags(cut(done)), flags(cut(mask))});
      }
      continue;
    }
    for (const EnvSlice& s : slices_of(sample))
      slices[s.pairs] = json::array({s.pairs, flags(s.truncated), flags(s.done)});
  }
  json mine = json::array();
  for (const auto& [key, entry] : slices) mine.push_back(entry);
  EXPECT_EQ(mine, torchrl["slices"]);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, EnvSlicesAgainstTorchRL,
    ::testing::Values(
        EnvTorchRLCase{kWrapped, 2, false, true}, EnvTorchRLCase{kWrapped, 3, true, true},
        // not full (7 of 10 steps), 3 envs, short trajectories whole
        EnvTorchRLCase{{10, {{3, 2, 4, 3, 2}, {5, 1, 3, 6}, {1, 1, 7}}, 7, 4}, 3, true, false},
        EnvTorchRLCase{{10, {{3, 2, 4, 3, 2}, {5, 1, 3, 6}, {1, 1, 7}}, 7, 4}, 2, false, true},
        // wrapped twice over 6 steps, extends of 5
        EnvTorchRLCase{
            {6, {{3, 2, 4, 3, 2, 5}, {5, 1, 3, 6, 4}, {1, 1, 7, 9}}, 17, 5}, 2, true, false},
        // spans (True both sides; steps) and pad_output
        EnvTorchRLCase{kWrapped, 3, true, true, -1, -1},
        EnvTorchRLCase{kWrapped, 3, false, true, 1, 2},
        EnvTorchRLCase{kWrapped, 3, true, false, 0, 0, true},
        EnvTorchRLCase{
            {10, {{3, 2, 4, 3, 2}, {5, 1, 3, 6}, {1, 1, 7}}, 7, 4}, 3, false, false, -1, -1, true}),
    [](const ::testing::TestParamInfo<EnvTorchRLCase>& info) {
      const EnvTorchRLCase& c = info.param;
      return "envs" + std::to_string(c.layout.lengths.size()) + "_steps" +
             std::to_string(c.layout.steps) + "_written" + std::to_string(c.layout.written) +
             "_len" + std::to_string(c.slice_len) + (c.by_traj ? "_ids" : "_ends") +
             (c.strict ? "_strict" : "_loose") +
             (c.span_left || c.span_right
                  ? "_span" + span_name(c.span_left) + "_" + span_name(c.span_right)
                  : "") +
             (c.pad ? "_pad" : "");
    });

// ---- lazily made [env, time] storages ----------------------------------------------------

namespace {

class LazyEnvTime : public ::testing::TestWithParam<std::string> {
 protected:
  Storages storages;
  // ReplayBuffer(capacity, ..., ndim = 2) in the storage kind of the test.
  rb::ReplayBuffer lazy(int64_t capacity, std::shared_ptr<rb::Sampler> sampler = nullptr) {
    auto [storage, options] = rb::test::lazy_storage(GetParam());
    return rb::ReplayBuffer(capacity, std::move(sampler), storage, options, nullptr, 2);
  }
};

}  // namespace

TEST_P(LazyEnvTime, FirstExtendMakesEnvsTimesCeilCapacityOverEnvs) {
  rb::ReplayBuffer buffer = lazy(10);
  EXPECT_FALSE(buffer.storage().defined());
  buffer.extend(steps_of(0, 2));
  // As TorchRL's LazyTensorStorage(10, ndim=2) after an extend of 3 envs:
  // [3, ceil(10 / 3)] here ([4, 3] there, time-major), max_size 12.
  const td::TensorDictBase storage = buffer.storage();
  ASSERT_TRUE(storage.defined());
  EXPECT_EQ(storage.batch_size(), (std::vector<int64_t>{kEnvs, 4}));
  EXPECT_EQ(buffer.capacity(), 12);
  EXPECT_EQ(buffer.size(), 6);
  buffer.extend(steps_of(2, 3));  // wraps at time 4
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{1, 5}));
  EXPECT_EQ(buffer.size(), 12);
  buffer.manual_seed(1);
  const at::Tensor flat = check_rows(buffer.sample(64), 5, kEnvs, 4);
  EXPECT_TRUE(flat.lt(12).all().item<bool>());
  // Afterwards it is an [env, time] buffer like any other: [envs] steps only.
  EXPECT_THROW(buffer.extend(steps_of(0, 2, kEnvs + 1)), td::ShapeError);
}

TEST_P(LazyEnvTime, FirstAddMakesTheStorageToo) {
  rb::ReplayBuffer buffer = lazy(2);  // fewer than the envs: one time step
  EXPECT_EQ(buffer.add(steps_of(0, 1).index({at::indexing::Slice(), 0})), 0);
  EXPECT_EQ(buffer.storage().batch_size(), (std::vector<int64_t>{kEnvs, 1}));
  EXPECT_EQ(buffer.capacity(), kEnvs);
  EXPECT_EQ(buffer.add(steps_of(1, 1).index({at::indexing::Slice(), 0})), 0);
  check_rows(buffer.sample(8), 2, kEnvs, 1);
}

TEST_P(LazyEnvTime, SamplersAreCheckedAgainstTheStorageMadeBeforeItIs) {
  // A first write that is not [envs, t]: nothing is made.
  rb::ReplayBuffer buffer = lazy(12, prioritized(12));
  EXPECT_THROW(buffer.extend(steps_of(0, 2).index({0})), td::ShapeError);
  EXPECT_FALSE(buffer.storage().defined());
  EXPECT_EQ(buffer.size(), 0);
  // 12 elements of 3 envs: one priority each, as a storage-made buffer.
  buffer.extend(steps_of(0, 2));
  buffer.update_priority(pairs({2, 1}), at::tensor({4.0f}));
  auto* sampler = dynamic_cast<rb::PrioritizedSampler*>(buffer.sampler().get());
  EXPECT_EQ(sampler->max_priority_slot(), 1 * kEnvs + 2);

  // 10 priorities for the 12 elements 3 envs make: refused, nothing made.
  rb::ReplayBuffer wrong = lazy(10, prioritized(10));
  EXPECT_THROW(wrong.extend(steps_of(0, 2)), td::ValueError);
  EXPECT_FALSE(wrong.storage().defined());
  // A slice longer than the 4 time steps of 3 envs in 12.
  rb::ReplayBuffer long_slices =
      lazy(12, std::make_shared<rb::SliceSampler>(slice_options(5, true)));
  EXPECT_THROW(long_slices.extend(steps_of(0, 2)), td::ValueError);
  EXPECT_FALSE(long_slices.storage().defined());
  // Slices of a lazily made storage stay within an env.
  rb::ReplayBuffer slices = lazy(12, std::make_shared<rb::SliceSampler>(slice_options(2, false)));
  slices.extend(steps_of(0, 4));
  for (const EnvSlice& s : slices_of(slices.sample(8))) {
    EXPECT_EQ(s.pairs[0][0], s.pairs[1][0]);
    EXPECT_EQ(s.id[1], s.id[0] + 1);
  }
}

TEST_P(LazyEnvTime, ACheckpointGivesTheStorageItsShape) {
  rb::ReplayBuffer written = lazy(12, prioritized(12));
  written.extend(steps_of(0, 5));
  written.update_priority(pairs({0, 1, 2, 3}), at::tensor({2.0f, 7.0f}));
  const fs::path dir = storages.dir("checkpoint");
  written.dumps(dir);

  rb::ReplayBuffer loaded = lazy(12, prioritized(12));
  loaded.loads(dir);
  ASSERT_TRUE(loaded.storage().defined());
  EXPECT_EQ(loaded.storage().batch_size(), (std::vector<int64_t>{kEnvs, 4}));
  EXPECT_TRUE(loaded.storage().get("id").equal(written.storage().get("id")));
  EXPECT_EQ(loaded.writer_state(), written.writer_state());
  auto* a = dynamic_cast<rb::PrioritizedSampler*>(written.sampler().get());
  auto* b = dynamic_cast<rb::PrioritizedSampler*>(loaded.sampler().get());
  EXPECT_TRUE(a->state().sum_leaves.equal(b->state().sum_leaves));
  check_rows(loaded.sample(16), 5);

  // A capacity that would make other time steps (20 / 3 -> 7), or a 1-D
  // buffer: refused, nothing made.
  rb::ReplayBuffer other = lazy(20, prioritized(21));
  EXPECT_THROW(other.loads(dir), td::ValueError);
  EXPECT_FALSE(other.storage().defined());
  EXPECT_EQ(other.capacity(), 20);
  rb::ReplayBuffer flat(12, prioritized(12));
  EXPECT_THROW(flat.loads(dir), td::FormatError);
}

namespace {
// Every lazily made storage but shared memory, whose segments these tests
// would have to unlink one by one (MaxValueWriterOver and SliceSamplerOver
// make it lazily).
std::vector<std::string> lazy_kinds() {
  std::vector<std::string> kinds = rb::test::lazy_storage_kinds();
  kinds.erase(std::remove(kinds.begin(), kinds.end(), "shared"), kinds.end());
  return kinds;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Storages, LazyEnvTime, ::testing::ValuesIn(lazy_kinds()),
                         [](const auto& info) { return info.param; });

TEST(LazyEnvTimeSetup, NdimAndWritersAreChecked) {
  EXPECT_THROW(rb::ReplayBuffer(12, nullptr, "memory", {}, nullptr, 3), td::ValueError);
  EXPECT_THROW(rb::ReplayBuffer(12, nullptr, "memory", {}, nullptr, 0), td::ValueError);
  EXPECT_THROW(rb::ReplayBuffer(12, nullptr, "memory", {},
                                std::make_shared<rb::TensorDictMaxValueWriter>("id"), 2),
               td::UnsupportedError);
}
