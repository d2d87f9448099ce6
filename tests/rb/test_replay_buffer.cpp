// ReplayBuffer over real storages: in memory, a memmap directory on disk,
// POSIX shared memory (all from from_schema, written straight into their
// tensors), a lazy stack of in-memory rows and, when their components are
// built, an HDF5 file and the Redis stores of rb/redis_storages.h (single
// server, sharded, cluster, sharded over a cluster; all written through
// index_put_, the path of every other storage). Wrap-around, overlong
// extends, lazy allocation, each sampler through the buffer, priorities,
// errors, and concurrent threads.
#include <tensordict/lazy_stack.h>
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/storage/shared.h>

#include "rb/redis_storages.h"

#include <atomic>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
namespace rb = tensordict::rb;
namespace td = tensordict;

namespace {

// The 5-leaf transition of the benchmarks: obs float[4], action int64,
// reward float, done bool, next/obs float[4].
td::Schema transition_schema() {
  return td::Schema{{"obs", {{4}, at::kFloat}},
                    {"action", {{}, at::kLong}},
                    {"reward", {{}, at::kFloat}},
                    {"done", {{}, at::kBool}},
                    {{"next", "obs"}, {{4}, at::kFloat}}};
}

// n transitions whose every leaf encodes its item id (first + k), so a row
// read back tells which item it holds and whether it is whole.
td::TensorDict transitions(int64_t first, int64_t n) {
  at::Tensor id = at::arange(first, first + n, at::kLong);
  at::Tensor f = id.to(at::kFloat);
  return td::TensorDict(
      {{"obs", f.unsqueeze(1).repeat({1, 4})},
       {"action", id.clone()},
       {"reward", f.clone()},
       {"done", id.remainder(2).eq(0)},
       {"next", td::TensorDict({{"obs", f.unsqueeze(1).repeat({1, 4}) + 0.5}}, {n})}},
      {n});
}

td::TensorDict transition(int64_t id) { return transitions(id, 1)[0]; }

// The item id held by each row, after checking that the row is whole.
std::vector<int64_t> ids_of(const td::TensorDictBase& rows) {
  at::Tensor action = rows.get("action");
  at::Tensor f = action.to(at::kFloat);
  EXPECT_TRUE(torch::equal(rows.get("obs"), f.unsqueeze(1).repeat({1, 4})));
  EXPECT_TRUE(torch::equal(rows.get("reward"), f));
  EXPECT_TRUE(torch::equal(rows.get("done"), action.remainder(2).eq(0)));
  EXPECT_TRUE(torch::equal(rows.get({"next", "obs"}), f.unsqueeze(1).repeat({1, 4}) + 0.5));
  std::vector<int64_t> out(action.data_ptr<int64_t>(), action.data_ptr<int64_t>() + action.numel());
  return out;
}

// True when rows [from, end) of the storage are still all zeros.
bool unwritten_from(const td::TensorDictBase& storage, int64_t from) {
  for (const auto& key : storage.keys(true, true))
    if (storage.get(key).narrow(0, from, storage.batch_size()[0] - from).ne(0).any().item<bool>())
      return false;
  return true;
}

// The directories made so far, removed when their test ends.
std::vector<fs::path>& made_dirs() {
  static std::vector<fs::path> dirs;
  return dirs;
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("tensordict-rb-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  made_dirs().push_back(dir);
  return dir;
}

// The shared-memory buffers made so far, unlinked when their test ends.
std::vector<std::string>& shared_names() {
  static std::vector<std::string> names;
  return names;
}

// A pre-allocated storage of `capacity` rows of each kind.
td::TensorDictBase make_storage(const std::string& kind, int64_t capacity) {
  if (kind == "memory") return td::from_schema(transition_schema(), {capacity});
  if (kind == "shared") {
    td::TensorDictBase st = td::from_schema(transition_schema(), {capacity}, td::storage::Shared{});
    shared_names().push_back(st.shared_name());
    return st;
  }
  if (kind == "memmap") {
    fs::path dir = fresh_dir("memmap-" + std::to_string(capacity));
    return td::from_schema(transition_schema(), {capacity}, td::storage::Memmap{dir.string()});
  }
  if (kind == "h5") {
    fs::path dir = fresh_dir("h5-" + std::to_string(capacity));
    fs::create_directories(dir);
    return td::from_schema(transition_schema(), {capacity}, "h5",
                           {{"filename", (dir / "buffer.h5").string()}});
  }
#ifdef TENSORDICT_RB_TEST_REDIS
  if (rb::test::is_redis_kind(kind))
    return rb::test::make_redis_storage(kind, transition_schema(), {capacity});
#endif
  std::vector<td::TensorDictBase> rows;
  td::TensorDictBase zeros = td::from_schema(transition_schema(), {capacity});
  for (int64_t i = 0; i < capacity; ++i) rows.push_back(zeros[i].clone());
  return td::lazy_stack(rows);
}

// Unlinks the shared-memory buffers and removes the directories made so far.
void remove_storages() {
  for (const std::string& name : shared_names()) td::unlink_shared(name);
  shared_names().clear();
  for (const fs::path& dir : made_dirs()) fs::remove_all(dir);
  made_dirs().clear();
}

class ReplayBufferOver : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override { remove_storages(); }
};

}  // namespace

