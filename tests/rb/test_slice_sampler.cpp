// SliceSampler through a ReplayBuffer: the trajectories found in hand-built
// layouts (trajectory ids and end flags, a buffer not yet full, one wrapped
// with a trajectory running past the last row), every sampled slice checked
// (consecutive rows of one trajectory, truncated at its last step, done and
// is_init flags), strict and non-strict lengths, bad input as typed errors,
// the (empty) checkpoint state; and the same layouts in the real TorchRL (run
// in a child process): the same trajectories and the same set of slices.
// The sampled slices are checked over the Redis stores too
// (rb/redis_storages.h).
#include <tensordict/errors.h>
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/rb/slice_sampler.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rb/redis_storages.h"
#include "rb/torchrl_child.h"

namespace fs = std::filesystem;
namespace rb = tensordict::rb;
namespace td = tensordict;
using json = nlohmann::json;

namespace {

struct Layout {
  int64_t capacity;
  std::vector<int64_t> lengths;  // trajectory t has id t
  int64_t chunk;                 // steps per extend
};

// The steps of torchrl_slice_writer.py's run_slice: "traj" ids, "id" the
// step's number, ("next", "done") at each trajectory's last step but the
// last trajectory's; `is_init` adds the flag at each trajectory's first step.
td::TensorDict steps(const std::vector<int64_t>& lengths, bool is_init = false) {
  std::vector<int64_t> traj;
  std::vector<uint8_t> done, init;
  for (std::size_t t = 0; t < lengths.size(); ++t)
    for (int64_t k = 0; k < lengths[t]; ++k) {
      traj.push_back(static_cast<int64_t>(t));
      done.push_back(k == lengths[t] - 1 && t + 1 < lengths.size());
      init.push_back(k == 0);
    }
  const auto n = static_cast<int64_t>(traj.size());
  td::TensorDict out(
      {{"traj", at::tensor(traj)},
       {"id", at::arange(n, at::kLong)},
       {"next", td::TensorDict({{"done", at::tensor(done).to(at::kBool).unsqueeze(-1)}}, {n})}},
      {n});
  if (is_init) out.set("is_init", at::tensor(init).to(at::kBool).unsqueeze(-1));
  return out;
}

rb::SliceSamplerOptions options(int64_t slice_len, bool by_traj, bool strict = true) {
  rb::SliceSamplerOptions o;
  o.slice_len = slice_len;
  if (by_traj)
    o.traj_key = td::NestedKey("traj");
  else
    o.end_key = td::NestedKey{"next", "done"};
  o.strict_length = strict;
  return o;
}

// Writes `data` into `buffer` by extends of `chunk` rows (the last shorter).
void extend_in_chunks(rb::ReplayBuffer& buffer, const td::TensorDictBase& data, int64_t chunk) {
  const int64_t n = data.batch_size()[0];
  for (int64_t start = 0; start < n; start += chunk)
    buffer.extend(data.index({at::indexing::Slice(start, std::min(n, start + chunk))}));
}

rb::ReplayBuffer filled(const Layout& layout, const rb::SliceSamplerOptions& o,
                        bool is_init = false, const std::string& kind = "memory") {
  const auto [storage, storage_options] = rb::test::lazy_storage(kind);
  rb::ReplayBuffer buffer(layout.capacity, std::make_shared<rb::SliceSampler>(o), storage,
                          storage_options);
  extend_in_chunks(buffer, steps(layout.lengths, is_init), layout.chunk);
  return buffer;
}

rb::StorageView view_of(const rb::ReplayBuffer& buffer, const td::TensorDictBase& storage) {
  const rb::WriterState w = buffer.writer_state();
  return {&storage, buffer.size(), buffer.capacity(),
          (w.cursor + buffer.capacity() - 1) % buffer.capacity()};
}

// The trajectories the buffer's SliceSampler finds in its storage.
std::vector<rb::Trajectory> trajectories_of(const rb::ReplayBuffer& buffer) {
  const td::TensorDictBase storage = buffer.storage();
  return dynamic_cast<rb::SliceSampler&>(*buffer.sampler()).trajectories(view_of(buffer, storage));
}

std::vector<int64_t> as_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous().view({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// One slice of a sample: its rows and the flags the sample gave them.
struct Slice {
  std::vector<int64_t> rows, truncated, done;
  bool operator<(const Slice& o) const { return rows < o.rows; }
};

// The slices of `sample`, cut after each truncated step.
std::vector<Slice> slices_of(const td::TensorDict& sample) {
  const std::vector<int64_t> index = as_vector(sample.get("index"));
  const std::vector<int64_t> truncated = as_vector(sample.get({"next", "truncated"}));
  const std::vector<int64_t> done = as_vector(sample.get({"next", "done"}));
  std::vector<Slice> out;
  Slice cur;
  for (std::size_t k = 0; k < index.size(); ++k) {
    cur.rows.push_back(index[k]);
    cur.truncated.push_back(truncated[k]);
    cur.done.push_back(done[k]);
    if (truncated[k]) {
      out.push_back(cur);
      cur = Slice{};
    }
  }
  EXPECT_TRUE(cur.rows.empty()) << "the last step of the sample is not truncated";
  return out;
}

const Layout kWrapped{10, {3, 2, 4, 3, 2}, 4};  // 14 steps in 10 rows

TEST(SliceSampler, FindsTrajectoriesInAWrappedBufferAsHandComputed) {
  // Rows after the wrap: traj [3, 3, 4, 4, 1, 2, 2, 2, 2, 3], newest row 3.
  // Trajectory 3 runs from row 9 on to row 1; trajectory 1 keeps one step.
  const std::vector<rb::Trajectory> expected = {{9, 1, 3}, {2, 3, 2}, {4, 4, 1}, {5, 8, 4}};
  for (bool by_traj : {true, false}) {
    // From the done flags the same: done at rows 1 (trajectory 3), 4 (1) and
    // 8 (2); the newest row 3 ends trajectory 4, still running.
    EXPECT_EQ(trajectories_of(filled(kWrapped, options(2, by_traj))), expected) << by_traj;
  }
}

// Over every storage the buffer makes at the first write.
class SliceSamplerOver : public ::testing::TestWithParam<std::string> {};

TEST_P(SliceSamplerOver, EverySampledSliceIsOneTrajectoryInOrderAndMarked) {
  for (bool by_traj : {true, false}) {
    rb::ReplayBuffer buffer = filled(kWrapped, options(2, by_traj), /*is_init=*/true, GetParam());
    const rb::test::ReleaseSharedStorage release(buffer);
    buffer.manual_seed(3);
    const td::TensorDictBase storage = buffer.storage();
    const std::vector<int64_t> traj = as_vector(storage.get("traj"));
    const std::vector<int64_t> stored_done = as_vector(storage.get({"next", "done"}));
    std::set<std::vector<int64_t>> seen;
    for (int k = 0; k < 200; ++k) {
      const td::TensorDict s = buffer.sample(8);
      ASSERT_EQ(s.batch_size()[0], 8);
      // is_init: the stored flag or'ed with each slice's first step.
      const std::vector<int64_t> init = as_vector(s.get("is_init"));
      const std::vector<int64_t> index = as_vector(s.get("index"));
      for (std::size_t p = 0; p < index.size(); p += 2) {
        EXPECT_EQ(init[p], 1);
        EXPECT_EQ(init[p + 1], as_vector(storage.get("is_init"))[index[p + 1]]);
      }
      const std::vector<Slice> slices = slices_of(s);
      ASSERT_EQ(slices.size(), 4u);
      for (const Slice& slice : slices) {
        ASSERT_EQ(slice.rows.size(), 2u);
        EXPECT_EQ(slice.rows[1], (slice.rows[0] + 1) % 10) << "not consecutive";
        EXPECT_EQ(traj[slice.rows[0]], traj[slice.rows[1]]) << "crosses trajectories";
        EXPECT_NE(slice.rows[0], 3) << "runs past the newest row";
        EXPECT_EQ(slice.truncated, (std::vector<int64_t>{0, 1}));
        EXPECT_EQ(slice.done, (std::vector<int64_t>{stored_done[slice.rows[0]], 1}));
        seen.insert(slice.rows);
      }
    }
    // Every window of two steps: trajectory 3 (9-0, 0-1), 4 (2-3), 2 (5-6, 6-7, 7-8).
    EXPECT_EQ(seen,
              (std::set<std::vector<int64_t>>{{9, 0}, {0, 1}, {2, 3}, {5, 6}, {6, 7}, {7, 8}}));
  }
}

INSTANTIATE_TEST_SUITE_P(Storages, SliceSamplerOver,
                         ::testing::ValuesIn(rb::test::lazy_storage_kinds()),
                         [](const auto& info) { return info.param; });

TEST(SliceSampler, ShortTrajectoriesStrictOrWhole) {
  // Not full: 3 + 1 + 4 + 3 = 11 steps in 12 rows; slices of 3.
  const Layout layout{12, {3, 1, 4, 3}, 5};
  rb::ReplayBuffer strict = filled(layout, options(3, false));
  strict.manual_seed(5);
  for (int k = 0; k < 50; ++k)
    for (const Slice& s : slices_of(strict.sample(6))) EXPECT_EQ(s.rows.size(), 3u);

  rb::ReplayBuffer loose = filled(layout, options(3, false, /*strict=*/false));
  loose.manual_seed(5);
  std::set<std::vector<int64_t>> seen;
  for (int k = 0; k < 200; ++k) {
    const td::TensorDict s = loose.sample(6);
    int64_t total = 0;
    for (const Slice& slice : slices_of(s)) {
      seen.insert(slice.rows);
      total += static_cast<int64_t>(slice.rows.size());
    }
    EXPECT_EQ(s.batch_size()[0], total);  // shorter when the one-step trajectory is drawn
  }
  EXPECT_TRUE(seen.count({3})) << "the one-step trajectory is never sampled whole";

  // num_slices instead of slice_len: 2 slices of batch / 2 steps.
  rb::SliceSamplerOptions by_count;
  by_count.num_slices = 2;
  by_count.end_key = td::NestedKey{"next", "done"};
  rb::ReplayBuffer counted = filled(layout, by_count);
  for (const Slice& s : slices_of(counted.sample(8))) EXPECT_EQ(s.rows.size(), 4u);
  EXPECT_THROW(counted.sample(10), td::ValueError);  // slices of 5: the longest has 4
  EXPECT_THROW(counted.sample(7), td::ValueError);   // not a multiple of num_slices
}

TEST(SliceSampler, BadInputIsATypedError) {
  EXPECT_THROW(rb::SliceSampler(rb::SliceSamplerOptions{}), td::ValueError);
  rb::SliceSamplerOptions both;
  both.slice_len = 2;
  both.num_slices = 2;
  EXPECT_THROW(rb::SliceSampler{both}, td::ValueError);
  // A slice longer than the buffer can never be drawn.
  EXPECT_THROW(rb::ReplayBuffer(4, std::make_shared<rb::SliceSampler>(options(5, true))),
               td::ValueError);

  rb::ReplayBuffer buffer = filled(kWrapped, options(2, true));
  EXPECT_THROW(buffer.sample(7), td::ValueError);  // not a multiple of slice_len
  rb::ReplayBuffer long_slices = filled(kWrapped, options(5, true));
  try {
    long_slices.sample(10);
    FAIL() << "no trajectory has 5 steps, yet a sample was drawn";
  } catch (const td::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("longest has 4"), std::string::npos) << e.what();
  }

  rb::SliceSamplerOptions missing = options(2, true);
  missing.traj_key = td::NestedKey{"collector", "traj_ids"};
  rb::ReplayBuffer no_key = filled(kWrapped, missing);
  try {
    no_key.sample(4);
    FAIL() << "sampled without the trajectory key";
  } catch (const td::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("('collector', 'traj_ids')"), std::string::npos)
        << e.what();
  }
  rb::SliceSamplerOptions float_end = options(2, false);
  float_end.end_key = td::NestedKey("reward");
  rb::ReplayBuffer floats(4, std::make_shared<rb::SliceSampler>(float_end));
  floats.extend(td::TensorDict({{"reward", at::zeros({4})}}, {4}));
  EXPECT_THROW(floats.sample(2), td::TypeError);
  rb::SliceSamplerOptions wide = options(2, true);
  rb::ReplayBuffer wide_ids(4, std::make_shared<rb::SliceSampler>(wide));
  wide_ids.extend(td::TensorDict({{"traj", at::zeros({4, 2}, at::kLong)}}, {4}));
  EXPECT_THROW(wide_ids.sample(2), td::ShapeError);
  // Neither key given and none of TorchRL's defaults stored.
  rb::SliceSamplerOptions neither;
  neither.slice_len = 2;
  rb::ReplayBuffer bare(4, std::make_shared<rb::SliceSampler>(neither));
  bare.extend(td::TensorDict({{"obs", at::zeros({4})}}, {4}));
  EXPECT_THROW(bare.sample(2), td::KeyError);
  // Alone, the sampler has no storage to read.
  EXPECT_THROW(rb::SliceSampler(options(2, true)).sample(10, 2, nullptr), td::UnsupportedError);
}

TEST(SliceSampler, SpanAndPadOutputOptionsAreChecked) {
  rb::SliceSamplerOptions padded_strict = options(3, true, /*strict=*/true);
  padded_strict.pad_output = true;
  EXPECT_THROW(rb::SliceSampler{padded_strict}, td::ValueError);
  rb::SliceSamplerOptions negative = options(3, true);
  negative.span_left = -2;
  EXPECT_THROW(rb::SliceSampler{negative}, td::ValueError);
  rb::SliceSamplerOptions wide = options(3, true);
  wide.span_right = 3;  // not below the slice length
  rb::ReplayBuffer buffer = filled(kWrapped, wide);
  EXPECT_THROW(buffer.sample(6), td::ValueError);
}

TEST(SliceSampler, SpannedSlicesAreCutAtTheTrajectoryEdges) {
  rb::SliceSamplerOptions o = options(3, true);
  o.span_left = o.span_right = rb::SliceSamplerOptions::kWholeSpan;
  rb::ReplayBuffer buffer = filled(kWrapped, o);
  buffer.manual_seed(4);
  const std::vector<int64_t> traj = as_vector(buffer.storage().get("traj"));
  std::set<std::size_t> lengths;
  for (int k = 0; k < 200; ++k)
    for (const Slice& s : slices_of(buffer.sample(12))) {
      lengths.insert(s.rows.size());
      for (std::size_t i = 1; i < s.rows.size(); ++i) {
        EXPECT_EQ(s.rows[i], (s.rows[i - 1] + 1) % 10);  // consecutive rows
        EXPECT_EQ(traj[s.rows[i]], traj[s.rows[0]]);     // of one trajectory
      }
    }
  // Cut slices of 1 and 2 steps beside whole ones.
  EXPECT_EQ(lengths, (std::set<std::size_t>{1, 2, 3}));
}

TEST(SliceSampler, PadOutputRepeatsTheLastStepAndMasksIt) {
  rb::SliceSamplerOptions o = options(3, true, /*strict=*/false);
  o.pad_output = true;
  rb::ReplayBuffer buffer = filled({12, {3, 1, 4, 3}, 5}, o);
  buffer.manual_seed(2);
  bool saw_padding = false;
  for (int k = 0; k < 100; ++k) {
    const td::TensorDict s = buffer.sample(12);
    ASSERT_EQ(s.batch_size()[0], 12);  // always the batch asked for
    const std::vector<int64_t> rows = as_vector(s.get("index"));
    const std::vector<int64_t> mask = as_vector(s.get({"collector", "mask"}));
    const std::vector<int64_t> truncated = as_vector(s.get({"next", "truncated"}));
    for (int64_t begin = 0; begin < 12; begin += 3) {
      int64_t real = 0;
      while (real < 3 && mask[begin + real]) ++real;
      for (int64_t i = real; i < 3; ++i) {
        EXPECT_FALSE(mask[begin + i]);  // real steps first, then padding
        EXPECT_EQ(rows[begin + i], rows[begin + real - 1]);
        saw_padding = true;
      }
      EXPECT_TRUE(truncated[begin + real - 1]);  // the last real step
    }
  }
  EXPECT_TRUE(saw_padding);  // the one-step trajectory was drawn
  // No padding needed (every trajectory long enough): no mask, as TorchRL.
  rb::ReplayBuffer long_enough = filled({12, {3, 4, 3}, 5}, o);
  EXPECT_FALSE(long_enough.sample(6).contains(td::NestedKey{"collector", "mask"}));
}

TEST(SliceSampler, EndKeysAreOredAndMissingOnesSkipped) {
  // The done flags of kWrapped split over two entries: the same trajectories.
  const std::vector<rb::Trajectory> want = trajectories_of(filled(kWrapped, options(2, false)));

  rb::SliceSamplerOptions o = options(2, false);
  o.end_key.reset();
  o.end_keys = {td::NestedKey{"next", "done"}, td::NestedKey{"next", "stop"},
                td::NestedKey{"next", "absent"}};
  td::TensorDict data = steps(kWrapped.lengths);
  const at::Tensor done = data.get({"next", "done"});
  const at::Tensor odd = at::arange(done.size(0), at::kLong).remainder(2).eq(1).unsqueeze(-1);
  data.set({"next", "done"}, done.logical_and(odd));
  data.set({"next", "stop"}, done.logical_and(odd.logical_not()));
  ASSERT_TRUE(data.get({"next", "done"}).any().item<bool>());
  ASSERT_TRUE(data.get({"next", "stop"}).any().item<bool>());
  rb::ReplayBuffer split(kWrapped.capacity, std::make_shared<rb::SliceSampler>(o));
  extend_in_chunks(split, data, kWrapped.chunk);
  EXPECT_EQ(trajectories_of(split), want);

  rb::SliceSamplerOptions none = options(2, false);
  none.end_key.reset();
  none.end_keys = {td::NestedKey{"next", "absent"}};
  rb::ReplayBuffer missing = filled(kWrapped, none);
  EXPECT_THROW(missing.sample(4), td::KeyError);
  rb::SliceSamplerOptions both = options(2, false);
  both.end_keys = {td::NestedKey{"next", "done"}};
  EXPECT_THROW(rb::SliceSampler{both}, td::ValueError);
}

// End flags stored as integers rather than bool: any non-zero value ends a
// trajectory, as in TorchRL (bool flags are read as they are, the others
// compared with 0).
TEST(SliceSampler, IntegerEndFlagsMarkTheSameTrajectories) {
  const std::vector<rb::Trajectory> want = trajectories_of(filled(kWrapped, options(2, false)));
  for (at::ScalarType type : {at::kByte, at::kInt, at::kLong}) {
    td::TensorDict data = steps(kWrapped.lengths);
    data.set({"next", "done"}, data.get({"next", "done"}).to(type).mul(7));
    rb::ReplayBuffer buffer(kWrapped.capacity,
                            std::make_shared<rb::SliceSampler>(options(2, false)));
    extend_in_chunks(buffer, data, kWrapped.chunk);
    EXPECT_EQ(trajectories_of(buffer), want) << c10::toString(type);
  }
}

// cache_values keeps the trajectories found at a sample until a write goes
// through the buffer: done flags changed behind its back are not read, the
// next extend (or empty) makes the sampler read them again. Without it they
// are read at every sample. With and without replacement alike.
TEST(SliceSampler, CachedTrajectoriesLastUntilAWrite) {
  for (bool with_replacement : {true, false}) {
    SCOPED_TRACE(with_replacement ? "SliceSampler" : "SliceSamplerWithoutReplacement");
    auto make = [&](bool cache) {
      rb::SliceSamplerOptions o = options(2, false);
      o.cache_values = cache;
      std::shared_ptr<rb::Sampler> sampler =
          with_replacement ? std::make_shared<rb::SliceSampler>(o)
                           : std::make_shared<rb::SliceSamplerWithoutReplacement>(o);
      rb::ReplayBuffer buffer(kWrapped.capacity, sampler);
      extend_in_chunks(buffer, steps(kWrapped.lengths), kWrapped.chunk);
      buffer.manual_seed(5);
      return buffer;
    };
    rb::ReplayBuffer cached = make(true), reference = make(false), uncached = make(false);
    EXPECT_TRUE(torch::equal(cached.sample(4).get("index"), reference.sample(4).get("index")));
    // Every row now ends a trajectory: none is 2 steps long, read afresh that
    // is an error (strict_length).
    for (rb::ReplayBuffer* b : {&cached, &uncached}) b->storage().get({"next", "done"}).fill_(true);
    EXPECT_THROW(uncached.sample(4), td::ValueError);
    EXPECT_TRUE(torch::equal(cached.sample(4).get("index"), reference.sample(4).get("index")));
    td::TensorDict one = steps({1});
    one.get({"next", "done"}).fill_(true);
    cached.extend(one);
    EXPECT_THROW(cached.sample(4), td::ValueError);
    // Emptied and refilled: found again.
    cached.empty();
    extend_in_chunks(cached, steps(kWrapped.lengths), kWrapped.chunk);
    EXPECT_EQ(trajectories_of(cached), trajectories_of(reference));
    EXPECT_NO_THROW(cached.sample(4));
  }
}

TEST(SliceSampler, DefaultsFindTorchRLKeys) {
  rb::SliceSamplerOptions neither;
  neither.slice_len = 2;
  rb::ReplayBuffer buffer(6, std::make_shared<rb::SliceSampler>(neither));
  // ("collector", "traj_ids") wins over "episode": trajectories [0,0,0] [1,1,1].
  buffer.extend(td::TensorDict(
      {{"collector", td::TensorDict({{"traj_ids", at::tensor({0, 0, 0, 1, 1, 1})}}, {6})},
       {"episode", at::zeros({6})}},
      {6}));
  EXPECT_EQ(trajectories_of(buffer), (std::vector<rb::Trajectory>{{0, 2, 3}, {3, 5, 3}}));
}

TEST(SliceSampler, CheckpointHoldsNoSamplerState) {
  rb::ReplayBuffer buffer = filled(kWrapped, options(2, true));
  const fs::path dir = fs::temp_directory_path() / ("td_rb_slice_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  buffer.dumps(dir);
  EXPECT_TRUE(!fs::exists(dir / "sampler") || fs::is_empty(dir / "sampler"));
  rb::ReplayBuffer loaded(10, std::make_shared<rb::SliceSampler>(options(2, true)));
  loaded.loads(dir);
  EXPECT_TRUE(loaded.storage().get("traj").equal(buffer.storage().get("traj")));
  // The newest row is known again from the cursor: no slice runs past row 3.
  loaded.manual_seed(2);
  for (int k = 0; k < 50; ++k)
    for (const Slice& s : slices_of(loaded.sample(8))) EXPECT_NE(s.rows[0], 3);
  // A prioritized sampler's state is refused.
  rb::ReplayBuffer prioritized(10, std::make_shared<rb::PrioritizedSampler>(10, 0.6, 0.4));
  prioritized.extend(steps(kWrapped.lengths).index({at::indexing::Slice(0, 10)}));
  const fs::path other = dir.string() + "_prioritized";
  fs::remove_all(other);
  prioritized.dumps(other);
  rb::ReplayBuffer refusing(10, std::make_shared<rb::SliceSampler>(options(2, true)));
  EXPECT_THROW(refusing.loads(other), td::ValueError);
  EXPECT_EQ(refusing.size(), 0);
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST(SliceSamplerWithoutReplacement, EachTrajectoryOncePerEpoch) {
  // Not full: 17 steps of 5 trajectories in 20 rows; 2 slices of 2 per sample.
  const Layout layout{20, {3, 4, 2, 5, 3}, 6};
  auto o = options(2, false);
  auto sampler = std::make_shared<rb::SliceSamplerWithoutReplacement>(o);
  rb::ReplayBuffer buffer(layout.capacity, sampler);
  const td::TensorDict data = steps(layout.lengths);
  buffer.extend(data);
  buffer.manual_seed(4);
  const std::vector<int64_t> traj = as_vector(buffer.storage().get("traj"));
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> seen;
    std::vector<int64_t> sizes;
    do {
      const td::TensorDict s = buffer.sample(4);
      sizes.push_back(s.batch_size()[0]);
      for (const Slice& slice : slices_of(s)) {
        ASSERT_EQ(slice.rows.size(), 2u);
        EXPECT_EQ(slice.rows[1], slice.rows[0] + 1);
        EXPECT_EQ(traj[slice.rows[0]], traj[slice.rows[1]]);
        seen.insert(traj[slice.rows[0]]);
      }
    } while (!sampler->epoch().ran_out());
    EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2})) << "epoch " << epoch;
    EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4})) << "epoch " << epoch;
  }
  // drop_last: the fifth trajectory's lone slice is skipped.
  auto dropping = std::make_shared<rb::SliceSamplerWithoutReplacement>(o, /*drop_last=*/true);
  rb::ReplayBuffer whole(layout.capacity, dropping);
  whole.extend(data);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(whole.sample(4).batch_size()[0], 4);
}

