// ReplayBuffer::dumps / loads (TorchRL's checkpoint layout) in C++ alone:
// round trips for each sampler with fewer rows than the capacity, as many and
// more (wrapped), into lazy, written and pre-allocated memmap buffers; the
// all-or-nothing replacement of a checkpoint directory; every corrupt,
// missing or foreign file a FormatError that leaves the loading buffer as it
// was; another capacity, sampler kind or storage layout refused. The
// exchanges with the real TorchRL are python/torchrl_interop.sh.
#include <tensordict/errors.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/schema.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "rb/torchrl_procedure.h"

namespace fs = std::filesystem;
namespace rb = tensordict::rb;
namespace td = tensordict;
using rb::test::check_loaded;
using rb::test::fill;
using rb::test::make_sampler;

namespace {

constexpr int64_t kCapacity = 10;

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
}

void edit_json(const fs::path& file, const std::function<void(nlohmann::ordered_json&)>& edit) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(read_text(file));
  edit(j);
  write_text(file, j.dump());
}

// Every file under `dir` and its bytes.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file())
      out[entry.path().lexically_relative(dir).string()] = read_text(entry.path());
  return out;
}

rb::ReplayBuffer filled(const std::string& sampler, int64_t rows, int64_t capacity = kCapacity) {
  rb::ReplayBuffer buffer(capacity, make_sampler(sampler, capacity));
  buffer.manual_seed(11);
  fill(buffer, rows);
  return buffer;
}

// What a buffer holds, to tell whether a refused loads changed it.
struct Snapshot {
  td::TensorDict rows;
  rb::WriterState writer;
  std::string sampler;
};

std::string sampler_state(const rb::Sampler& s) {
  std::ostringstream out;
  if (const auto* p = dynamic_cast<const rb::PrioritizedSampler*>(&s)) {
    const rb::PrioritizedSamplerState st = p->state();
    out << st.alpha << " " << st.beta << " " << st.eps << " " << st.max_priority << " "
        << st.max_priority_slot << " " << st.sum_leaves << st.min_leaves;
  } else if (const auto* w = dynamic_cast<const rb::SamplerWithoutReplacement*>(&s)) {
    out << w->remaining() << " " << w->ran_out() << " " << w->drop_last();
  }
  return out.str();
}

Snapshot snapshot(const rb::ReplayBuffer& b) {
  return {b.storage().to_tensordict().clone().as<td::TensorDict>(), b.writer_state(),
          sampler_state(*b.sampler())};
}