TEST_P(ReplayBufferOver, AddAndExtendWrapAround) {
  rb::ReplayBuffer buffer(make_storage(GetParam(), 5));
  EXPECT_EQ(buffer.capacity(), 5);
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_EQ(buffer.add(transition(100)), 0);
  EXPECT_EQ(buffer.add(transition(101)), 1);
  at::Tensor rows = buffer.extend(transitions(102, 5));  // rows 2, 3, 4, 0, 1
  EXPECT_TRUE(torch::equal(rows, torch::tensor({2, 3, 4, 0, 1}, torch::kLong)));
  EXPECT_EQ(buffer.size(), 5);
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{2, 7}));
  EXPECT_EQ(ids_of(buffer.storage()), (std::vector<int64_t>{105, 106, 102, 103, 104}));
  EXPECT_EQ(buffer.add(transition(107)), 2);
  EXPECT_EQ(ids_of(buffer.storage()), (std::vector<int64_t>{105, 106, 107, 103, 104}));
}

TEST_P(ReplayBufferOver, OverlongExtendKeepsTheLastCapacityItems) {
  rb::ReplayBuffer buffer(make_storage(GetParam(), 4));
  buffer.add(transition(0));
  // Items 1..10 from cursor 1: item k goes to row (1 + k) % 4; the last 4
  // (7, 8, 9, 10) survive in rows 3, 0, 1, 2.
  at::Tensor rows = buffer.extend(transitions(1, 10));
  EXPECT_TRUE(torch::equal(rows, torch::tensor({3, 0, 1, 2}, torch::kLong)));
  EXPECT_EQ(ids_of(buffer.storage()), (std::vector<int64_t>{8, 9, 10, 7}));
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{3, 11}));
}

TEST_P(ReplayBufferOver, SampleReturnsTheRowsAndTheirIndex) {
  rb::ReplayBuffer buffer(make_storage(GetParam(), 8));
  buffer.extend(transitions(10, 6));
  buffer.manual_seed(3);
  td::TensorDict s = buffer.sample(64);
  EXPECT_EQ(s.batch_size().vec(), (std::vector<int64_t>{64}));
  at::Tensor index = s.get("index");
  EXPECT_EQ(index.scalar_type(), at::kLong);
  EXPECT_FALSE(s.contains("priority_weight"));
  const std::vector<int64_t> ids = ids_of(s);
  for (int64_t b = 0; b < 64; ++b) {
    const int64_t row = index[b].item<int64_t>();
    ASSERT_LT(row, 6);  // only filled rows
    EXPECT_EQ(ids[b], 10 + row);
  }
  // A sample is a copy: changing it leaves the storage alone.
  s.get("reward").fill_(-1);
  EXPECT_EQ(ids_of(buffer.storage().index({at::indexing::Slice(0, 6)})),
            (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  buffer.manual_seed(3);
  EXPECT_TRUE(torch::equal(buffer.sample(64).get("index"), index));
}

TEST_P(ReplayBufferOver, BadRowsWriteNothing) {
  rb::ReplayBuffer buffer(make_storage(GetParam(), 4));
  buffer.add(transition(1));
  const rb::WriterState before = buffer.writer_state();
  auto bad = [&](const std::function<void(td::TensorDict&)>& edit) {
    td::TensorDict row = transition(50);
    edit(row);
    return row;
  };
  EXPECT_THROW(buffer.add(bad([](td::TensorDict& r) { r.set("extra", torch::zeros({2})); })),
               td::KeyError);
  EXPECT_THROW(buffer.add(bad([](td::TensorDict& r) { r.del_("reward"); })), td::KeyError);
  EXPECT_THROW(buffer.add(bad([](td::TensorDict& r) {
    r.set({"next", "reward"}, torch::zeros({}));
  })),
               td::KeyError);
  EXPECT_THROW(buffer.add(bad([](td::TensorDict& r) { r.set("obs", torch::zeros({5})); })),
               td::ShapeError);
  EXPECT_THROW(
      buffer.add(bad([](td::TensorDict& r) { r.set("action", torch::zeros({}, torch::kInt)); })),
      td::TypeError);
  EXPECT_THROW(buffer.add(transitions(0, 2)), td::ShapeError);  // a batch, not a row
  EXPECT_THROW(buffer.extend(transition(0)), td::ShapeError);   // a row, not a batch
  td::TensorDict batch = transitions(60, 3);
  batch.set({"next", "obs"}, torch::zeros({3, 4}, torch::kDouble));
  EXPECT_THROW(buffer.extend(batch), td::TypeError);
  try {
    buffer.add(bad([](td::TensorDict& r) { r.set("obs", torch::zeros({5})); }));
  } catch (const td::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("obs"), std::string::npos) << e.what();
  }
  try {
    buffer.add(bad([](td::TensorDict& r) { r.set("extra", torch::zeros({2})); }));
  } catch (const td::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("extra"), std::string::npos) << e.what();
  }
  EXPECT_EQ(buffer.writer_state(), before);
  EXPECT_EQ(ids_of(buffer.storage().index({at::indexing::Slice(0, 1)})), (std::vector<int64_t>{1}));
  EXPECT_TRUE(unwritten_from(buffer.storage(), 1));
  EXPECT_FALSE(buffer.storage().contains("extra"));
}

