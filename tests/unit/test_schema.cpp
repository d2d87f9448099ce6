// Schema and from_schema: every built-in storage, the string form, the
// registry, and the errors.
#include "support/core_test_helpers.h"

#include <tensordict/schema.h>

#include <sys/resource.h>

#include <filesystem>

using namespace td_test;
namespace fs = std::filesystem;

namespace {

td::Schema replay_schema() {
  return td::Schema{{"obs", {{84, 84, 3}, torch::kUInt8}},
                    {"action", {{4}, torch::kFloat32}},
                    {"reward", {{}, torch::kFloat32}},
                    {{"next", "obs"}, {{84, 84, 3}, torch::kUInt8}}};
}

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("td_schema_" + std::to_string(::getpid()) + "_" + std::to_string(next()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
  static int next() {
    static int n = 0;
    return n++;
  }
};

void expect_zero_filled(const td::TensorDictBase& t, const Shape& batch) {
  EXPECT_EQ(batch_of(t), batch);
  EXPECT_EQ(t.get("obs").sizes().vec(), (Shape{batch[0], 84, 84, 3}));
  EXPECT_EQ(t.get("obs").scalar_type(), torch::kUInt8);
  EXPECT_EQ(t.get("action").sizes().vec(), (Shape{batch[0], 4}));
  EXPECT_EQ(t.get("reward").sizes().vec(), (Shape{batch[0]}));
  EXPECT_EQ(t.get({"next", "obs"}).sizes().vec(), (Shape{batch[0], 84, 84, 3}));
  EXPECT_EQ(t.get_tensordict("next").batch_size().vec(), batch);
  for (const auto& k : t.keys(true, true)) EXPECT_FALSE(t.get(k).any().item<bool>()) << k.repr();
}

long max_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

}  // namespace

TEST(Schema, BuildsInOrderWithNestedKeys) {
  auto s = replay_schema();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s.entries()[3].first, (td::NestedKey{"next", "obs"}));
  EXPECT_TRUE(s.contains({"next", "obs"}));
  EXPECT_EQ(s.at("action").shape, (Shape{4}));
  TD_EXPECT_THROW_MSG(s.at("missing"), td::KeyError, "missing");
  TD_EXPECT_THROW_MSG(s.add("obs", {{1}, torch::kFloat}), td::SchemaError, "'obs'", "twice");
  TD_EXPECT_THROW_MSG(s.add({"obs", "x"}, {{1}, torch::kFloat}), td::SchemaError, "'obs'", "leaf");
  TD_EXPECT_THROW_MSG(s.add("bad", {{-1}, torch::kFloat}), td::SchemaError, "'bad'", "negative");
}

TEST(Schema, JsonRoundTripAndBothSpellings) {
  auto s = replay_schema();
  auto j = s.to_json();
  EXPECT_EQ(j["action"]["dtype"], "torch.float32");
  EXPECT_EQ(j["next"]["obs"]["shape"], nlohmann::json::parse("[84, 84, 3]"));
  EXPECT_TRUE(td::Schema::from_json(j) == s);
  auto short_form = td::Schema::from_json(nlohmann::json::parse(
      R"({"obs": [[2, 3], "uint8"], "nested": {"r": [[], "torch.float64"]}})"));
  EXPECT_EQ(short_form.at("obs").dtype, torch::kUInt8);
  EXPECT_EQ(short_form.at({"nested", "r"}).dtype, torch::kDouble);
  TD_EXPECT_THROW_MSG(td::Schema::from_json(nlohmann::json::parse(R"({"a": [[2], "float99"]})")),
                      td::SchemaError, "float99", "'a'");
  TD_EXPECT_THROW_MSG(td::Schema::from_json(nlohmann::json::parse(R"({"a": {"shape": [2]}})")),
                      td::SchemaError, "'a'", "dtype");
  TD_EXPECT_THROW_MSG(td::Schema::from_json(nlohmann::json::parse(R"({"a": 3})")), td::SchemaError,
                      "'a'");
}

TEST(FromSchema, InMemoryIsZeroFilled) {
  auto t = td::from_schema(replay_schema(), {8});
  EXPECT_TRUE(t.is<td::TensorDict>());
  expect_zero_filled(t, {8});
  EXPECT_FALSE(t.is_locked());
  auto no_batch = td::from_schema(replay_schema(), {});
  EXPECT_EQ(no_batch.get("reward").dim(), 0);
  auto on_cpu = td::from_schema(replay_schema(), {2}, td::storage::Memory{.device = at::kCPU});
  EXPECT_EQ(on_cpu.device(), at::Device(at::kCPU));
}