void expect_unchanged(const rb::ReplayBuffer& b, const Snapshot& before) {
  const Snapshot now = snapshot(b);
  EXPECT_EQ(now.writer, before.writer);
  EXPECT_EQ(now.sampler, before.sampler);
  for (const td::NestedKey& key : before.rows.keys(true, true))
    EXPECT_TRUE(torch::equal(now.rows.get(key), before.rows.get(key))) << key.repr();
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "-" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    root_ = fs::temp_directory_path() /
            ("tensordict-rb-ckpt-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

// ---- round trips ---------------------------------------------------------------------

struct RoundTripCase {
  std::string sampler;
  int64_t rows;
};

class CheckpointRoundTrip : public Checkpoint,
                            public ::testing::WithParamInterface<RoundTripCase> {};

TEST_P(CheckpointRoundTrip, LoadsWhatDumpsWroteAndGoesOnAlike) {
  const auto [sampler, rows] = GetParam();
  rb::ReplayBuffer saved = filled(sampler, rows);
  const fs::path dir = root_ / "ckpt";
  saved.dumps(dir);
  for (const char* file : {"buffer_metadata.json", "storage/meta.json",
                           "storage/storage_metadata.json", "writer/metadata.json"})
    EXPECT_TRUE(fs::exists(dir / file)) << file;
  EXPECT_EQ(fs::exists(dir / "sampler"), sampler != "random");

  rb::ReplayBuffer loaded(kCapacity, make_sampler(sampler, kCapacity));
  loaded.loads(dir);
  EXPECT_EQ(loaded.size(), saved.size());
  EXPECT_EQ(loaded.writer_state(), saved.writer_state());
  EXPECT_EQ(sampler_state(*loaded.sampler()), sampler_state(*saved.sampler()));
  const td::TensorDictBase a = saved.storage(), b = loaded.storage();
  for (const td::NestedKey& key : a.keys(true, true))
    EXPECT_TRUE(
        torch::equal(a.get(key).narrow(0, 0, saved.size()), b.get(key).narrow(0, 0, saved.size())))
        << key.repr();
  // The generator's state travels too: both buffers draw the same rows next.
  for (int k = 0; k < 3; ++k)
    EXPECT_TRUE(torch::equal(saved.sample(4).get("index"), loaded.sample(4).get("index")));
  // And the loaded buffer is what the procedure's checks expect.
  rb::ReplayBuffer again(kCapacity, make_sampler(sampler, kCapacity));
  again.loads(dir);
  EXPECT_EQ(check_loaded(again, sampler, kCapacity, rows), "");
}

INSTANTIATE_TEST_SUITE_P(
    EachSampler, CheckpointRoundTrip,
    ::testing::Values(RoundTripCase{"random", 6}, RoundTripCase{"random", 10},
                      RoundTripCase{"random", 23}, RoundTripCase{"without_replacement", 6},
                      RoundTripCase{"without_replacement", 10},
                      RoundTripCase{"without_replacement", 23}, RoundTripCase{"prioritized", 6},
                      RoundTripCase{"prioritized", 10}, RoundTripCase{"prioritized", 23}),
    [](const auto& info) {
      return info.param.sampler + "_" + std::to_string(info.param.rows) + "_rows";
    });

TEST_F(Checkpoint, LoadsIntoAPreallocatedMemmapStorageAndOverAWrittenBuffer) {
  filled("prioritized", 23).dumps(root_ / "ckpt");
  // A memmap storage on disk, made with from_schema.
  td::Schema schema{{"obs", {{4}, at::kFloat}},
                    {"action", {{}, at::kLong}},
                    {"reward", {{}, at::kFloat}},
                    {"done", {{}, at::kBool}},
                    {{"next", "obs"}, {{4}, at::kFloat}}};
  td::StorageOptions options;
  options["prefix"] = (root_ / "storage").string();
  rb::ReplayBuffer on_disk(td::from_schema(schema, {kCapacity}, "memmap", options),
                           make_sampler("prioritized", kCapacity));
  on_disk.loads(root_ / "ckpt");
  EXPECT_EQ(check_loaded(on_disk, "prioritized", kCapacity, 23), "");
  // A buffer that already holds other rows takes the checkpoint's whole.
  rb::ReplayBuffer written = filled("prioritized", 4);
  written.loads(root_ / "ckpt");
  EXPECT_EQ(check_loaded(written, "prioritized", kCapacity, 23), "");
}

TEST_F(Checkpoint, ThroughStoragesWrittenByIndexPutAndMadeOnDisk) {
  // A lazy stack of rows is written and read through index_put_ / get, not
  // memcpy: dumps saves it as a plain tensordict of batch [C], and loads
  // copies the rows back in the same way.
  td::TensorDictBase zeros = td::from_schema(td::Schema{{"obs", {{4}, at::kFloat}},
                                                        {"action", {{}, at::kLong}},
                                                        {"reward", {{}, at::kFloat}},
                                                        {"done", {{}, at::kBool}},
                                                        {{"next", "obs"}, {{4}, at::kFloat}}},
                                             {kCapacity});
  const auto stack_of_rows = [&] {
    std::vector<td::TensorDictBase> rows;
    for (int64_t i = 0; i < kCapacity; ++i) rows.push_back(zeros[i].clone());
    return td::lazy_stack(rows);
  };
  rb::ReplayBuffer stacked(stack_of_rows(), make_sampler("without_replacement", kCapacity));
  fill(stacked, 23);
  stacked.dumps(root_ / "ckpt");
  EXPECT_FALSE(fs::exists(root_ / "ckpt" / "storage" / "0"));  // not a lazy-stack layout
  rb::ReplayBuffer other_stack(stack_of_rows(), make_sampler("without_replacement", kCapacity));
  other_stack.loads(root_ / "ckpt");
  EXPECT_EQ(check_loaded(other_stack, "without_replacement", kCapacity, 23), "");
  // A buffer made with a capacity and the memmap storage makes its storage
  // on disk from the checkpoint's files.
  td::StorageOptions options;
  options["prefix"] = (root_ / "lazy").string();
  rb::ReplayBuffer on_disk(kCapacity, make_sampler("without_replacement", kCapacity), "memmap",
                           options);
  on_disk.loads(root_ / "ckpt");
  EXPECT_TRUE(fs::exists(root_ / "lazy" / "meta.json"));
  EXPECT_EQ(check_loaded(on_disk, "without_replacement", kCapacity, 23), "");
}

TEST_F(Checkpoint, ReadsTorchRLSpellings) {
  // TorchRL writes integers as floats; older or other writers as integers,
  // a slot-less max priority, and float32's largest value for unused min
  // leaves. All of them read.
  filled("prioritized", 6).dumps(root_ / "ckpt");
  const fs::path sampler = root_ / "ckpt" / "sampler";
  edit_json(sampler / "sampler_metadata.json", [](auto& j) {
    j["_max_capacity"] = 10;
    j["_max_priority"][1] = nullptr;
    j.erase("_schema_version");
  });
  std::string mins = read_text(sampler / "mintree.memmap");
  const double float32_max = std::numeric_limits<float>::max();
  for (int s = 6; s < 10; ++s) std::memcpy(mins.data() + s * 8, &float32_max, 8);
  write_text(sampler / "mintree.memmap", mins);
  edit_json(root_ / "ckpt" / "buffer_metadata.json", [](auto& j) { j["batch_size"] = 4; });
  rb::ReplayBuffer loaded(kCapacity, make_sampler("prioritized", kCapacity));
  loaded.loads(root_ / "ckpt");
  EXPECT_EQ(check_loaded(loaded, "prioritized", kCapacity, 6), "");
  auto* p = dynamic_cast<rb::PrioritizedSampler*>(loaded.sampler().get());
  EXPECT_EQ(p->max_priority_slot(), -1);
  EXPECT_TRUE(std::isinf(p->state().min_leaves[9].item<double>()));
}

TEST_F(Checkpoint, WritesTorchRLFields) {
  filled("prioritized", 23).dumps(root_ / "ckpt");
  const auto meta = nlohmann::json::parse(read_text(root_ / "ckpt/sampler/sampler_metadata.json"));
  EXPECT_EQ(meta["_max_capacity"], 10.0);
  EXPECT_TRUE(meta["_max_capacity"].is_number_float());
  // Slot 6 got the largest priority, 0.5 + 6 / 4 = 2 (the first row given it).
  EXPECT_EQ(meta["_max_priority"], nlohmann::json::array({2.0, 6.0}));
  EXPECT_EQ(meta["_schema_version"], 1);
  EXPECT_EQ(fs::file_size(root_ / "ckpt/sampler/sumtree.memmap"), 80u);
  const auto storage =
      nlohmann::json::parse(read_text(root_ / "ckpt/storage/storage_metadata.json"));
  EXPECT_EQ(storage, nlohmann::json::parse(R"({"metadata": {}, "is_pytree": false, "len": 10})"));
  const auto writer = nlohmann::json::parse(read_text(root_ / "ckpt/writer/metadata.json"));
  EXPECT_EQ(writer, nlohmann::json::parse(R"({"cursor": 3, "write_count": 23})"));
  EXPECT_EQ(fs::file_size(root_ / "ckpt/storage/obs.memmap"), 10u * 4 * 4);
  // Before any sample, the order of a without-replacement sampler is null.
  rb::ReplayBuffer unsampled(kCapacity, make_sampler("without_replacement", kCapacity));
  unsampled.extend(rb::test::expected_rows(at::arange(3, at::kLong)));
  unsampled.dumps(root_ / "unsampled");
  const auto wor = nlohmann::json::parse(read_text(root_ / "unsampled/sampler/meta.json"));
  EXPECT_EQ(wor["_sample_list"]["type"], "NonTensorData");
  rb::ReplayBuffer loaded(kCapacity, make_sampler("without_replacement", kCapacity));
  loaded.loads(root_ / "unsampled");
  EXPECT_EQ(loaded.size(), 3);
  EXPECT_EQ(dynamic_cast<rb::SamplerWithoutReplacement&>(*loaded.sampler()).remaining(), 0);
}

// ---- all or nothing ------------------------------------------------------------------

// A sampler that writes part of its state and then fails.
class FailingSampler : public rb::RandomSampler {
 public:
  void dumps(const fs::path& dir) const override {
    fs::create_directories(dir);
    write_text(dir / "half.json", "{");
    throw td::StorageError("FailingSampler: disk full");
  }
};

// A sampler of one's own that knows nothing of checkpoints.
class UserSampler : public rb::Sampler {
 public:
  rb::SampleInfo sample(int64_t size, int64_t batch_size, at::Generator*) override {
    return {at::zeros({batch_size}, at::kLong), at::Tensor()};
  }
  std::string name() const override { return "UserSampler"; }
};

TEST_F(Checkpoint, DumpsReplacesAnEarlierCheckpointWhole) {
  const fs::path dir = root_ / "ckpt";
  filled("prioritized", 23).dumps(dir);
  ASSERT_TRUE(fs::exists(dir / "sampler" / "sumtree.memmap"));
  filled("random", 6).dumps(dir);
  EXPECT_FALSE(fs::exists(dir / "sampler"));  // nothing of the earlier one is left
  rb::ReplayBuffer loaded(kCapacity, make_sampler("random", kCapacity));
  loaded.loads(dir);
  EXPECT_EQ(check_loaded(loaded, "random", kCapacity, 6), "");
  // Only the checkpoint is there: no staging directory left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(root_), fs::directory_iterator()), 1);
}

TEST_F(Checkpoint, AFailedDumpsLeavesTheEarlierCheckpoint) {
  const fs::path dir = root_ / "ckpt";
  filled("without_replacement", 23).dumps(dir);
  const auto before = files_of(dir);
  rb::ReplayBuffer failing(kCapacity, std::make_shared<FailingSampler>());
  failing.extend(rb::test::expected_rows(at::arange(5, at::kLong)));
  EXPECT_THROW(failing.dumps(dir), td::StorageError);
  rb::ReplayBuffer user(kCapacity, std::make_shared<UserSampler>());
  user.extend(rb::test::expected_rows(at::arange(5, at::kLong)));
  try {
    user.dumps(dir);
    ADD_FAILURE() << "a sampler without dumps() was saved";
  } catch (const td::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("UserSampler"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_of(dir), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(root_), fs::directory_iterator()), 1);
  rb::ReplayBuffer loaded(kCapacity, make_sampler("without_replacement", kCapacity));
  loaded.loads(dir);
  EXPECT_EQ(check_loaded(loaded, "without_replacement", kCapacity, 23), "");
}

TEST_F(Checkpoint, DumpsRefusesWhatIsNotACheckpoint) {
  const fs::path dir = root_ / "photos";
  fs::create_directories(dir);
  write_text(dir / "cat.jpg", "meow");
  EXPECT_THROW(filled("random", 6).dumps(dir), td::StorageError);
  EXPECT_EQ(read_text(dir / "cat.jpg"), "meow");
  write_text(root_ / "file", "x");
  EXPECT_THROW(filled("random", 6).dumps(root_ / "file"), td::StorageError);
  // A buffer made with a capacity has nothing to save before its first write.
  rb::ReplayBuffer empty(kCapacity);
  EXPECT_THROW(empty.dumps(root_ / "empty"), td::ValueError);
  EXPECT_FALSE(fs::exists(root_ / "empty"));
}

// ---- refused checkpoints ---------------------------------------------------------------

struct Corruption {
  std::string name;
  std::string sampler;                         // whose checkpoint is corrupted
  std::string file;                            // named by the error
  std::function<void(const fs::path&)> apply;  // on the checkpoint directory
};

void truncate_file(const fs::path& file, std::size_t size) { fs::resize_file(file, size); }

std::vector<Corruption> corruptions() {
  using J = nlohmann::ordered_json;
  return {
      {"no_buffer_metadata", "random", "buffer_metadata.json",
       [](const fs::path& d) { fs::remove(d / "buffer_metadata.json"); }},
      {"buffer_metadata_not_json", "random", "buffer_metadata.json",
       [](const fs::path& d) { write_text(d / "buffer_metadata.json", "{\"batch_size\": "); }},
      {"buffer_metadata_not_object", "random", "buffer_metadata.json",
       [](const fs::path& d) { write_text(d / "buffer_metadata.json", "[1, 2]"); }},
      {"no_batch_size", "random", "buffer_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "buffer_metadata.json", [](J& j) { j.erase("batch_size"); });
       }},
      {"consuming_buffer", "random", "buffer_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "buffer_metadata.json", [](J& j) { j["consume_after_n_samples"] = 3; });
       }},
      {"transform_state", "random", "transform.t",
       [](const fs::path& d) { write_text(d / "transform.t", "PK"); }},
      {"no_cursor", "random", "metadata.json",
       [](const fs::path& d) {
         edit_json(d / "writer/metadata.json", [](J& j) { j.erase("cursor"); });
       }},
      {"cursor_out_of_range", "random", "metadata.json",
       [](const fs::path& d) {
         edit_json(d / "writer/metadata.json", [](J& j) { j["cursor"] = 10; });
       }},
      {"cursor_not_a_number", "random", "metadata.json",
       [](const fs::path& d) {
         edit_json(d / "writer/metadata.json", [](J& j) { j["cursor"] = "3"; });
       }},
      {"write_count_disagrees_with_len", "random", "metadata.json",
       [](const fs::path& d) {
         edit_json(d / "writer/metadata.json", [](J& j) { j["write_count"] = 5; });
       }},
      {"writer_generations", "random", "metadata.json",
       [](const fs::path& d) {
         edit_json(d / "writer/metadata.json", [](J& j) { j["generation_shape"] = J::array(); });
       }},
      {"pytree_storage", "random", "storage_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "storage/storage_metadata.json", [](J& j) { j["is_pytree"] = true; });
       }},
      {"len_past_capacity", "random", "storage_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "storage/storage_metadata.json", [](J& j) { j["len"] = 11; });
       }},
      {"no_storage_metadata", "random", "storage_metadata.json",
       [](const fs::path& d) { fs::remove(d / "storage/storage_metadata.json"); }},
      {"no_storage_meta", "random", "meta.json",
       [](const fs::path& d) { fs::remove(d / "storage/meta.json"); }},
      {"truncated_leaf", "random", "obs.memmap",
       [](const fs::path& d) { truncate_file(d / "storage/obs.memmap", 8); }},
      {"no_alpha", "prioritized", "sampler_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/sampler_metadata.json", [](J& j) { j.erase("_alpha"); });
       }},
      {"negative_eps", "prioritized", "sampler_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/sampler_metadata.json", [](J& j) { j["_eps"] = -1.0; });
       }},
      {"fractional_capacity", "prioritized", "sampler_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/sampler_metadata.json", [](J& j) { j["_max_capacity"] = 10.5; });
       }},
      {"max_priority_not_a_pair", "prioritized", "sampler_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/sampler_metadata.json", [](J& j) { j["_max_priority"] = 2.0; });
       }},
      {"max_priority_slot_out_of_range", "prioritized", "sampler_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/sampler_metadata.json", [](J& j) {
           j["_max_priority"] = J::array({2.0, 40.0});
         });
       }},
      {"unknown_schema_version", "prioritized", "sampler_metadata.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/sampler_metadata.json", [](J& j) { j["_schema_version"] = 2; });
       }},
      {"truncated_sum_tree", "prioritized", "sumtree.memmap",
       [](const fs::path& d) { truncate_file(d / "sampler/sumtree.memmap", 79); }},
      {"no_min_tree", "prioritized", "mintree.memmap",
       [](const fs::path& d) { fs::remove(d / "sampler/mintree.memmap"); }},
      {"nan_in_sum_tree", "prioritized", "sumtree.memmap",
       [](const fs::path& d) {
         std::string bytes = read_text(d / "sampler/sumtree.memmap");
         const double nan = std::numeric_limits<double>::quiet_NaN();
         std::memcpy(bytes.data() + 16, &nan, 8);
         write_text(d / "sampler/sumtree.memmap", bytes);
       }},
      {"no_sampler_metadata", "prioritized", "sampler_metadata.json",
       [](const fs::path& d) { fs::remove(d / "sampler/sampler_metadata.json"); }},
      {"no_ran_out", "without_replacement", "meta.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/meta.json", [](J& j) { j.erase("_ran_out"); });
       }},
      {"repeated_row_in_order", "without_replacement", "meta.json",
       [](const fs::path& d) {
         std::string bytes = read_text(d / "sampler/_sample_list.memmap");
         std::memcpy(bytes.data() + 8, bytes.data(), 8);
         write_text(d / "sampler/_sample_list.memmap", bytes);
       }},
      {"order_not_int64", "without_replacement", "meta.json",
       [](const fs::path& d) {
         edit_json(d / "sampler/meta.json",
                   [](J& j) { j["_sample_list"]["dtype"] = "torch.float64"; });
       }},
      {"no_sampler_meta", "without_replacement", "meta.json",
       [](const fs::path& d) { fs::remove(d / "sampler/meta.json"); }},
  };
}