TEST_P(ReplayBufferOver, WithoutReplacementCoversEveryRowOncePerEpoch) {
  rb::ReplayBuffer buffer(make_storage(GetParam(), 12),
                          std::make_shared<rb::SamplerWithoutReplacement>());
  buffer.extend(transitions(0, 12));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> seen;
    for (int b = 0; b < 3; ++b)
      for (int64_t id : ids_of(buffer.sample(4))) seen.insert(id);
    std::multiset<int64_t> all;
    for (int64_t i = 0; i < 12; ++i) all.insert(i);
    EXPECT_EQ(seen, all);
  }
}

TEST_P(ReplayBufferOver, PrioritizedSamplingAndUpdates) {
  auto sampler = std::make_shared<rb::PrioritizedSampler>(8, 1.0, 0.5, 0.0);
  rb::ReplayBuffer buffer(make_storage(GetParam(), 8), sampler);
  buffer.extend(transitions(0, 8));
  buffer.manual_seed(4);
  td::TensorDict s = buffer.sample(32);
  ASSERT_TRUE(s.contains("priority_weight"));
  EXPECT_TRUE(torch::equal(s.get("priority_weight"), torch::ones({32})));  // all priorities 1
  // Row 5 gets priority 1000, the others 1 (td_error of shape [B, 1]: reduced by max).
  td::TensorDict upd({{"index", torch::tensor({5, 6}, torch::kLong)},
                      {"td_error", torch::tensor({{1000.0, 3.0}, {0.5, 1.0}})}},
                     {2});
  buffer.update_tensordict_priority(upd);
  EXPECT_EQ(sampler->max_priority(), 1000.0);
  at::Tensor idx = buffer.sample(2000).get("index");
  const double share = idx.eq(5).sum().item<double>() / 2000.0;
  EXPECT_GT(share, 0.97);  // 1000 / 1007 = 0.993
  // Weights: (w_i / min w)^-0.5 with min w = 1.
  td::TensorDict t = buffer.sample(200);
  at::Tensor w = t.get("priority_weight");
  at::Tensor i = t.get("index");
  for (int64_t b = 0; b < 200; ++b) {
    const double expected = i[b].item<int64_t>() == 5 ? std::pow(1000.0, -0.5) : 1.0;
    ASSERT_NEAR(w[b].item<float>(), expected, 1e-6);
  }
  // A new row gets the largest priority.
  buffer.add(transition(99));
  EXPECT_EQ(sampler->sum_tree().get(torch::tensor({0}, torch::kLong)).item<double>(), 1000.0);
  // Bad updates change nothing.
  const at::Tensor leaves = sampler->sum_tree().leaves();
  EXPECT_THROW(buffer.update_priority(torch::tensor({8}, torch::kLong), torch::tensor({1.0})),
               td::IndexError);
  EXPECT_THROW(
      buffer.update_priority(torch::tensor({1}, torch::kLong), torch::tensor({std::nan("")})),
      td::ValueError);
  EXPECT_THROW(
      buffer.update_priority(torch::tensor({1, 2}, torch::kLong), torch::tensor({1.0, 2.0, 3.0})),
      td::ShapeError);
  EXPECT_THROW(buffer.update_tensordict_priority(t), td::KeyError);  // no td_error
  EXPECT_TRUE(torch::equal(sampler->sum_tree().leaves(), leaves));
}

