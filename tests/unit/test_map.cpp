// tensordict::map: chunked, on threads, identical to a serial loop; out=
// writes in place (a memmap included); errors come back from the workers.
#include "pch.h"

#include <tensordict/detail/progress.h>
#include <tensordict/map.h>
#include <tensordict/stack.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace td = tensordict;

namespace {

td::TensorDict rows(int64_t n) {
  td::TensorDict data(
      {{"x", torch::arange(n * 3, torch::kFloat).reshape({n, 3})}, {"id", torch::arange(n)}}, {n});
  data.set({"nested", "y"}, torch::arange(n * 2, torch::kDouble).reshape({n, 2}));
  data.set_non_tensor("tag", nlohmann::json("rows"));
  return data;
}

// Adds a leaf computed from the chunk (and drops nothing).
td::TensorDictBase work(const td::TensorDictBase& chunk) {
  td::TensorDictBase out = chunk.clone();
  out.set("sum", chunk.get("x").sum(-1) + chunk.get({"nested", "y"}).sum(-1));
  return out;
}

td::TensorDictBase serial(const td::TensorDictBase& data) {
  std::vector<td::TensorDictBase> parts;
  for (const auto& row : data.split(1, 0)) parts.push_back(work(row));
  return td::cat(parts, 0);
}

}  // namespace

TEST(Map, ChunksOnThreadsEqualASerialLoop) {
  const auto data = rows(103);
  const auto want = serial(data);
  for (int workers : {1, 2, 4})
    for (int64_t chunksize : {int64_t{-1}, int64_t{1}, int64_t{7}, int64_t{500}}) {
      td::MapOptions opts;
      opts.num_workers = workers;
      opts.chunksize = chunksize;
      auto got = td::map(data, work, opts);
      EXPECT_TRUE(got.equal(want)) << "workers " << workers << " chunksize " << chunksize;
    }
  td::MapOptions opts;
  opts.num_chunks = 5;
  opts.num_workers = 3;
  EXPECT_TRUE(td::map(data, work, opts).equal(want));
}

TEST(Map, ChunksizeZeroStacksElementResults) {
  const auto data = rows(9);
  td::MapOptions opts;
  opts.chunksize = 0;
  opts.num_workers = 3;
  std::atomic<int> calls{0};
  auto got = td::map(
      data,
      [&](const td::TensorDictBase& element) {
        ++calls;
        EXPECT_EQ(element.batch_dims(), 0);
        return work(element);
      },
      opts);
  EXPECT_EQ(calls.load(), 9);
  EXPECT_TRUE(got.equal(serial(data)));
}

TEST(Map, AlongAnotherDimAndOnSeveralThreads) {
  td::TensorDict data({{"x", torch::randn({4, 50, 2})}}, {4, 50});
  td::MapOptions opts;
  opts.dim = -1;
  opts.chunksize = 6;
  opts.num_workers = 4;
  std::mutex m;
  std::set<std::thread::id> threads;
  auto got = td::map(
      data,
      [&](const td::TensorDictBase& chunk) {
        {
          std::lock_guard<std::mutex> lock(m);
          threads.insert(std::this_thread::get_id());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        EXPECT_EQ(chunk.size(0), 4);
        return chunk.apply([](const at::Tensor& t) { return t * 2; });
      },
      opts);
  EXPECT_TRUE(got.get("x").equal(data.get("x") * 2));
  EXPECT_GT(threads.size(), 1u);
}

TEST(Map, OutReceivesResultsInPlaceIncludingMemmap) {
  const auto data = rows(40);
  const auto want = serial(data);
  auto dir = std::filesystem::temp_directory_path() / "td_map_out";
  std::filesystem::remove_all(dir);
  td::TensorDictBase out = want.clone().zero_().memmap(dir.string());
  td::MapOptions opts;
  opts.num_workers = 2;
  opts.chunksize = 6;
  opts.out = out;
  auto got = td::map(data, work, opts);
  EXPECT_TRUE(got.is_same(out));
  EXPECT_TRUE(td::load_memmap(dir.string()).get("sum").equal(want.get("sum")));
  std::filesystem::remove_all(dir);
}

TEST(Map, TheFirstErrorOfAWorkerIsRethrown) {
  const auto data = rows(20);
  td::MapOptions opts;
  opts.num_workers = 2;
  opts.chunksize = 1;
  EXPECT_THROW(td::map(
                   data,
                   [](const td::TensorDictBase& chunk) -> td::TensorDictBase {
                     if (chunk.get("id").item<int64_t>() == 13) throw std::runtime_error("row 13");
                     return chunk;
                   },
                   opts),
               std::runtime_error);
  // Results that do not concatenate (other keys per chunk) fail in cat.
  EXPECT_THROW(td::map(
                   data,
                   [](const td::TensorDictBase& chunk) {
                     const bool odd = chunk.get("id")[0].item<int64_t>() % 2 == 1;
                     return td::TensorDictBase(
                         td::TensorDict({{odd ? "odd" : "even", chunk.get("id")}}, {1}));
                   },
                   opts),
               td::KeyError);
}

TEST(Map, BadOptionsAreErrors) {
  const auto data = rows(4);
  td::MapOptions opts;
  opts.dim = 1;
  EXPECT_THROW(td::map(data, work, opts), td::IndexError);
  opts = {};
  opts.chunksize = -2;
  EXPECT_THROW(td::map(data, work, opts), td::ValueError);
  opts = {};
  opts.num_workers = -1;
  EXPECT_THROW(td::map(data, work, opts), td::ValueError);
  opts = {};
  opts.num_chunks = 0;
  EXPECT_THROW(td::map(data, work, opts), td::ValueError);
  EXPECT_THROW(td::map(td::TensorDict(), work), td::IndexError);
  EXPECT_THROW(td::map(data, nullptr), td::ValueError);
}

TEST(Progress, DrawsOnAStreamAndNothingWhenDisabled) {
  std::ostringstream os;
  {
    td::detail::Progress p("saving", 10, true, &os);
    EXPECT_TRUE(p.active());
    for (int i = 0; i < 10; ++i) p.advance();
  }
  const std::string text = os.str();
  EXPECT_NE(text.find("saving ["), std::string::npos);
  EXPECT_NE(text.find("] 10/10 (100%)"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
  // Under ctest stderr is not a terminal: nothing is drawn.
  if (!td::detail::Progress::stderr_is_terminal()) {
    td::detail::Progress quiet("quiet", 3);
    EXPECT_FALSE(quiet.active());
  }
  td::detail::Progress off("off", 3, false);
  EXPECT_FALSE(off.active());
  off.advance(3);
  EXPECT_EQ(off.done(), 3);
}
