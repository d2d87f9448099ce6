// The replay-buffer example's building blocks (examples/replay_buffer/
// replay_buffer.h): circular writes of transitions and batches, uniform
// sampling, resuming a memmap buffer, the sum tree and the prioritized
// sampler, and the errors for bad arguments and corrupt directories.
#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

#include "replay_buffer/replay_buffer.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

using namespace td_test;
using replay::PrioritizedSampler;
using replay::ReplayBuffer;
using replay::SumTree;
using replay::Transition;
namespace fs = std::filesystem;

namespace {

// Transition `id`: obs pixels id % 251, next/obs (id + 1) % 251, reward id.
td::TensorDict batch_of_ids(int64_t first, int64_t n) {
  at::Tensor ids = at::arange(first, first + n, at::kLong);
  auto frames = [&](const at::Tensor& v) {
    return v.remainder(251).to(at::kByte).view({n, 1, 1, 1}).expand({n, 84, 84, 3});
  };
  return td::TensorDict({{"obs", frames(ids)},
                         {"action", at::zeros({n, 4})},
                         {"reward", ids.to(at::kFloat)},
                         {"done", at::zeros({n}, at::kBool)},
                         {"next", td::TensorDict({{"obs", frames(ids + 1)}}, {n})}},
                        {n});
}

std::vector<float> rewards(const ReplayBuffer& rb) {
  at::Tensor r = rb.storage().reward().contiguous();
  return {r.data_ptr<float>(), r.data_ptr<float>() + r.numel()};
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

}  // namespace

TEST(ReplayBuffer, WritesWrapAroundAndKeepTheLastRows) {
  ReplayBuffer rb = ReplayBuffer::create(5, "memory");
  EXPECT_EQ(rb.add(batch_of_ids(1, 1)[0]), 0);
  // 6 rows into 5: the first is dropped (as if overwritten), the last 5 land
  // on rows 2, 3, 4, then wrap to 0, 1.
  at::Tensor rows = rb.extend(batch_of_ids(2, 6));
  EXPECT_TRUE(at::equal(rows, at::tensor({2, 3, 4, 0, 1}, at::kLong))) << rows;
  EXPECT_EQ(rewards(rb), (std::vector<float>{6, 7, 3, 4, 5}));
  EXPECT_EQ(rb.cursor(), 2);
  EXPECT_EQ(rb.size(), 5);
  EXPECT_EQ(rb.total_written(), 7);
  // A batch larger than the buffer: only its last `capacity` rows survive.
  rb.extend(batch_of_ids(100, 12));
  EXPECT_EQ(rewards(rb), (std::vector<float>{108, 109, 110, 111, 107}));
  EXPECT_EQ(rb.cursor(), 4);
  EXPECT_EQ(rb.total_written(), 19);
  // The nested level travels with its row.
  Transition t = rb.at(at::tensor({1}, at::kLong));
  EXPECT_EQ(t.reward()[0].item<float>(), 109.0f);
  EXPECT_EQ(t.next().obs()[0][0][0][0].item<int64_t>(), 110);
}

TEST(ReplayBuffer, SamplesOnlyFilledRows) {
  ReplayBuffer rb = ReplayBuffer::create(100, "memory");
  rb.extend(batch_of_ids(1000, 10));
  at::Tensor idx = rb.sample_indices(4096);
  EXPECT_EQ(idx.min().item<int64_t>(), 0);
  EXPECT_EQ(idx.max().item<int64_t>(), 9);
  Transition s = rb.sample(64);
  EXPECT_EQ(s.batch_size().vec(), (std::vector<int64_t>{64}));
  // Every sampled row is a whole transition: obs and next/obs belong together.
  at::Tensor obs = s.obs().select(1, 0).select(1, 0).select(1, 0).to(at::kLong);
  at::Tensor next = s.next().obs().select(1, 0).select(1, 0).select(1, 0).to(at::kLong);
  EXPECT_TRUE(at::equal((obs + 1).remainder(251), next));
}

TEST(ReplayBuffer, ResumesAMemmapBufferAtItsLastFlush) {
  TempDir dir("td_replay");
  {
    ReplayBuffer rb = ReplayBuffer::create(8, "memmap", dir.path);
    rb.extend(batch_of_ids(0, 11));
    rb.flush();
    rb.add(batch_of_ids(50, 1)[0]);  // after the flush: treated as never written
  }
  ASSERT_TRUE(ReplayBuffer::exists(dir.path));
  ReplayBuffer back = ReplayBuffer::open(dir.path);
  EXPECT_EQ(back.capacity(), 8);
  EXPECT_EQ(back.cursor(), 3);
  EXPECT_EQ(back.size(), 8);
  EXPECT_EQ(back.total_written(), 11);
  EXPECT_TRUE(td::MemoryMappedTensor::is_memory_mapped(back.storage().obs()));
  EXPECT_EQ(rewards(back)[2], 10.0f);
  // Python (or any tensordict program) can load the storage directory itself.
  EXPECT_EQ(td::load_memmap(dir.str("storage")).batch_size().vec(), (std::vector<int64_t>{8}));
}

TEST(ReplayBuffer, BadArgumentsAreValueAndShapeErrors) {
  TD_EXPECT_THROW_MSG(ReplayBuffer::create(0, "memory"), td::ValueError, "capacity", "got 0");
  TD_EXPECT_THROW_MSG(ReplayBuffer::create(4, "memmap"), td::ValueError, "directory");
  ReplayBuffer rb = ReplayBuffer::create(4, "memory");
  TD_EXPECT_THROW_MSG(rb.sample(8), td::ValueError, "empty");
  rb.extend(batch_of_ids(0, 2));
  TD_EXPECT_THROW_MSG(rb.sample(0), td::ValueError, "batch size", "got 0");
  TD_EXPECT_THROW_MSG(rb.extend(batch_of_ids(0, 1)[0]), td::ShapeError, "batch size [n]");
  // A transition of the wrong shape names its key and leaves the buffer as it was.
  td::TensorDict bad = batch_of_ids(9, 1)[0];
  bad.set("action", at::zeros({5}));
  const auto before = rewards(rb);
  EXPECT_THROW(rb.add(bad), td::ShapeError);
  EXPECT_EQ(rewards(rb), before);
  EXPECT_EQ(rb.cursor(), 2);
}

TEST(ReplayBuffer, MissingOrCorruptStateIsAFormatError) {
  TempDir dir("td_replay");
  TD_EXPECT_THROW_MSG(ReplayBuffer::open(dir.path), td::FormatError, "state.json", "is missing");
  ReplayBuffer::create(4, "memmap", dir.path).extend(batch_of_ids(0, 2));
  const fs::path state = dir.path / "state.json";
  write_text(state, "{\"capacity\": 4, \"cursor\": ");
  TD_EXPECT_THROW_MSG(ReplayBuffer::open(dir.path), td::FormatError, "corrupt",
                      state.string().c_str());
  write_text(state, R"({"capacity": 4, "cursor": 1, "size": 2})");
  TD_EXPECT_THROW_MSG(ReplayBuffer::open(dir.path), td::FormatError, "total_written");
  write_text(state, R"({"capacity": 4, "cursor": 9, "size": 2, "total_written": 2})");
  TD_EXPECT_THROW_MSG(ReplayBuffer::open(dir.path), td::FormatError, "cursor 9");
  write_text(state, R"({"capacity": 6, "cursor": 1, "size": 2, "total_written": 2})");
  TD_EXPECT_THROW_MSG(ReplayBuffer::open(dir.path), td::FormatError, "capacity 6", "holds 4");
}

TEST(SumTree, TotalsAndPrefixSearch) {
  SumTree tree(5);  // 8 leaves, the last 3 unused
  const double w[] = {1, 0, 2, 3, 4};
  for (int i = 0; i < 5; ++i) tree.set(i, w[i]);
  EXPECT_DOUBLE_EQ(tree.total(), 10.0);
  EXPECT_EQ(tree.find(0.0), 0);
  EXPECT_EQ(tree.find(0.999), 0);
  EXPECT_EQ(tree.find(1.0), 2);  // row 1 has weight 0: never found
  EXPECT_EQ(tree.find(2.999), 2);
  EXPECT_EQ(tree.find(3.0), 3);
  EXPECT_EQ(tree.find(9.999), 4);
  EXPECT_EQ(tree.find(50.0), 4);  // past the total: the last row
  tree.set(3, 0.0);
  EXPECT_DOUBLE_EQ(tree.total(), 7.0);
  EXPECT_EQ(tree.find(3.5), 4);
  TD_EXPECT_THROW_MSG(tree.set(5, 1.0), td::IndexError, "row 5", "5 rows");
  TD_EXPECT_THROW_MSG(tree.set(0, -1.0), td::ValueError, "row 0");
  TD_EXPECT_THROW_MSG(tree.set(0, std::nan("")), td::ValueError, "row 0");
  EXPECT_DOUBLE_EQ(tree.total(), 7.0);
}

TEST(PrioritizedSampler, DrawsInProportionToPriorityAndWeighsByImportance) {
  PrioritizedSampler ps(4, /*alpha=*/1.0, /*beta=*/1.0, /*eps=*/0.0);
  ps.update_priorities(at::tensor({0, 1, 2, 3}, at::kLong), at::tensor({1.0, 1.0, 2.0, 0.0}));
  std::mt19937_64 rng(7);
  auto batch = ps.sample(4000, 4, rng);
  at::Tensor counts = at::bincount(batch.indices, {}, 4);
  EXPECT_EQ(counts[3].item<int64_t>(), 0);                  // priority 0: never drawn
  EXPECT_NEAR(counts[2].item<double>() / 4000, 0.5, 0.01);  // stratified: close to exact
  EXPECT_NEAR(counts[0].item<double>() / 4000, 0.25, 0.01);
  // (N * P(i))^-beta normalised by the largest: rows 0/1 weigh 1, row 2 weighs 0.5.
  at::Tensor w2 = batch.weights.index({batch.indices == 2});
  EXPECT_TRUE(at::allclose(w2, at::full_like(w2, 0.5)));
  EXPECT_FLOAT_EQ(batch.weights.max().item<float>(), 1.0f);
}

TEST(PrioritizedSampler, NewRowsGetTheLargestPrioritySeen) {
  PrioritizedSampler ps(4, /*alpha=*/0.5);
  ps.update_priorities(at::tensor({0}, at::kLong), at::tensor({9.0}));
  ps.mark_written(at::tensor({1, 2}, at::kLong));
  EXPECT_NEAR(ps.weight(1), std::sqrt(9.0 + 1e-6), 1e-9);
  EXPECT_DOUBLE_EQ(ps.weight(2), ps.weight(1));
  EXPECT_DOUBLE_EQ(ps.weight(3), 0.0);
}

TEST(PrioritizedSampler, BadUpdatesChangeNothing) {
  PrioritizedSampler ps(4);
  ps.update_priorities(at::tensor({0, 1}, at::kLong), at::tensor({1.0, 2.0}));
  const double w0 = ps.weight(0), w1 = ps.weight(1);
  TD_EXPECT_THROW_MSG(ps.update_priorities(at::tensor({0, 1}, at::kLong), at::tensor({1.0})),
                      td::ShapeError, "2 indices but 1 priorities");
  TD_EXPECT_THROW_MSG(ps.update_priorities(at::tensor({0, 4}, at::kLong), at::tensor({5.0, 5.0})),
                      td::IndexError, "row 4", "4 rows");
  TD_EXPECT_THROW_MSG(
      ps.update_priorities(at::tensor({0, 1}, at::kLong), at::tensor({5.0, std::nan("")})),
      td::ValueError, "row 1");
  EXPECT_DOUBLE_EQ(ps.weight(0), w0);  // checked before any was applied
  EXPECT_DOUBLE_EQ(ps.weight(1), w1);
  std::mt19937_64 rng(1);
  TD_EXPECT_THROW_MSG(ps.sample(8, 0, rng), td::ValueError, "size");
  TD_EXPECT_THROW_MSG(PrioritizedSampler(4).sample(8, 4, rng), td::ValueError, "no priorities");
}

TEST(PrioritizedSampler, SaveLoadRoundTripAndMismatch) {
  TempDir dir("td_replay");
  PrioritizedSampler ps(6);
  ps.update_priorities(at::tensor({1, 4}, at::kLong), at::tensor({3.0, 0.5}));
  ps.save(dir.path / "priorities");
  PrioritizedSampler back(6);
  back.load(dir.path / "priorities");
  for (int64_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(back.weight(i), ps.weight(i)) << i;
  // The new rows' priority (the largest seen) was saved too.
  back.mark_written(0);
  ps.mark_written(0);
  EXPECT_DOUBLE_EQ(back.weight(0), ps.weight(0));
  PrioritizedSampler other(7);
  TD_EXPECT_THROW_MSG(other.load(dir.path / "priorities"), td::FormatError, "6", "expected 7");
}