// HDF5 and the Redis stores when their components are built.
std::vector<std::string> storage_kinds() {
  std::vector<std::string> kinds{"memory", "memmap", "shared", "lazy_stack"};
#ifdef TENSORDICT_RB_TEST_HDF5
  kinds.emplace_back("h5");
#endif
#ifdef TENSORDICT_RB_TEST_REDIS
  for (std::string& kind : rb::test::redis_storage_kinds()) kinds.push_back(std::move(kind));
#endif
  return kinds;
}
const std::vector<std::string> kStorages = storage_kinds();

INSTANTIATE_TEST_SUITE_P(Storages, ReplayBufferOver, ::testing::ValuesIn(kStorages),
                         [](const auto& info) { return info.param; });

TEST(ReplayBuffer, LazyAllocationFromTheFirstWrite) {
  rb::ReplayBuffer buffer(6);
  EXPECT_FALSE(buffer.storage().defined());
  EXPECT_THROW(buffer.sample(2), td::ValueError);
  buffer.add(transition(7));
  td::TensorDictBase st = buffer.storage();
  ASSERT_TRUE(st.defined());
  EXPECT_EQ(st.batch_size().vec(), (std::vector<int64_t>{6}));
  EXPECT_EQ(st.get({"next", "obs"}).sizes().vec(), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(st.get("done").scalar_type(), at::kBool);
  EXPECT_EQ(ids_of(st.index({at::indexing::Slice(0, 1)})), (std::vector<int64_t>{7}));
  EXPECT_TRUE(unwritten_from(st, 1));
  EXPECT_THROW(buffer.add(td::TensorDict({{"obs", torch::zeros({4})}})), td::KeyError);
}

TEST(ReplayBuffer, LazyMemmapStorageOnDisk) {
  const fs::path dir = fresh_dir("lazy-memmap");
  {
    rb::ReplayBuffer buffer(10, nullptr, "memmap", {{"prefix", dir.string()}});
    buffer.extend(transitions(20, 4));
    EXPECT_TRUE(buffer.storage().is_memmap());
  }
  // The rows are in the files: reloaded from the directory alone.
  td::TensorDictBase back = td::load_memmap(dir.string());
  EXPECT_EQ(ids_of(back.index({at::indexing::Slice(0, 4)})),
            (std::vector<int64_t>{20, 21, 22, 23}));
  fs::remove_all(dir);
}

TEST(ReplayBuffer, NonContiguousInput) {
  rb::ReplayBuffer buffer(make_storage("memory", 6));
  td::TensorDict batch = transitions(0, 8);
  // Every other item: strided views of each leaf.
  buffer.extend(batch.index({at::indexing::Slice(0, 8, 2)}));
  EXPECT_EQ(ids_of(buffer.storage().index({at::indexing::Slice(0, 4)})),
            (std::vector<int64_t>{0, 2, 4, 6}));
  // Wrapping, from cursor 4.
  buffer.extend(batch.index({at::indexing::Slice(1, 8, 2)}));
  EXPECT_EQ(ids_of(buffer.storage()), (std::vector<int64_t>{5, 7, 4, 6, 1, 3}));
}

TEST(ReplayBuffer, ConstructorChecksAndEmpty) {
  // (memory storages only: nothing to remove)
  EXPECT_THROW(rb::ReplayBuffer(0), td::ValueError);
  EXPECT_THROW(rb::ReplayBuffer(td::from_schema(transition_schema(), {2, 3, 2})), td::ShapeError);
  EXPECT_THROW(rb::ReplayBuffer(make_storage("memory", 4),
                                std::make_shared<rb::PrioritizedSampler>(5, 0.6, 0.4)),
               td::ValueError);
  rb::ReplayBuffer buffer(make_storage("memory", 4));
  buffer.extend(transitions(0, 3));
  EXPECT_THROW(buffer.sample(0), td::ValueError);
  EXPECT_THROW(buffer.load_writer_state({4, 0}), td::ValueError);
  buffer.empty();
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_THROW(buffer.sample(1), td::ValueError);
  buffer.load_writer_state({3, 3});
  EXPECT_EQ(buffer.size(), 3);
  EXPECT_EQ(buffer.add(transition(9)), 3);
}

// The thread contract: writers, samplers and priority updates at once on one
// buffer. Every sampled row must be whole (all leaves from one item), and the
// writer must count every item.
TEST(ReplayBuffer, ConcurrentWritersSamplersAndUpdates) {
  for (const std::string kind : {"memory", "memmap"}) {
    auto sampler = std::make_shared<rb::PrioritizedSampler>(64, 0.6, 0.4);
    rb::ReplayBuffer buffer(make_storage(kind, 64), sampler);
    buffer.add(transition(0));
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w)
      threads.emplace_back([&, w] {
        for (int i = 0; i < 200; ++i) {
          if (i % 2)
            buffer.add(transition(1000 * (w + 1) + i));
          else
            buffer.extend(transitions(100000 * (w + 1) + 10 * i, 7));
        }
      });
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          td::TensorDict s = buffer.sample(16);
          at::Tensor a = s.get("action").to(at::kFloat);
          if (!torch::equal(s.get("reward"), a) ||
              !torch::equal(s.get({"next", "obs"}), a.unsqueeze(1).repeat({1, 4}) + 0.5))
            failed = true;
          s.set("td_error", torch::rand({16}));
          buffer.update_tensordict_priority(s);
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_FALSE(failed) << kind << ": a sample saw a torn row";
    EXPECT_EQ(buffer.writer_state().write_count, 1 + 2 * (100 + 100 * 7)) << kind;
    EXPECT_EQ(buffer.size(), 64);
  }
  remove_storages();
}

