// Hostile files (issue #19, group 1): nesting past the documented depth limit,
// special files where regular files are expected. Each case crashed (stack
// overflow) or hung before its fix; each now gets a tensordict::FormatError.
#include "reliability/reliability.h"

#include <tensordict/tensordict.h>

#include <torch/torch.h>

#include <sys/stat.h>

namespace td = tensordict;
using namespace td_rel;

namespace {

const char* kTdType = "<class 'tensordict._td.TensorDict'>";

std::string plain_meta(const std::string& entries) {
  return std::string("{") + entries + (entries.empty() ? "" : ",") +
         "\"shape\": [], \"device\": \"cpu\", \"_type\": \"" + kTdType + "\"}";
}

// A saved tensordict {"a": float[3]} at root/"p".
fs::path saved(const fs::path& root) {
  td::TensorDict t;
  t.set("a", torch::arange(3, torch::kFloat));
  t.memmap((root / "p").string());
  return root / "p";
}

}  // namespace

// ---- nesting depth ----------------------------------------------------------------------

TEST_F(Reliability, MetaJsonNestedTooDeepIsAFormatError) {
  fs::path dir = root / "p";
  write_text(dir / "meta.json", "{\"x\": " + nested_lists(200000) + "}");
  try {
    td::load_memmap(dir.string());
    FAIL() << "no error";
  } catch (const td::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("512"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("meta.json"), std::string::npos) << e.what();
  }
}

TEST_F(Reliability, NonTensorDataNestedTooDeepIsAFormatError) {
  td::TensorDict t;
  t.set("a", torch::ones({2}));
  t.set("s", td::NonTensorData(nlohmann::json::array({1, 2})));
  t.memmap((root / "p").string());
  const fs::path meta = root / "p" / "s" / "meta.json";
  ASSERT_TRUE(fs::exists(meta));
  write_text(meta, "{\"_type\": \"<class 'tensordict.tensorclass.NonTensorData'>\", \"data\": " +
                       nested_lists(200000) + ", \"_metadata\": null, \"_is_non_tensor\": true}");
  EXPECT_THROW(td::load_memmap((root / "p").string()), td::FormatError);
  // Within the limit it loads.
  write_text(meta, "{\"_type\": \"<class 'tensordict.tensorclass.NonTensorData'>\", \"data\": " +
                       nested_lists(500) + ", \"_metadata\": null, \"_is_non_tensor\": true}");
  auto back = td::load_memmap((root / "p").string());
  EXPECT_TRUE(back.at("s").is_non_tensor());
}

// Directories nested past the limit: each level a valid meta.json listing the next.
TEST_F(Reliability, NestedDirectoriesPastTheLimitAreAFormatError) {
  auto build = [&](const fs::path& top, int levels) {
    fs::path dir = top;
    for (int i = 0; i < levels; ++i) {
      write_text(dir / "meta.json", plain_meta("\"a\": {\"type\": \"TensorDict\"}"));
      dir /= "a";
    }
    write_text(dir / "meta.json", plain_meta(""));
  };
  build(root / "deep", 600);
  try {
    td::load_memmap((root / "deep").string());
    FAIL() << "no error";
  } catch (const td::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("512"), std::string::npos) << e.what();
  }
  build(root / "ok", 100);
  auto back = td::load_memmap((root / "ok").string());
  EXPECT_TRUE(back.contains(td::NestedKey(std::vector<std::string>(100, "a"))));
}

TEST_F(Reliability, MemmapOfATensordictDeeperThanTheLimitIsRefused) {
  td::TensorDict t;
  td::TensorDict level = t;
  for (int i = 0; i < 600; ++i) {
    td::TensorDict next;
    level.set("a", next);
    level = next;
  }
  EXPECT_THROW(t.memmap((root / "p").string()), td::ValueError);
  EXPECT_FALSE(fs::exists(root / "p"));
}

TEST_F(Reliability, ConsolidatedMetadataNestedTooDeepIsAFormatError) {
  // A file: 8 bytes of data, then metadata nested 200,000 deep, then its length.
  const std::string md = "{\"x\": " + nested_lists(200000) + "}";
  std::string bytes(8, '\0');
  bytes += md;
  int64_t n = static_cast<int64_t>(md.size());
  bytes.append(reinterpret_cast<const char*>(&n), 8);
  write_text(root / "c.td", bytes);
  EXPECT_THROW(td::TensorDict::from_consolidated((root / "c.td").string()), td::FormatError);

  // Parsed metadata holding 20,000 nested tensordicts.
  nlohmann::ordered_json node = {
      {"cls", "TensorDict"},
      {"non_tensors", nlohmann::ordered_json::object()},
      {"leaves", nlohmann::ordered_json::object()},
      {"cls_metadata", {{"batch_size", nlohmann::ordered_json::array()}, {"device", nullptr}}}};
  nlohmann::ordered_json md2 = node;
  for (int i = 0; i < 20000; ++i) {
    nlohmann::ordered_json parent = node;
    parent["sub"] = std::move(md2);
    md2 = std::move(parent);
  }
  EXPECT_THROW(td::TensorDict::from_consolidated(torch::zeros({8}, torch::kUInt8), md2),
               td::FormatError);
}