class CheckpointRefused : public Checkpoint, public ::testing::WithParamInterface<Corruption> {};

TEST_P(CheckpointRefused, IsAFormatErrorNamingTheFileAndChangesNothing) {
  const Corruption& c = GetParam();
  const fs::path dir = root_ / "ckpt";
  filled(c.sampler, 23).dumps(dir);
  c.apply(dir);
  // The loading buffer holds other rows: a refused loads must leave them.
  rb::ReplayBuffer buffer = filled(c.sampler, 4);
  const Snapshot before = snapshot(buffer);
  try {
    buffer.loads(dir);
    ADD_FAILURE() << c.name << ": loaded";
  } catch (const td::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(c.file), std::string::npos) << e.what();
  }
  expect_unchanged(buffer, before);
  // A buffer not written yet stays unwritten.
  rb::ReplayBuffer lazy(kCapacity, make_sampler(c.sampler, kCapacity));
  EXPECT_THROW(lazy.loads(dir), td::FormatError);
  EXPECT_FALSE(lazy.storage().defined());
  EXPECT_EQ(lazy.size(), 0);
}

INSTANTIATE_TEST_SUITE_P(EachFile, CheckpointRefused, ::testing::ValuesIn(corruptions()),
                         [](const auto& info) { return info.param.name; });

