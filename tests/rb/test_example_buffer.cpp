// The replay-buffer example's own part (examples/replay_buffer/
// replay_buffer.h): an rb::ReplayBuffer over a from_schema storage of the
// typed transition, kept in a memmap directory that a later process resumes
// with its write position and priorities, and the errors for bad arguments and
// corrupt directories. Writing and sampling themselves are the library's
// (test_replay_buffer.cpp, test_sampler.cpp).
#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

#include "replay_buffer/replay_buffer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace td_test;
using replay::Buffer;
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

std::vector<float> rewards(const Buffer& b) {
  at::Tensor r = b.storage().reward().contiguous();
  return {r.data_ptr<float>(), r.data_ptr<float>() + r.numel()};
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

}  // namespace

TEST(ExampleBuffer, WritesWrapAroundThroughTheLibraryBuffer) {
  Buffer b = Buffer::create(5, "memory");
  EXPECT_EQ(b.buffer().add(batch_of_ids(1, 1)[0]), 0);
  at::Tensor rows = b.buffer().extend(batch_of_ids(2, 6));  // 6 rows into 5: the first is lost
  EXPECT_TRUE(at::equal(rows, at::tensor({2, 3, 4, 0, 1}, at::kLong))) << rows;
  EXPECT_EQ(rewards(b), (std::vector<float>{6, 7, 3, 4, 5}));
  EXPECT_EQ(b.cursor(), 2);
  EXPECT_EQ(b.size(), 5);
  EXPECT_EQ(b.total_written(), 7);
  // Every written row got the sampler's largest priority (1 before any update).
  EXPECT_DOUBLE_EQ(b.priorities().sum_tree().total(), 5 * std::pow(1.0 + 1e-6, 0.6));
  Transition t = b.at(at::tensor({1}, at::kLong));
  EXPECT_EQ(t.reward()[0].item<float>(), 7.0f);
  EXPECT_EQ(t.next().obs()[0][0][0][0].item<int64_t>(), 8);
}

TEST(ExampleBuffer, ResumesAMemmapBufferAtItsLastFlushWithItsPriorities) {
  TempDir dir("td_example_buffer");
  std::vector<double> leaves;
  {
    Buffer b = Buffer::create(8, "memmap", dir.path);
    b.buffer().extend(batch_of_ids(0, 11));
    b.buffer().update_priority(at::tensor({2, 5}, at::kLong), at::tensor({7.0, 0.5}));
    b.flush();
    at::Tensor saved = b.priorities().sum_tree().leaves().contiguous();
    leaves.assign(saved.data_ptr<double>(), saved.data_ptr<double>() + saved.numel());
    b.buffer().add(batch_of_ids(50, 1)[0]);  // after the flush: treated as never written
  }
  ASSERT_TRUE(Buffer::exists(dir.path));
  Buffer back = Buffer::open(dir.path);
  EXPECT_EQ(back.capacity(), 8);
  EXPECT_EQ(back.cursor(), 3);
  EXPECT_EQ(back.size(), 8);
  EXPECT_EQ(back.total_written(), 11);
  EXPECT_TRUE(td::MemoryMappedTensor::is_memory_mapped(back.storage().obs()));
  EXPECT_EQ(rewards(back)[2], 10.0f);
  at::Tensor loaded = back.priorities().sum_tree().leaves().contiguous();
  EXPECT_EQ(
      std::vector<double>(loaded.data_ptr<double>(), loaded.data_ptr<double>() + loaded.numel()),
      leaves);
  EXPECT_DOUBLE_EQ(back.priorities().max_priority(), 7.0);
  // The next write goes on at the cursor, with the largest priority.
  EXPECT_EQ(back.buffer().add(batch_of_ids(60, 1)[0]), 3);
  EXPECT_EQ(back.total_written(), 12);
  // Python (or any tensordict program) can load the storage directory itself.
  EXPECT_EQ(td::load_memmap((dir.path / "storage").string()).batch_size().vec(),
            (std::vector<int64_t>{8}));
}

TEST(ExampleBuffer, ResumesWithoutSavedPrioritiesAtEqualPriorities) {
  TempDir dir("td_example_buffer");
  {
    Buffer b = Buffer::create(4, "memmap", dir.path);
    b.buffer().extend(batch_of_ids(0, 3));
    b.flush();
  }
  fs::remove_all(dir.path / "priorities");
  Buffer back = Buffer::open(dir.path);
  at::Tensor w = back.priorities().sum_tree().leaves();
  EXPECT_GT(w[0].item<double>(), 0.0);
  EXPECT_EQ(w[0].item<double>(), w[2].item<double>());
  EXPECT_EQ(w[3].item<double>(), 0.0);  // never written
}

TEST(ExampleBuffer, BadArgumentsAreValueErrors) {
  TD_EXPECT_THROW_MSG(Buffer::create(0, "memory"), td::ValueError, "capacity", "got 0");
  TD_EXPECT_THROW_MSG(Buffer::create(4, "memmap"), td::ValueError, "directory");
}

TEST(ExampleBuffer, MissingOrCorruptStateIsAFormatError) {
  TempDir dir("td_example_buffer");
  TD_EXPECT_THROW_MSG(Buffer::open(dir.path), td::FormatError, "state.json", "is missing");
  Buffer::create(4, "memmap", dir.path).buffer().extend(batch_of_ids(0, 2));
  const fs::path state = dir.path / "state.json";
  write_text(state, "{\"capacity\": 4, \"cursor\": ");
  TD_EXPECT_THROW_MSG(Buffer::open(dir.path), td::FormatError, "corrupt", state.string().c_str());
  write_text(state, R"({"capacity": 4, "cursor": 1, "size": 2})");
  TD_EXPECT_THROW_MSG(Buffer::open(dir.path), td::FormatError, "total_written");
  write_text(state, R"({"capacity": 4, "cursor": 9, "size": 2, "total_written": 2})");
  TD_EXPECT_THROW_MSG(Buffer::open(dir.path), td::FormatError, "cursor 9");
  write_text(state, R"({"capacity": 6, "cursor": 1, "size": 2, "total_written": 2})");
  TD_EXPECT_THROW_MSG(Buffer::open(dir.path), td::FormatError, "capacity 6", "holds 4");
}