namespace {

// A user's sampler that overrides on_write() only: it must still hear of
// every row, those of add() included (the default on_write_row()).
class RecordingSampler : public rb::Sampler {
 public:
  rb::SampleInfo sample(int64_t size, int64_t batch_size, at::Generator*) override {
    return {at::arange(batch_size, at::kLong).remainder_(size), at::Tensor()};
  }
  void on_write(const at::Tensor& rows) override {
    for (int64_t i = 0; i < rows.numel(); ++i) written.push_back(rows[i].item<int64_t>());
  }
  std::string name() const override { return "RecordingSampler"; }
  std::vector<int64_t> written;
};

}  // namespace

TEST(ReplayBuffer, CustomSamplerHearsEveryWrite) {
  auto sampler = std::make_shared<RecordingSampler>();
  rb::ReplayBuffer buffer(make_storage("memory", 4), sampler);
  buffer.add(transition(0));
  buffer.extend(transitions(1, 5));
  // Items 1..5 from cursor 1 into 4 rows: the last 4 (2..5) land in rows 2, 3, 0, 1.
  EXPECT_EQ(sampler->written, (std::vector<int64_t>{0, 2, 3, 0, 1}));
  EXPECT_EQ(ids_of(buffer.sample(3)), (std::vector<int64_t>{4, 5, 2}));
}

// Rows of 4 KiB or more (image frames) are gathered by index_select, smaller
// ones row by row: both give the sampled rows, in the sampled order.
TEST(ReplayBufferSample, GathersLargeAndSmallRowsAlike) {
  const int64_t n = 16;
  for (const std::string storage : {"memory", "shared"}) {
    rb::ReplayBuffer buffer(
        td::from_schema(td::Schema{{"frame", {{64, 80}, at::kByte}}, {"id", {{}, at::kLong}}}, {n},
                        storage),
        nullptr);
    const rb::test::ReleaseSharedStorage release(buffer);  // a segment outlives the process
    at::Tensor ids = at::arange(n, at::kLong);
    buffer.extend(td::TensorDict(
        {{"frame", ids.to(at::kByte).view({n, 1, 1}).expand({n, 64, 80}).contiguous()},
         {"id", ids}},
        {n}));
    buffer.manual_seed(3);
    td::TensorDict s = buffer.sample(256);
    at::Tensor index = s.get("index");
    EXPECT_TRUE(at::equal(s.get("id"), index)) << storage;
    EXPECT_TRUE(
        at::equal(s.get("frame"), index.to(at::kByte).view({256, 1, 1}).expand({256, 64, 80})))
        << storage;
    EXPECT_LT(index.min().item<int64_t>(), index.max().item<int64_t>()) << storage;
  }
}