TEST_F(Checkpoint, AnotherCapacityOrSamplerIsRefused) {
  const std::vector<std::string> samplers{"random", "without_replacement", "prioritized"};
  for (const std::string& saved : samplers) {
    const fs::path dir = root_ / saved;
    filled(saved, 23).dumps(dir);
    for (const std::string& loading : samplers) {
      if (loading == saved) continue;
      rb::ReplayBuffer buffer = filled(loading, 4);
      const Snapshot before = snapshot(buffer);
      try {
        buffer.loads(dir);
        ADD_FAILURE() << saved << " loaded into " << loading;
      } catch (const td::ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("sampler"), std::string::npos) << e.what();
      }
      expect_unchanged(buffer, before);
    }
    rb::ReplayBuffer bigger = filled(saved, 4, 12);
    const Snapshot before = snapshot(bigger);
    EXPECT_THROW(bigger.loads(dir), td::ValueError);
    expect_unchanged(bigger, before);
  }
}

TEST_F(Checkpoint, AnotherStorageLayoutIsRefused) {
  const fs::path dir = root_ / "ckpt";
  filled("random", 23).dumps(dir);
  // Same capacity, action stored as int32: a TypeError naming the key.
  td::Schema other{{"obs", {{4}, at::kFloat}},
                   {"action", {{}, at::kInt}},
                   {"reward", {{}, at::kFloat}},
                   {"done", {{}, at::kBool}},
                   {{"next", "obs"}, {{4}, at::kFloat}}};
  rb::ReplayBuffer int32(td::from_schema(other, {kCapacity}));
  try {
    int32.loads(dir);
    ADD_FAILURE() << "loaded into int32 actions";
  } catch (const td::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("action"), std::string::npos) << e.what();
  }
  EXPECT_EQ(int32.size(), 0);
  // Without next/obs: a KeyError.
  td::Schema fewer{{"obs", {{4}, at::kFloat}},
                   {"action", {{}, at::kLong}},
                   {"reward", {{}, at::kFloat}},
                   {"done", {{}, at::kBool}}};
  rb::ReplayBuffer no_next(td::from_schema(fewer, {kCapacity}));
  EXPECT_THROW(no_next.loads(dir), td::KeyError);
  EXPECT_EQ(no_next.size(), 0);
  // Not a directory at all.
  rb::ReplayBuffer buffer(kCapacity);
  EXPECT_THROW(buffer.loads(root_ / "nowhere"), td::FormatError);
}

}  // namespace
