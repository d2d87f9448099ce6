// ReplayBuffer over [env, time] storages (TorchRL's ndim 2): each env's steps
// land along time in its own row, round robin over the time steps; samples
// number the elements time-major (as TorchRL) and return [env, time] index
// pairs; checkpoints in TorchRL's [steps, envs] layout. Over memory, memmap
// (a directory on disk), shared memory and, when built, HDF5 (written through
// index_put_). The exchanges with the real TorchRL are
// python/torchrl_interop.sh (rb.torchrl_checkpoint.env_*).
#include <tensordict/errors.h>
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/schema.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rb/env_storages.h"

namespace fs = std::filesystem;
namespace rb = tensordict::rb;
namespace td = tensordict;

namespace {

constexpr int64_t kEnvs = 3;
constexpr int64_t kSteps = 4;

td::Schema step_schema() {
  return td::Schema{
      {"obs", {{2}, at::kFloat}}, {"action", {{}, at::kLong}}, {{"next", "done"}, {{}, at::kBool}}};
}

// Steps [first, first + n) of every env, batch [envs, n]: the element of env
// e at step j has id 1000 e + j in every leaf, so a read tells where it came from.
td::TensorDict steps_of(int64_t first, int64_t n, int64_t envs = kEnvs) {
  const at::Tensor id = at::arange(envs, at::kLong).mul(1000).unsqueeze(1) +
                        at::arange(first, first + n, at::kLong).unsqueeze(0);
  const at::Tensor f = id.to(at::kFloat);
  return td::TensorDict({{"obs", at::stack({f, f + 0.5}, -1)},
                         {"action", id},
                         {"next", td::TensorDict({{"done", id.remainder(2).eq(0)}}, {envs, n})}},
                        {envs, n});
}

// The ids of `rows` (batch [n]) after checking that each element is whole.
at::Tensor ids_of(const td::TensorDictBase& rows) {
  const at::Tensor id = rows.get("action");
  const at::Tensor f = id.to(at::kFloat);
  EXPECT_TRUE(rows.get("obs").equal(at::stack({f, f + 0.5}, -1)));
  EXPECT_TRUE(rows.get({"next", "done"}).equal(id.remainder(2).eq(0)));
  return id;
}

struct Storages : rb::test::EnvStorages {
  Storages() : EnvStorages(step_schema(), kEnvs, kSteps) {}
};

class EnvTimeBuffer : public ::testing::TestWithParam<std::string> {
 protected:
  Storages storages;
};

// The id stored at [env, time] for every pair, read through the storage.
at::Tensor stored_ids(const rb::ReplayBuffer& buffer) {
  return buffer.storage().get("action").clone();
}

}  // namespace

TEST_P(EnvTimeBuffer, ExtendWritesEachEnvAlongTimeRoundRobin) {
  rb::ReplayBuffer buffer(storages.make(GetParam()));
  EXPECT_EQ(buffer.capacity(), kEnvs * kSteps);  // TorchRL's max_size
  EXPECT_EQ(buffer.size(), 0);

  const at::Tensor pairs = buffer.extend(steps_of(0, 2));
  // One [env, time] pair per element, env by env (batch.flatten(0, 1)'s order).
  EXPECT_TRUE(
      pairs.equal(at::tensor({0, 0, 0, 1, 1, 0, 1, 1, 2, 0, 2, 1}, at::kLong).view({6, 2})));
  EXPECT_EQ(buffer.size(), 2 * kEnvs);  // whole time steps of every env
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{2, 2}));
  at::Tensor ids = stored_ids(buffer);
  for (int64_t e = 0; e < kEnvs; ++e)
    for (int64_t t = 0; t < 2; ++t) EXPECT_EQ(ids[e][t].item<int64_t>(), 1000 * e + t);
  EXPECT_TRUE(ids.narrow(1, 2, 2).eq(0).all().item<bool>());  // later steps unwritten

  // Steps 2..4 wrap: step 4 lands on time 0 of every env.
  const at::Tensor more = buffer.extend(steps_of(2, 3));
  EXPECT_TRUE(more.select(1, 1).narrow(0, 0, 3).equal(at::tensor({2, 3, 0}, at::kLong)));
  EXPECT_EQ(buffer.size(), buffer.capacity());
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{1, 5}));
  ids = stored_ids(buffer);
  for (int64_t e = 0; e < kEnvs; ++e) {
    EXPECT_EQ(ids[e][0].item<int64_t>(), 1000 * e + 4);
    for (int64_t t = 1; t < kSteps; ++t) EXPECT_EQ(ids[e][t].item<int64_t>(), 1000 * e + t);
  }

  // Longer than the time steps: only the last kSteps survive, as TorchRL.
  const at::Tensor last = buffer.extend(steps_of(10, 6));
  EXPECT_EQ(last.size(0), kEnvs * kSteps);
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{(1 + 6) % kSteps, 11}));
  ids = stored_ids(buffer);
  for (int64_t e = 0; e < kEnvs; ++e)
    for (int64_t j = 12; j < 16; ++j)
      EXPECT_EQ(ids[e][(1 + j - 10) % kSteps].item<int64_t>(), 1000 * e + j);
}