TEST(SliceSamplerWithoutReplacement, StrictSkipsShortTrajectoriesAndCheckpointsItsEpoch) {
  // Trajectory 1 has one step: drawn, it gives no slice of 2.
  const Layout layout{12, {3, 1, 4, 2}, 12};
  auto sampler =
      std::make_shared<rb::SliceSamplerWithoutReplacement>(options(2, false), false, false);
  rb::ReplayBuffer buffer(layout.capacity, sampler);
  buffer.extend(steps(layout.lengths));
  const std::vector<int64_t> traj = as_vector(buffer.storage().get("traj"));
  // In order (no shuffle): trajectories 0 and 1, then 2 and 3.
  const std::vector<Slice> first = slices_of(buffer.sample(4));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(traj[first[0].rows[0]], 0);

  // The epoch goes on after a checkpoint: the next sample is trajectories 2 and 3.
  const fs::path dir =
      fs::temp_directory_path() / ("td_rb_slice_wor_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  buffer.dumps(dir);
  EXPECT_TRUE(fs::exists(dir / "sampler" / "meta.json"));  // SamplerWithoutReplacement's files
  auto resumed_sampler =
      std::make_shared<rb::SliceSamplerWithoutReplacement>(options(2, false), false, false);
  rb::ReplayBuffer resumed(layout.capacity, resumed_sampler);
  resumed.loads(dir);
  EXPECT_EQ(resumed_sampler->epoch().remaining(), 2);
  std::set<int64_t> next;
  for (const Slice& s : slices_of(resumed.sample(4))) next.insert(traj[s.rows[0]]);
  EXPECT_EQ(next, (std::set<int64_t>{2, 3}));
  // A SliceSampler's checkpoint (no sampler state) is another sampler's.
  rb::ReplayBuffer with_replacement(layout.capacity,
                                    std::make_shared<rb::SliceSampler>(options(2, false)));
  with_replacement.extend(steps(layout.lengths));
  const fs::path other = dir.string() + "_with";
  fs::remove_all(other);
  with_replacement.dumps(other);
  rb::ReplayBuffer refusing(
      layout.capacity, std::make_shared<rb::SliceSamplerWithoutReplacement>(options(2, false)));
  EXPECT_THROW(refusing.loads(other), td::ValueError);
  fs::remove_all(dir);
  fs::remove_all(other);

  // Only the one-step trajectory left to draw: a ValueError, not an empty sample.
  auto lonely = std::make_shared<rb::SliceSamplerWithoutReplacement>(options(2, false));
  rb::ReplayBuffer single(4, lonely);
  single.extend(steps({1, 1}).index({at::indexing::Slice(0, 2)}));
  EXPECT_THROW(single.sample(2), td::ValueError);
}

// ---- against TorchRL ---------------------------------------------------------------------

using TorchRLCase = rb::test::SliceCase<Layout>;
using rb::test::join;
using rb::test::span_name;

class SliceAgainstTorchRL : public ::testing::TestWithParam<TorchRLCase> {};

TEST_P(SliceAgainstTorchRL, SameTrajectoriesSameSlices) {
  const TorchRLCase c = GetParam();
  const json torchrl = rb::test::run_torchrl(
      "slice --capacity " + std::to_string(c.layout.capacity) + " --lengths " +
      join(c.layout.lengths) + " --chunk " + std::to_string(c.layout.chunk) + " --slice-len " +
      std::to_string(c.slice_len) + " --signal " + (c.by_traj ? "traj" : "end") + " --strict " +
      (c.strict ? "1" : "0") + " --span-left " + std::to_string(c.span_left) + " --span-right " +
      std::to_string(c.span_right) + " --pad " + (c.pad ? "1" : "0") + " --samples 400 --seed 1");
  rb::SliceSamplerOptions o = options(c.slice_len, c.by_traj, c.strict);
  o.span_left = c.span_left;
  o.span_right = c.span_right;
  o.pad_output = c.pad;
  rb::ReplayBuffer buffer = filled(c.layout, o);
  const td::TensorDictBase storage = buffer.storage();
  auto* sampler = dynamic_cast<rb::SliceSampler*>(buffer.sampler().get());
  json found = json::array();
  for (const rb::Trajectory& t : sampler->trajectories(view_of(buffer, storage)))
    found.push_back(json::array({t.start, t.stop, t.length}));
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, torchrl["trajectories"]);

  buffer.manual_seed(1);
  auto flags = [](const std::vector<int64_t>& v) {
    json out = json::array();
    for (int64_t x : v) out.push_back(x != 0);
    return out;
  };
  std::map<std::vector<int64_t>, json> slices;
  for (int k = 0; k < 400; ++k) {
    const td::TensorDict sample = buffer.sample(4 * c.slice_len);
    if (c.pad && sample.contains(td::NestedKey{"collector", "mask"})) {
      // Padded: every slice is slice_len steps, listed with its mask.
      ASSERT_EQ(sample.batch_size()[0], 4 * c.slice_len);
      const auto cut = [&](const td::NestedKey& key, int64_t begin) {
        const std::vector<int64_t> all = as_vector(sample.get(key));
        return std::vector<int64_t>(all.begin() + begin, all.begin() + begin + c.slice_len);
      };
      for (int64_t begin = 0; begin < 4 * c.slice_len; begin += c.slice_len) {
        const std::vector<int64_t> rows = cut("index", begin),
                                   mask = cut({"collector", "mask"}, begin);
        std::vector<int64_t> key = rows;
        key.insert(key.end(), mask.begin(), mask.end());
        slices[key] = json::array({rows, flags(cut({"next", "truncated"}, begin)),
                                   flags(cut({"next", "done"}, begin)), flags(mask)});
      }
      continue;
    }
    for (const Slice& s : slices_of(sample))
      slices[s.rows] = json::array({s.rows, flags(s.truncated), flags(s.done)});
  }
  json mine = json::array();
  for (const auto& [rows, entry] : slices) mine.push_back(entry);
  EXPECT_EQ(mine, torchrl["slices"]);
}

