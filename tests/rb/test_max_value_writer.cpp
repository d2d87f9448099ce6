// TensorDictMaxValueWriter through a ReplayBuffer: hand-computed streams
// (fill, replace the lowest, drop, two items for one row in one extend, ties
// by row), reductions of per-step ranks, bad input changing nothing, its
// checkpoint files; and the same stream as the real TorchRL (run in a child
// process) with the same kept rows, returned indices and heap, including
// checkpoints handed over midway in both directions. The hand-computed
// stream runs over the Redis stores too (rb/redis_storages.h).
#include <tensordict/errors.h>
#include <tensordict/rb/replay_buffer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "rb/redis_storages.h"
#include "rb/torchrl_child.h"

namespace fs = std::filesystem;
namespace rb = tensordict::rb;
namespace td = tensordict;
using json = nlohmann::json;

namespace {

using Top = std::vector<std::pair<double, int64_t>>;

// Items with the given scalar rewards; "id" numbers them from `first`.
td::TensorDict rewarded(const std::vector<float>& rewards, int64_t first = 0) {
  const auto n = static_cast<int64_t>(rewards.size());
  return td::TensorDict(
      {{"reward", at::tensor(rewards)}, {"id", at::arange(first, first + n, at::kLong)}}, {n});
}

td::TensorDict one(float reward, int64_t id) { return rewarded({reward}, id)[0]; }

std::vector<int64_t> as_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::shared_ptr<rb::TensorDictMaxValueWriter> writer_of(const rb::ReplayBuffer& buffer) {
  return std::dynamic_pointer_cast<rb::TensorDictMaxValueWriter>(buffer.writer());
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("td_rb_max_value_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// Over every storage the buffer makes at the first write.
class MaxValueWriterOver : public ::testing::TestWithParam<std::string> {};

TEST_P(MaxValueWriterOver, KeepsTheTopRanksAsHandComputed) {
  const auto [storage, options] = rb::test::lazy_storage(GetParam());
  rb::ReplayBuffer buffer(3, nullptr, storage, options,
                          std::make_shared<rb::TensorDictMaxValueWriter>("reward"));
  const rb::test::ReleaseSharedStorage release(buffer);
  EXPECT_EQ(as_vector(buffer.extend(rewarded({1, 5, 3}, 0))), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(buffer.add(one(0.5f, 3)), -1);  // below the lowest kept (1): dropped
  EXPECT_EQ(buffer.add(one(4, 4)), 0);      // replaces rank 1 in row 0
  // heap (3,2) (4,0) (5,1): 2 is dropped, the first 6 replaces row 2, the
  // second 6 replaces (4,0).
  EXPECT_EQ(as_vector(buffer.extend(rewarded({2, 6, 6}, 5))), (std::vector<int64_t>{-1, 2, 0}));
  EXPECT_EQ(as_vector(buffer.storage().get("id")), (std::vector<int64_t>{7, 1, 6}));
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{0, 6}));
  EXPECT_EQ(buffer.size(), 3);
  EXPECT_EQ(writer_of(buffer)->top_values(), (Top{{5, 1}, {6, 0}, {6, 2}}));
  // Sampling reads only kept rows.
  buffer.manual_seed(1);
  const at::Tensor ids = buffer.sample(64).get("id");
  EXPECT_TRUE(ids.eq(1).logical_or(ids.eq(6)).logical_or(ids.eq(7)).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Storages, MaxValueWriterOver,
                         ::testing::ValuesIn(rb::test::lazy_storage_kinds()),
                         [](const auto& info) { return info.param; });

TEST(TensorDictMaxValueWriter, TwoItemsForOneRowInOneExtendKeepTheLater) {
  rb::ReplayBuffer buffer(2, nullptr, "memory", {},
                          std::make_shared<rb::TensorDictMaxValueWriter>("reward"));
  buffer.extend(rewarded({1, 5}, 0));
  // 2 replaces (1, row 0) and is then the lowest: 3 replaces it in row 0.
  EXPECT_EQ(as_vector(buffer.extend(rewarded({2, 3}, 2))), (std::vector<int64_t>{-1, 0}));
  EXPECT_EQ(as_vector(buffer.storage().get("id")), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(buffer.writer_state().write_count, 4);
}

TEST(TensorDictMaxValueWriter, TiesAreBrokenByRowAndEqualRanksDoNotReplace) {
  rb::ReplayBuffer buffer(2, nullptr, "memory", {},
                          std::make_shared<rb::TensorDictMaxValueWriter>("reward"));
  buffer.extend(rewarded({1, 1}, 0));
  EXPECT_EQ(buffer.add(one(1, 2)), -1);  // not strictly higher
  EXPECT_EQ(buffer.add(one(2, 3)), 0);   // (1, 0) < (1, 1): row 0 goes first
  EXPECT_EQ(buffer.add(one(2, 4)), 1);
  EXPECT_EQ(as_vector(buffer.storage().get("id")), (std::vector<int64_t>{3, 4}));
}

TEST(TensorDictMaxValueWriter, ReducesPerStepRanks) {
  // Two items of three per-step rewards: sums 3 and 0, maxima 1 and 9.
  auto data = [](int64_t first) {
    return td::TensorDict(
        {{"next",
          td::TensorDict({{"reward", at::tensor({1.f, 1.f, 1.f, 9.f, -4.f, -5.f}).view({2, 3})}},
                         {2})},
         {"id", at::arange(first, first + 2, at::kLong)}},
        {2});
  };
  const std::vector<std::pair<rb::RankReduction, int64_t>> cases = {
      {rb::RankReduction::kSum, 0}, {rb::RankReduction::kMax, 1}, {rb::RankReduction::kMean, 0}};
  for (const auto& [reduction, winner] : cases) {
    rb::ReplayBuffer buffer(
        1, nullptr, "memory", {},
        std::make_shared<rb::TensorDictMaxValueWriter>(td::NestedKey{"next", "reward"}, reduction));
    buffer.extend(data(0));
    EXPECT_EQ(buffer.storage().get("id").item<int64_t>(), winner);
  }
  rb::TensorDictMaxValueWriter by_name(td::NestedKey{"next", "reward"}, "min");
  EXPECT_EQ(by_name.reduction(), rb::RankReduction::kMin);
  EXPECT_THROW(rb::TensorDictMaxValueWriter("reward", "product"), td::ValueError);

  // No reduction: a per-step rank is refused, naming the key, and nothing changes.
  rb::ReplayBuffer strict(2, nullptr, "memory", {},
                          std::make_shared<rb::TensorDictMaxValueWriter>(
                              td::NestedKey{"next", "reward"}, rb::RankReduction::kNone));
  try {
    strict.extend(data(0));
    FAIL() << "a [2, 3] rank was taken without a reduction";
  } catch (const td::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("('next', 'reward')"), std::string::npos) << e.what();
  }
  EXPECT_EQ(strict.size(), 0);
  EXPECT_EQ(strict.writer_state(), (rb::WriterState{0, 0}));
}

TEST(TensorDictMaxValueWriter, BadInputChangesNothing) {
  rb::ReplayBuffer buffer(3, nullptr, "memory", {},
                          std::make_shared<rb::TensorDictMaxValueWriter>(
                              td::NestedKey{"next", "reward"}));  // TorchRL's default key
  td::TensorDict no_rank({{"reward", at::ones({2})}, {"id", at::arange(2)}}, {2});
  try {
    buffer.extend(no_rank);
    FAIL() << "no rank entry, yet written";
  } catch (const td::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("('next', 'reward')"), std::string::npos) << e.what();
  }
  EXPECT_EQ(buffer.size(), 0);

  rb::ReplayBuffer filled(2, nullptr, "memory", {},
                          std::make_shared<rb::TensorDictMaxValueWriter>("reward"));
  filled.extend(rewarded({1, 2}, 0));
  const Top before = writer_of(filled)->top_values();
  // NaN ranks and a non-tensor-compatible batch are refused before any change.
  EXPECT_THROW(filled.extend(rewarded({std::nanf(""), 7}, 2)), td::ValueError);
  td::TensorDict complex_rank({{"reward", at::ones({2}, at::kComplexFloat)}, {"id", at::arange(2)}},
                              {2});
  EXPECT_THROW(filled.extend(complex_rank), td::TypeError);
  EXPECT_EQ(writer_of(filled)->top_values(), before);
  EXPECT_EQ(filled.writer_state(), (rb::WriterState{0, 2}));
  EXPECT_EQ(as_vector(filled.storage().get("id")), (std::vector<int64_t>{0, 1}));
  // A cursor alone cannot rebuild the kept ranks.
  EXPECT_THROW(filled.load_writer_state(rb::WriterState{1, 5}), td::UnsupportedError);
  filled.empty();
  EXPECT_EQ(filled.size(), 0);
  EXPECT_TRUE(writer_of(filled)->top_values().empty());
  EXPECT_EQ(filled.extend(rewarded({0.5f}, 9)).item<int64_t>(), 0);
}

TEST(TensorDictMaxValueWriter, CheckpointRoundTripAndRefusals) {
  auto make = [](const td::NestedKey& key = "reward") {
    return rb::ReplayBuffer(4, nullptr, "memory", {},
                            std::make_shared<rb::TensorDictMaxValueWriter>(key));
  };
  rb::ReplayBuffer a = make();
  a.extend(rewarded({3, 1, 4, 1, 5, 9, 2, 6}, 0));
  const fs::path dir = fresh_dir("roundtrip");
  a.dumps(dir);
  const json meta = json::parse(std::ifstream(dir / "writer" / "metadata.json"));
  EXPECT_EQ(meta["rank_key"], "reward");
  EXPECT_EQ(meta["shape"], json::array({4, 2}));
  EXPECT_EQ(meta["write_count"], 7);  // 3, 1, 4, 1 fill; 5, 9, 6 replace; 2 dropped

  rb::ReplayBuffer b = make();
  b.loads(dir);
  EXPECT_EQ(writer_of(b)->top_values(), writer_of(a)->top_values());
  EXPECT_EQ(b.writer_state(), a.writer_state());
  // Both go on alike.
  const td::TensorDict more = rewarded({4.5f, 0, 8, 3.5f}, 8);
  EXPECT_TRUE(a.extend(more).equal(b.extend(more)));
  EXPECT_TRUE(a.storage().get("id").equal(b.storage().get("id")));

  // Another writer kind or rank key: refused, the buffer unchanged.
  rb::ReplayBuffer round_robin(4);
  round_robin.extend(rewarded({1, 2}, 0));
  EXPECT_THROW(round_robin.loads(dir), td::ValueError);
  EXPECT_EQ(round_robin.size(), 2);
  rb::ReplayBuffer other_key = make(td::NestedKey{"next", "reward"});
  EXPECT_THROW(other_key.loads(dir), td::ValueError);
  const fs::path rr_dir = fresh_dir("round_robin");
  round_robin.dumps(rr_dir);
  rb::ReplayBuffer c = make();
  EXPECT_THROW(c.loads(rr_dir), td::ValueError);
  EXPECT_EQ(c.size(), 0);

  // A heap that does not name each filled row once is a FormatError.
  json bad = meta;
  bad["shape"] = json::array({3, 2});
  std::ofstream(dir / "writer" / "metadata.json", std::ios::trunc) << bad.dump();
  EXPECT_THROW(c.loads(dir), td::FormatError);
  EXPECT_EQ(c.size(), 0);
  fs::remove_all(dir);
  fs::remove_all(rr_dir);
}

// ---- against TorchRL ---------------------------------------------------------------------

// The stream of torchrl_slice_writer.py (max_value_items, MAX_VALUE_OPS).
constexpr int64_t kStreamCapacity = 8;
const std::vector<int64_t> kOps = {5, 0, 9, 3, 0, 11, 10};

float rank_of(int64_t i) { return float((i * 7) % 13 - 6) / 2; }

td::TensorDict stream_items(const std::string& kase, int64_t first, int64_t count) {
  const at::Tensor ids = at::arange(first, first + count, at::kLong);
  std::vector<float> r;
  for (int64_t i = first; i < first + count; ++i) r.push_back(rank_of(i));
  const at::Tensor base = at::tensor(r);
  td::TensorDict out(
      {{"id", ids}, {"obs", at::stack({ids.to(at::kFloat), -ids.to(at::kFloat)}, -1)}}, {count});
  if (kase == "scalar")
    out.set("reward", base);
  else
    out.set(td::NestedKey{"next", "reward"},
            at::stack({base, -base / 2, ids.remainder(3).to(at::kFloat) - 1}, -1));
  return out;
}

rb::ReplayBuffer stream_buffer(const std::string& kase) {
  std::shared_ptr<rb::Writer> writer;
  if (kase == "scalar")
    writer = std::make_shared<rb::TensorDictMaxValueWriter>("reward");
  else
    writer = std::make_shared<rb::TensorDictMaxValueWriter>(td::NestedKey{"next", "reward"},
                                                            kase == "vector_sum" ? "sum" : "max");
  return rb::ReplayBuffer(kStreamCapacity, nullptr, "memory", {}, writer);
}

// Runs operations [from, to) of the stream; the JSON torchrl_slice_writer.py prints.
json run_stream(rb::ReplayBuffer& buffer, const std::string& kase, std::size_t from,
                std::size_t to) {
  int64_t item = 0;
  for (std::size_t k = 0; k < from; ++k) item += std::max<int64_t>(kOps[k], 1);
  json returned = json::array();
  for (std::size_t k = from; k < to; ++k) {
    if (kOps[k] == 0) {
      returned.push_back(json::array({buffer.add(stream_items(kase, item, 1)[0])}));
      item += 1;
    } else {
      returned.push_back(as_vector(buffer.extend(stream_items(kase, item, kOps[k]))));
      item += kOps[k];
    }
  }
  json top = json::array();
  for (const auto& [rank, row] : writer_of(buffer)->top_values())
    top.push_back(json::array({rank, row}));
  std::sort(top.begin(), top.end());
  return {{"returned", returned},
          {"ids", as_vector(buffer.storage().get("id").narrow(0, 0, buffer.size()))},
          {"cursor", buffer.writer_state().cursor},
          {"write_count", buffer.writer_state().write_count},
          {"top", top}};
}

class MaxValueAgainstTorchRL : public ::testing::TestWithParam<std::string> {};

TEST_P(MaxValueAgainstTorchRL, SameStreamSameRows) {
  const std::string kase = GetParam();
  const json torchrl = rb::test::run_torchrl("max_value " + kase);
  rb::ReplayBuffer buffer = stream_buffer(kase);
  const json mine = run_stream(buffer, kase, 0, kOps.size());
  EXPECT_EQ(mine["returned"], torchrl["returned"]);
  EXPECT_EQ(mine["ids"], torchrl["ids"]);
  EXPECT_EQ(mine["cursor"], torchrl["cursor"]);
  EXPECT_EQ(mine["write_count"], torchrl["write_count"]);
  EXPECT_EQ(mine["top"], torchrl["top"]);
}

TEST_P(MaxValueAgainstTorchRL, CheckpointsHandedOverMidway) {
  const std::string kase = GetParam();
  rb::ReplayBuffer whole = stream_buffer(kase);
  json expected = run_stream(whole, kase, 0, kOps.size());

  // TorchRL writes the first four operations and dumps; C++ loads and goes on.
  const fs::path from_torchrl = fresh_dir("from_torchrl_" + kase);
  rb::test::run_torchrl("max_value " + kase + " --ops 0:4 --dump " + from_torchrl.string());
  rb::ReplayBuffer resumed = stream_buffer(kase);
  resumed.loads(from_torchrl);
  json mine = run_stream(resumed, kase, 4, kOps.size());
  EXPECT_EQ(mine["ids"], expected["ids"]);
  EXPECT_EQ(mine["top"], expected["top"]);
  EXPECT_EQ(mine["write_count"], expected["write_count"]);
  json tail(expected["returned"].begin() + 4, expected["returned"].end());
  EXPECT_EQ(mine["returned"], tail);

  // C++ writes the first four and dumps; TorchRL loads and goes on.
  const fs::path from_cpp = fresh_dir("from_cpp_" + kase);
  rb::ReplayBuffer first = stream_buffer(kase);
  run_stream(first, kase, 0, 4);
  first.dumps(from_cpp);
  const json torchrl =
      rb::test::run_torchrl("max_value " + kase + " --ops 4:7 --load " + from_cpp.string());
  EXPECT_EQ(torchrl["ids"], expected["ids"]);
  EXPECT_EQ(torchrl["top"], expected["top"]);
  EXPECT_EQ(torchrl["write_count"], expected["write_count"]);
  EXPECT_EQ(torchrl["returned"], tail);
  fs::remove_all(from_torchrl);
  fs::remove_all(from_cpp);
}

INSTANTIATE_TEST_SUITE_P(Cases, MaxValueAgainstTorchRL,
                         ::testing::Values("scalar", "vector_sum", "vector_max"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