TEST_P(EnvTimeBuffer, AddWritesOneStepOfEveryEnv) {
  rb::ReplayBuffer buffer(storages.make(GetParam()));
  buffer.extend(steps_of(0, 3));
  const td::TensorDict step = steps_of(7, 1).index({at::indexing::Slice(), 0});
  ASSERT_EQ(step.batch_size(), std::vector<int64_t>{kEnvs});
  EXPECT_EQ(buffer.add(step), 3);  // the time step written
  EXPECT_EQ(buffer.add(steps_of(8, 1).index({at::indexing::Slice(), 0})), 0);
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{1, 5}));
  const at::Tensor ids = stored_ids(buffer);
  for (int64_t e = 0; e < kEnvs; ++e) {
    EXPECT_EQ(ids[e][3].item<int64_t>(), 1000 * e + 7);
    EXPECT_EQ(ids[e][0].item<int64_t>(), 1000 * e + 8);
  }
}

TEST_P(EnvTimeBuffer, SamplesAreFlatRowsWithTheirEnvAndTime) {
  rb::ReplayBuffer buffer(storages.make(GetParam()));
  buffer.manual_seed(3);
  buffer.extend(steps_of(0, 2));  // not full: only times 0 and 1 are filled
  const td::TensorDict s = buffer.sample(200);
  EXPECT_EQ(s.batch_size(), std::vector<int64_t>{200});
  const at::Tensor index = s.get("index");
  ASSERT_EQ(index.sizes(), (std::vector<int64_t>{200, 2}));
  const at::Tensor env = index.select(1, 0), time = index.select(1, 1);
  EXPECT_TRUE(env.ge(0).all().item<bool>() && env.lt(kEnvs).all().item<bool>());
  EXPECT_TRUE(time.ge(0).all().item<bool>() && time.lt(2).all().item<bool>());
  // Each row is the element its pair names.
  EXPECT_TRUE(ids_of(s).equal(env * 1000 + time));
  // Every filled element is drawn (6 of them, 200 draws).
  std::set<int64_t> seen;
  for (int64_t k = 0; k < 200; ++k) seen.insert(ids_of(s)[k].item<int64_t>());
  EXPECT_EQ(seen.size(), 6u);
}

TEST_P(EnvTimeBuffer, WithoutReplacementCoversEveryElementOncePerEpoch) {
  rb::ReplayBuffer buffer(storages.make(GetParam()),
                          std::make_shared<rb::SamplerWithoutReplacement>());
  buffer.extend(steps_of(0, 3));
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int k = 0; k < 3; ++k) {
    const at::Tensor index = buffer.sample(3).get("index");
    for (int64_t r = 0; r < 3; ++r)
      seen.insert({index[r][0].item<int64_t>(), index[r][1].item<int64_t>()});
  }
  EXPECT_EQ(seen.size(), 9u);  // 3 envs x 3 steps, none twice
  for (const auto& [env, time] : seen) EXPECT_LT(time, 3);
}

TEST_P(EnvTimeBuffer, BadInputIsRefusedAndChangesNothing) {
  rb::ReplayBuffer buffer(storages.make(GetParam()));
  buffer.extend(steps_of(0, 2));
  const at::Tensor before = stored_ids(buffer);
  EXPECT_THROW(buffer.extend(steps_of(0, 2, kEnvs + 1)), td::ShapeError);  // other env count
  EXPECT_THROW(buffer.extend(steps_of(0, 2).index({0})), td::ShapeError);  // no env dim
  EXPECT_THROW(buffer.add(steps_of(0, 1).index({0, 0})), td::ShapeError);  // one env's step
  td::TensorDict wrong = steps_of(0, 2);
  wrong.set("action", wrong.get("action").to(at::kInt));
  EXPECT_THROW(buffer.extend(wrong), td::TypeError);
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{2, 2}));
  EXPECT_TRUE(stored_ids(buffer).equal(before));
  // Priorities address [env, time] pairs: checked, then a no-op here.
  EXPECT_THROW(buffer.update_priority(at::tensor({0, 5}, at::kLong).view({1, 2}), at::ones({1})),
               td::IndexError);
  EXPECT_THROW(buffer.update_priority(at::tensor({0, 1}, at::kLong), at::ones({2})),
               td::ShapeError);
  buffer.update_priority(at::tensor({2, 1}, at::kLong).view({1, 2}), at::ones({1}));
}