TEST(FromSchema, MemmapAllocatesNothingInRamAndIsLocked) {
  TempDir dir;
  td::Schema big{{"frames", {{3, 64, 64}, torch::kUInt8}}};  // 1,000,000 rows: 12 GB of files
  long before = max_rss_kb();
  auto t = td::from_schema(big, {1'000'000}, td::storage::Memmap{.prefix = dir.path.string()});
  EXPECT_LT(max_rss_kb() - before, 64 * 1024) << "from_schema touched the file pages";
  EXPECT_TRUE(t.is_memmap());
  EXPECT_TRUE(t.is_locked());
  EXPECT_EQ(fs::file_size(dir.path / "frames.memmap"), 1'000'000ull * 3 * 64 * 64);
  EXPECT_TRUE(td::MemoryMappedTensor::filename(t.get("frames")).has_value());
  // Fill row by row in place.
  t.index_put_({123}, td::TensorDict({{"frames", torch::full({3, 64, 64}, 7, torch::kUInt8)}}));
  EXPECT_EQ(td::load_memmap(dir.path.string()).get("frames")[123][0][0][0].item<int>(), 7);

  TempDir dir2;
  auto r = td::from_schema(replay_schema(), {4}, td::storage::Memmap{.prefix = dir2.path.string()});
  expect_zero_filled(r, {4});
  TD_EXPECT_THROW_MSG(
      td::from_schema(replay_schema(), {4},
                      td::storage::Memmap{.prefix = dir2.path.string(), .existsok = false}),
      td::StorageError, "already exists");
  TD_EXPECT_THROW_MSG(td::from_schema(replay_schema(), {4}, td::storage::Memmap{}), td::SchemaError,
                      "prefix");
}

TEST(FromSchema, SharedMemory) {
  auto t = td::from_schema(replay_schema(), {3}, td::storage::Shared{});
  expect_zero_filled(t, {3});
  EXPECT_TRUE(t.is_shared());
  EXPECT_TRUE(t.is_locked());
  auto other = td::attach_shared(t.shared_name());
  other.set_("reward", torch::ones({3}));
  EXPECT_TRUE(torch::equal(t.get("reward"), torch::ones({3})));
  td::unlink_shared(t.shared_name());
}

TEST(FromSchema, ByNameWithOptions) {
  TempDir dir;
  auto t = td::from_schema(replay_schema(), {2}, "memmap", {{"prefix", dir.path.string()}});
  EXPECT_TRUE(t.is_memmap());
  expect_zero_filled(t, {2});
  EXPECT_TRUE(td::from_schema(replay_schema(), {2}, "memory").is<td::TensorDict>());
  auto shared = td::from_schema(replay_schema(), {2}, "shared");
  EXPECT_TRUE(shared.is_shared());
  td::unlink_shared(shared.shared_name());
  TD_EXPECT_THROW_MSG(td::from_schema(replay_schema(), {2}, "memmap", {{"prefx", "x"}}),
                      td::SchemaError, "unknown option 'prefx'", "prefix");
  TD_EXPECT_THROW_MSG(td::from_schema(replay_schema(), {2}, "memmap", {{"prefix", 3}}),
                      td::SchemaError, "'prefix'", "wrong type");
  TD_EXPECT_THROW_MSG(td::from_schema(replay_schema(), {2}, "zarr"), td::SchemaError,
                      "Unknown storage backend 'zarr'", "memmap, memory, shared");
  TD_EXPECT_THROW_MSG(td::from_schema(replay_schema(), {2}, "redis"), td::SchemaError,
                      "tensordict::redis");
  TD_EXPECT_THROW_MSG(td::from_schema(replay_schema(), {2}, "h5"), td::SchemaError,
                      "tensordict::hdf5");
  TD_EXPECT_THROW_MSG(td::from_schema(replay_schema(), {-1}), td::SchemaError, "batch size");
}

TEST(FromSchema, StoragesRegisterByName) {
  td::detail::register_storage("test-ones", [](const td::Schema& s, const std::vector<int64_t>& b,
                                               const td::StorageOptions&) {
    auto t = td::from_schema(s, b);
    t.fill_(1);
    return t;
  });
  auto names = td::available_storages();
  EXPECT_NE(std::find(names.begin(), names.end(), "test-ones"), names.end());
  auto t = td::from_schema(replay_schema(), {2}, "test-ones");
  EXPECT_TRUE(torch::equal(t.get("action"), torch::ones({2, 4})));
}