// The trajectory of each slice of a sample.
std::vector<int64_t> slice_trajectories(const td::TensorDict& sample) {
  const std::vector<int64_t> traj = as_vector(sample.get("traj"));
  std::vector<int64_t> out;
  std::size_t p = 0;
  for (const Slice& s : slices_of(sample)) {
    out.push_back(traj[p]);
    p += s.rows.size();
  }
  return out;
}

TEST(SliceSamplerWithoutReplacement, EpochsAndCheckpointsAsTorchRL) {
  // 7 trajectories, 4 slices of 2 per sample: epochs of 4 + 3 slices.
  const Layout layout{24, {3, 4, 2, 5, 3, 2, 2}, 6};
  const std::string args =
      "slice_wor --capacity 24 --lengths 3,4,2,5,3,2,2 --chunk 6 --slice-len 2 --signal end";
  const fs::path base = fs::temp_directory_path() / ("td_rb_wor_" + std::to_string(::getpid()));
  const fs::path from_torchrl = base.string() + "_torchrl", from_cpp = base.string() + "_cpp";
  fs::remove_all(from_torchrl);
  fs::remove_all(from_cpp);
  const json torchrl = rb::test::run_torchrl(args + " --samples 6 --dump " + from_torchrl.string() +
                                             " --dump-after 1");

  auto make = [&] {
    rb::ReplayBuffer buffer(
        layout.capacity, std::make_shared<rb::SliceSamplerWithoutReplacement>(options(2, false)));
    const td::TensorDict data = steps(layout.lengths);
    for (int64_t start = 0; start < 21; start += layout.chunk)
      buffer.extend(data.index({at::indexing::Slice(start, std::min<int64_t>(21, start + 6))}));
    return buffer;
  };
  rb::ReplayBuffer mine = make();
  mine.manual_seed(8);
  json sizes = json::array();
  std::vector<std::vector<int64_t>> trajs;
  for (int k = 0; k < 6; ++k) {
    if (k == 1) mine.dumps(from_cpp);
    const td::TensorDict s = mine.sample(8);
    sizes.push_back(s.batch_size()[0]);
    trajs.push_back(slice_trajectories(s));
  }
  EXPECT_EQ(sizes, torchrl["sizes"]);  // [8, 6, 8, 6, 8, 6]
  const std::multiset<int64_t> all{0, 1, 2, 3, 4, 5, 6};
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> a, b;
    for (int k : {2 * epoch, 2 * epoch + 1}) {
      a.insert(trajs[k].begin(), trajs[k].end());
      for (const auto& t : torchrl["trajs"][k]) b.insert(t.get<int64_t>());
    }
    EXPECT_EQ(a, all) << "epoch " << epoch;
    EXPECT_EQ(b, all) << "TorchRL's epoch " << epoch;
  }
  // TorchRL's checkpoint after one sample: the C++ buffer draws the rest of
  // TorchRL's epoch, the same trajectories in the same order.
  rb::ReplayBuffer resumed = make();
  resumed.loads(from_torchrl);
  EXPECT_EQ(json(slice_trajectories(resumed.sample(8))), torchrl["trajs"][1]);
  // And the other way: TorchRL loads the C++ checkpoint and draws the rest of its epoch.
  const json back = rb::test::run_torchrl(args + " --samples 1 --load " + from_cpp.string());
  EXPECT_EQ(back["trajs"][0], json(trajs[1]));
  fs::remove_all(from_torchrl);
  fs::remove_all(from_cpp);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, SliceAgainstTorchRL,
    ::testing::Values(TorchRLCase{kWrapped, 2, true, true}, TorchRLCase{kWrapped, 2, false, true},
                      TorchRLCase{kWrapped, 3, true, false},
                      TorchRLCase{{12, {3, 1, 4, 3}, 5}, 3, false, false},
                      TorchRLCase{{12, {3, 1, 4, 3}, 5}, 3, true, true},
                      TorchRLCase{{8, {5, 6, 4}, 3}, 2, false, true},
                      // span (True both sides; steps) and pad_output
                      TorchRLCase{kWrapped, 3, true, true, -1, -1},
                      TorchRLCase{kWrapped, 3, false, true, 1, 2},
                      TorchRLCase{{12, {3, 1, 4, 3}, 5}, 3, true, false, 0, 0, true},
                      TorchRLCase{{12, {3, 1, 4, 3}, 5}, 3, false, false, -1, -1, true}),
    [](const ::testing::TestParamInfo<TorchRLCase>& info) {
      // e.g. capacity10_steps14_len2_ids_strict
      const TorchRLCase& c = info.param;
      int64_t steps = 0;
      for (int64_t n : c.layout.lengths) steps += n;
      return "capacity" + std::to_string(c.layout.capacity) + "_steps" + std::to_string(steps) +
             "_len" + std::to_string(c.slice_len) + (c.by_traj ? "_ids" : "_ends") +
             (c.strict ? "_strict" : "_loose") +
             (c.span_left || c.span_right
                  ? "_span" + span_name(c.span_left) + "_" + span_name(c.span_right)
                  : "") +
             (c.pad ? "_pad" : "");
    });

}  // namespace