const std::vector<std::string> kEnvStorages = rb::test::env_storage_kinds();

INSTANTIATE_TEST_SUITE_P(Storages, EnvTimeBuffer, ::testing::ValuesIn(kEnvStorages),
                         [](const auto& info) { return info.param; });

namespace {

// A sampler of the user's own: it does not know how an [env, time] buffer
// numbers its elements.
class FirstRowSampler : public rb::Sampler {
 public:
  rb::SampleInfo sample(int64_t, int64_t batch_size, at::Generator*) override {
    return {at::zeros({batch_size}, at::kLong), at::Tensor(), {}};
  }
  std::string name() const override { return "FirstRowSampler"; }
};

}  // namespace

TEST(EnvTimeBufferSetup, UnknownSamplersAndPerRowWritersAreRefused) {
  const auto storage = [] { return td::from_schema(step_schema(), {kEnvs, kSteps}); };
  EXPECT_THROW(rb::ReplayBuffer(storage(), std::make_shared<FirstRowSampler>()),
               td::UnsupportedError);
  // A PrioritizedSampler holds one priority per element: envs * steps.
  EXPECT_THROW(
      rb::ReplayBuffer(storage(), std::make_shared<rb::PrioritizedSampler>(kSteps, 0.6, 0.4)),
      td::ValueError);
  EXPECT_NO_THROW(
      rb::ReplayBuffer(storage(), std::make_shared<rb::PrioritizedSampler>(12, 0.6, 0.4)));
  EXPECT_THROW(rb::ReplayBuffer(storage(), nullptr,
                                std::make_shared<rb::TensorDictMaxValueWriter>("action")),
               td::UnsupportedError);
  EXPECT_THROW(rb::ReplayBuffer(td::from_schema(step_schema(), {2, 2, 2})), td::ShapeError);
}

TEST(EnvTimeBufferCheckpoint, DumpsTimeMajorAndLoadsBack) {
  Storages storages;
  rb::ReplayBuffer buffer(storages.make("memmap"),
                          std::make_shared<rb::SamplerWithoutReplacement>());
  buffer.extend(steps_of(0, 3));
  buffer.extend(steps_of(3, 2));  // wrapped: cursor 1
  buffer.sample(5);
  const fs::path dir = storages.dir("checkpoint");
  buffer.dumps(dir);

  std::ifstream meta_file(dir / "storage" / "meta.json");
  const auto meta = nlohmann::json::parse(meta_file);
  EXPECT_EQ(meta["shape"], nlohmann::json({kSteps, kEnvs}));  // TorchRL's [steps, envs]
  std::ifstream storage_file(dir / "storage" / "storage_metadata.json");
  EXPECT_EQ(nlohmann::json::parse(storage_file)["len"], kEnvs * kSteps);
  std::ifstream writer_file(dir / "writer" / "metadata.json");
  const auto writer = nlohmann::json::parse(writer_file);
  EXPECT_EQ(writer["cursor"], 1);
  EXPECT_EQ(writer["write_count"], 5);

  rb::ReplayBuffer loaded(storages.make("memory"),
                          std::make_shared<rb::SamplerWithoutReplacement>());
  loaded.loads(dir);
  EXPECT_TRUE(stored_ids(loaded).equal(stored_ids(buffer)));
  EXPECT_EQ(loaded.writer_state(), buffer.writer_state());
  EXPECT_EQ(loaded.size(), buffer.size());
  // The epoch goes on alike in both.
  EXPECT_TRUE(loaded.sample(4).get("index").equal(buffer.sample(4).get("index")));

  // Another env count is refused and changes nothing.
  rb::ReplayBuffer other(storages.make("memory", 2, 6));
  EXPECT_THROW(other.loads(dir), td::ValueError);
  EXPECT_EQ(other.size(), 0);
  rb::ReplayBuffer flat(12);
  EXPECT_THROW(flat.loads(dir), td::FormatError);
}