TEST_F(Reliability, SchemaNestedTooDeepIsASchemaError) {
  nlohmann::json j = {{"x", {{"shape", {2}}, {"dtype", "float32"}}}};
  for (int i = 0; i < 20000; ++i) j = nlohmann::json{{"a", std::move(j)}};
  EXPECT_THROW(td::Schema::from_json(j), td::SchemaError);
}

// ---- special files where regular files are expected ------------------------------------

TEST_F(Reliability, MetaJsonThatIsAFifoIsAFormatErrorNotAHang) {
  fs::path dir = root / "p";
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "meta.json").c_str(), 0644), 0);
  EXPECT_TRUE(finishes_within(
      10, [&] { EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError); },
      [&] { poke_fifo(dir / "meta.json"); }));
}

TEST_F(Reliability, MetaJsonLinkedToDevZeroIsAFormatErrorNotAHang) {
  fs::path dir = root / "p";
  fs::create_directories(dir);
  fs::create_symlink("/dev/zero", dir / "meta.json");
  EXPECT_TRUE(
      finishes_within(10, [&] { EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError); }));
}

TEST_F(Reliability, MetaJsonThatIsADirectoryIsAFormatError) {
  fs::path dir = root / "p";
  fs::create_directories(dir / "meta.json");
  EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError);
}

TEST_F(Reliability, MemmapFileThatIsNotARegularFileIsAFormatError) {
  const fs::path dir = saved(root);
  const fs::path file = dir / "a.memmap";
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  EXPECT_TRUE(finishes_within(
      10, [&] { EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError); },
      [&] { poke_fifo(file); }));
  fs::remove(file);
  fs::create_symlink("/dev/zero", file);
  EXPECT_TRUE(
      finishes_within(10, [&] { EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError); }));
  fs::remove(file);
  fs::create_directory(file);
  EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError);
}

TEST_F(Reliability, StateDictFileThatIsNotARegularFileIsAFormatError) {
  const fs::path fifo = root / "sd.pt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_TRUE(finishes_within(
      10, [&] { EXPECT_THROW(td::load_state_dict_file(fifo.string()), td::FormatError); },
      [&] { poke_fifo(fifo); }));
  EXPECT_THROW(td::load_state_dict_file(root.string()), td::FormatError);  // a directory
  fs::create_symlink("/dev/zero", root / "zero.pt");
  EXPECT_TRUE(finishes_within(10, [&] {
    EXPECT_THROW(td::load_state_dict_file((root / "zero.pt").string()), td::FormatError);
  }));
}

TEST_F(Reliability, ConsolidatedFileThatIsNotARegularFileIsAFormatError) {
  const fs::path fifo = root / "c.td";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_TRUE(finishes_within(
      10, [&] { EXPECT_THROW(td::TensorDict::from_consolidated(fifo.string()), td::FormatError); },
      [&] { poke_fifo(fifo); }));
  fs::create_symlink("/dev/zero", root / "zero.td");
  EXPECT_TRUE(finishes_within(10, [&] {
    EXPECT_THROW(td::TensorDict::from_consolidated((root / "zero.td").string()), td::FormatError);
  }));
}

// A symbolic link in a saved directory is not a way to write elsewhere: the
// file it names is mapped copy-on-write, so writes stay in this process.
TEST_F(Reliability, LoadMemmapDoesNotMapASymlinkTargetWritable) {
  const fs::path dir = saved(root);
  fs::copy_file(dir / "a.memmap", root / "elsewhere.bin");
  fs::remove(dir / "a.memmap");
  fs::create_symlink(root / "elsewhere.bin", dir / "a.memmap");
  const std::string before = read_text(root / "elsewhere.bin");
  auto t = td::load_memmap(dir.string());
  EXPECT_TRUE(t.get("a").equal(torch::arange(3, torch::kFloat)));
  t.get("a").fill_(7);
  EXPECT_EQ(read_text(root / "elsewhere.bin"), before);
}

// Directories of a save that are symbolic links (to an ancestor: a loop; two
// per level: exponential) are refused rather than followed.
TEST_F(Reliability, SymlinkedDirectoriesInASaveAreNotFollowed) {
  const fs::path dir = root / "p";
  // The layout before 0.4 scans sub-directories.
  write_text(dir / "meta.json", "{\"shape\": [], \"device\": \"cpu\"}");
  fs::create_directory_symlink(dir, dir / "a");
  fs::create_directory_symlink(dir, dir / "b");
  EXPECT_TRUE(
      finishes_within(20, [&] { EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError); }));
  // Listed entries (0.4 on).
  write_text(dir / "meta.json", plain_meta("\"a\": {\"type\": \"TensorDict\"}, \"b\": "
                                           "{\"type\": \"TensorDict\"}"));
  EXPECT_TRUE(
      finishes_within(20, [&] { EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError); }));
  // A link to itself (ELOOP when examined).
  fs::remove(dir / "a");
  fs::remove(dir / "b");
  fs::create_symlink("a", dir / "a");
  EXPECT_TRUE(
      finishes_within(20, [&] { EXPECT_THROW(td::load_memmap(dir.string()), td::FormatError); }));
  // The prefix itself may be a link.
  const fs::path real = saved(root / "r");
  fs::create_directory_symlink(real, root / "link");
  EXPECT_TRUE(
      td::load_memmap((root / "link").string()).get("a").equal(torch::arange(3, torch::kFloat)));
}
