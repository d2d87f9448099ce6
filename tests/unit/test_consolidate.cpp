// consolidate / from_consolidated: the single-buffer layout and file of
// docs/formats.md, "Consolidated buffers and files", views into one storage, and errors on corrupt
// files.
#include "pch.h"

#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

#include <cstring>
#include <fstream>
#include <iterator>

namespace td = tensordict;
namespace fs = std::filesystem;
using td_test::Shape;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// The example of docs/formats.md, "Consolidated example".
td::TensorDict spec_example() {
  return td::TensorDict({{"a", torch::arange(3, torch::kFloat)},
                         {"b", td::TensorDict({{"c", torch::tensor({7, 8}, torch::kLong)}}, {})},
                         {"s", td::NonTensorData(json("x"))}},
                        {});
}

// The metadata of that example, as docs/formats.md gives it.
const char* kSpecMetadata =
    R"({"cls":"TensorDict","non_tensors":{"s":["x",[],null]},"leaves":{"a":["torch.float32",[3],0,16,4]},)"
    R"("cls_metadata":{"device":null,"names":[],"batch_size":[],"is_locked":false},)"
    R"("b":{"cls":"TensorDict","non_tensors":{},"leaves":{"c":["torch.int64",[2],16,32,0]},)"
    R"("cls_metadata":{"device":null,"names":[],"batch_size":[],"is_locked":false}}})";

std::vector<std::uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void append_le(std::vector<std::uint8_t>& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// A consolidated file from storage bytes and metadata text (docs/formats.md, "Consolidated file").
std::vector<std::uint8_t> consolidated_file(std::vector<std::uint8_t> storage,
                                            const std::string& metadata) {
  storage.insert(storage.end(), metadata.begin(), metadata.end());
  append_le(storage, metadata.size(), 8);
  return storage;
}

// The storage bytes of that example, built by hand.
std::vector<std::uint8_t> spec_storage() {
  std::vector<std::uint8_t> s;
  for (float f : {0.f, 1.f, 2.f}) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    append_le(s, u, 4);
  }
  append_le(s, 0, 4);  // padding of "a" to 16 bytes
  append_le(s, 7, 8);
  append_le(s, 8, 8);
  return s;
}

// Every tensor leaf, depth-first (lazy stacks member by member).
void leaves_of(const td::TensorDictBase& t, std::vector<at::Tensor>& out) {
  if (t.is<td::LazyStackedTensorDict>()) {
    for (const auto& m : t.as<td::LazyStackedTensorDict>().tensordicts()) leaves_of(m, out);
    return;
  }
  for (const auto& [k, v] : t.items()) {
    if (v.is_tensor())
      out.push_back(v.tensor());
    else if (v.is_tensordict())
      leaves_of(v.tensordict(), out);
  }
}

// Fails unless every leaf of `t` lies in the memory of `storage`.
void expect_views_of(const td::TensorDictBase& t, const at::Tensor& storage) {
  std::vector<at::Tensor> leaves;
  leaves_of(t, leaves);
  const auto* lo = static_cast<const std::uint8_t*>(storage.data_ptr());
  const auto* hi = lo + storage.numel();
  for (const auto& leaf : leaves) {
    if (leaf.numel() == 0) continue;  // LibTorch gives empty tensors no data pointer
    const auto* p = static_cast<const std::uint8_t*>(leaf.data_ptr());
    EXPECT_TRUE(p >= lo && p + leaf.numel() * leaf.element_size() <= hi)
        << "a leaf of shape " << leaf.sizes() << " is not in the buffer";
  }
}

// Every dtype of docs/formats.md, "Dtype strings", that LibTorch 1.13 has, a 0-dim leaf, an empty
// leaf, a non-contiguous source, a complex128 leaf at an offset that is 8 mod 16, nesting and a
// non-tensor.
td::TensorDict varied_source() {
  td::TensorDict inner(
      {{"z", torch::complex(torch::randn({3}, torch::kDouble), torch::randn({3}, torch::kDouble))}},
      {3});
  td::TensorDict sub({{"u8", torch::arange(3, torch::kByte)},  // 3 bytes: padded to 8
                      {"inner", inner},
                      {"b", torch::tensor({true, false, true})},
                      {"i16", torch::arange(3, torch::kShort)},
                      {"i32", torch::arange(3, torch::kInt)}},
                     {3});
  td::TensorDict root({{"f32", torch::randn({4, 3}).t()},  // transposed: not contiguous
                       {"sub", sub},
                       {"f64", torch::randn({3, 2}, torch::kDouble)},
                       {"f16", torch::randn({3}).to(torch::kHalf)},
                       {"bf16", torch::randn({3}).to(torch::kBFloat16)},
                       {"c64", torch::complex(torch::randn({3}), torch::randn({3}))},
                       {"i8", torch::arange(3, torch::kChar)},
                       {"i64", torch::arange(3, torch::kLong)},
                       {"empty", torch::zeros({3, 0})}},
                      {3});
  root.set("meta", td::NonTensorData(json{{"k", {1, 2.5, nullptr}}}));
  td::TensorDict scalar_holder({{"scalar", torch::tensor(3.5)}}, {});
  td::TensorDict top({{"batch", root}, {"scalars", scalar_holder}}, {});
  return top;
}

}  // namespace

// ---- docs/formats.md, "Consolidated buffer": the in-memory layout -------------------------

TEST(Consolidate, LeavesAreViewsOfOneStorageInDepthFirstOrder) {
  auto data = spec_example();
  auto c = data.consolidate();
  EXPECT_TRUE(c.is_locked());
  EXPECT_TRUE(c.is_consolidated());
  EXPECT_TRUE(c.equal(data));
  at::Tensor storage = c.consolidated_storage();
  EXPECT_EQ(storage.scalar_type(), at::kByte);
  EXPECT_EQ(storage.numel(), 32);
  auto bytes = spec_storage();
  EXPECT_EQ(std::memcmp(storage.data_ptr(), bytes.data(), bytes.size()), 0);
  // One storage: the leaves are views of it, and a write through the buffer
  // shows in the leaf.
  EXPECT_TRUE(c.get("a").storage().is_alias_of(storage.storage()));
  EXPECT_TRUE(c.get({"b", "c"}).storage().is_alias_of(storage.storage()));
  EXPECT_EQ(static_cast<std::uint8_t*>(c.get({"b", "c"}).data_ptr()) -
                static_cast<std::uint8_t*>(storage.data_ptr()),
            16);
  storage[16] = 42;
  EXPECT_EQ(c.get({"b", "c"})[0].item<int64_t>(), 42);
  EXPECT_EQ(c.get_non_tensor("s"), "x");
  // The source is not consolidated and stays untouched.
  EXPECT_FALSE(data.is_consolidated());
  EXPECT_EQ(data.get({"b", "c"})[0].item<int64_t>(), 7);
  TD_EXPECT_THROW_MSG(data.consolidated_storage(), td::ValueError, "not consolidated");
}

TEST(Consolidate, MetadataFollowsTheSpecOrder) {
  auto c = spec_example().consolidate();
  ojson expected = ojson::parse(kSpecMetadata);
  expected["cls_metadata"]["is_locked"] = true;  // consolidate() locks its result
  expected["b"]["cls_metadata"]["is_locked"] = true;
  EXPECT_EQ(c.consolidated_metadata().dump(), expected.dump());
}

TEST(Consolidate, PaddingIsZeroAndEveryLeafIs8ByteAligned) {
  auto src = varied_source();
  auto c = src.consolidate();
  EXPECT_TRUE(c.equal(src));
  at::Tensor storage = c.consolidated_storage();
  expect_views_of(c, storage);
  ojson md = c.consolidated_metadata();
  const auto& u8 = md["batch"]["sub"]["leaves"]["u8"];
  EXPECT_EQ(u8[4], 5);  // 3 bytes + 5 of padding
  const int64_t pad_start = u8[2].get<int64_t>() + 3;
  for (int64_t i = pad_start; i < u8[3].get<int64_t>(); ++i)
    EXPECT_EQ(storage[i].item<int>(), 0) << "padding byte " << i;
  std::vector<at::Tensor> leaves;
  leaves_of(c, leaves);
  for (const auto& leaf : leaves)
    if (leaf.numel() > 0)
      EXPECT_EQ((static_cast<std::uint8_t*>(leaf.data_ptr()) -
                 static_cast<std::uint8_t*>(storage.data_ptr())) %
                    8,
                0);
  // The complex128 leaf after the 8 bytes of "u8" starts at 8 mod 16.
  EXPECT_EQ(md["batch"]["sub"]["inner"]["leaves"]["z"][2].get<int64_t>() % 16, 8);
}

TEST(Consolidate, LazyStackIsConsolidatedMemberByMember) {
  td::TensorDict m0({{"x", torch::zeros({2})}, {"only0", torch::ones({2, 5})}}, {2});
  td::TensorDict m1({{"x", torch::ones({2})}}, {2});
  auto stack = td::lazy_stack({m0, m1}, 1);
  auto c = stack.consolidate();
  ASSERT_TRUE(c.is<td::LazyStackedTensorDict>());
  EXPECT_EQ(c.as<td::LazyStackedTensorDict>().stack_dim(), 1);
  ojson md = c.consolidated_metadata();
  EXPECT_EQ(md["cls"], "LazyStackedTensorDict");
  EXPECT_EQ(md["cls_metadata"].dump(), R"({"stack_dim":1,"stack_dim_name":null,"is_locked":true})");
  EXPECT_EQ(md["0"]["leaves"]["x"].dump(), R"(["torch.float32",[2],0,8,0])");
  EXPECT_EQ(md["0"]["leaves"]["only0"].dump(), R"(["torch.float32",[2,5],8,48,0])");
  EXPECT_EQ(md["1"]["leaves"]["x"].dump(), R"(["torch.float32",[2],48,56,0])");
  // Rebuilt from the buffer and the metadata (as received over a wire).
  auto back = td::TensorDict::from_consolidated(c.consolidated_storage(), md);
  ASSERT_TRUE(back.is<td::LazyStackedTensorDict>());
  auto members = back.as<td::LazyStackedTensorDict>().tensordicts();
  ASSERT_EQ(members.size(), 2u);
  EXPECT_TRUE(members[0].equal(m0));
  EXPECT_TRUE(members[1].equal(m1));
  EXPECT_TRUE(back.is_locked());
}

TEST(Consolidate, ReservedNamesOfNestedTensorDictsAreRefused) {
  for (const char* name : {"cls", "non_tensors", "leaves", "cls_metadata", "size"}) {
    td::TensorDict data({{"ok", torch::zeros({1})}}, {1});
    data.set({"outer", name, "x"}, torch::zeros({1}));
    TD_EXPECT_THROW_MSG(data.consolidate(), td::KeyError, name, "reserved");
  }
  // Leaves may use those names: they do not collide with the metadata fields.
  td::TensorDict leaves({{"size", torch::zeros({1})}, {"cls", torch::ones({1})}}, {1});
  EXPECT_TRUE(leaves.consolidate().equal(leaves));
}

// ---- docs/formats.md, "Consolidated file" ---------------------------------------------------

TEST(ConsolidatedFile, SpecExampleByteForByte) {
  td_test::TempDir dir("td_consolidate");
  fs::create_directories(dir.path);
  const fs::path path = dir.path / "example.td";
  auto c = spec_example().consolidate(path.string());
  const auto expected = consolidated_file(spec_storage(), kSpecMetadata);
  EXPECT_EQ(read_bytes(path), expected);
  // The result is mapped on the file: in-place writes reach it.
  c.get("a").fill_(5.f);
  auto after = read_bytes(path);
  float first;
  std::memcpy(&first, after.data(), 4);
  EXPECT_EQ(first, 5.f);
}

TEST(ConsolidatedFile, ReadsTheSpecExample) {
  td_test::TempDir dir("td_consolidate");
  fs::create_directories(dir.path);
  const fs::path path = dir.path / "example.td";
  write_bytes(path, consolidated_file(spec_storage(), kSpecMetadata));
  auto back = td::TensorDict::from_consolidated(path.string());
  EXPECT_TRUE(back.equal(spec_example()));
  // Python's rebuild order: non-tensors, leaves, then nested tensordicts.
  EXPECT_EQ(back.keys(), (std::vector<td::NestedKey>{"s", "a", "b"}));
  EXPECT_FALSE(back.is_locked());
  EXPECT_TRUE(back.is_consolidated());
  EXPECT_EQ(back.consolidated_metadata().dump(), ojson::parse(kSpecMetadata).dump());
  at::Tensor storage = back.consolidated_storage();
  EXPECT_EQ(storage.numel(), 32);
  EXPECT_TRUE(back.get("a").storage().is_alias_of(storage.storage()));
  EXPECT_TRUE(back.get({"b", "c"}).storage().is_alias_of(storage.storage()));
  // Mapped copy-on-write: writing a leaf does not change the file.
  back.get("a").fill_(9.f);
  EXPECT_EQ(read_bytes(path), consolidated_file(spec_storage(), kSpecMetadata));
}

TEST(ConsolidatedFile, RoundTripOfEveryDtypeNestedAndLocked) {
  td_test::TempDir dir("td_consolidate");
  fs::create_directories(dir.path);
  const std::string path = (dir.path / "varied.td").string();
  auto src = varied_source();
  src.lock_();
  src.consolidate(path);
  auto back = td::TensorDict::from_consolidated(path);
  EXPECT_TRUE(back.equal(src));
  EXPECT_TRUE(back.is_locked());
  EXPECT_EQ(back.get_non_tensor({"batch", "meta"}), (json{{"k", {1, 2.5, nullptr}}}));
  EXPECT_TRUE(back.get({"batch", "f32"}).is_contiguous());
}

TEST(ConsolidatedFile, StorageAndMetadataOverloadTakesViews) {
  auto c = spec_example().consolidate();
  at::Tensor storage = c.consolidated_storage().clone();
  auto back = td::TensorDict::from_consolidated(storage, c.consolidated_metadata());
  EXPECT_TRUE(back.equal(spec_example()));
  EXPECT_TRUE(back.get("a").storage().is_alias_of(storage.storage()));
  TD_EXPECT_THROW_MSG(
      td::TensorDict::from_consolidated(storage.to(torch::kInt), c.consolidated_metadata()),
      td::TypeError, "uint8");
}

// ---- corrupt files -----------------------------------------------------------------------------

class ConsolidatedFileErrors : public ::testing::Test {
 protected:
  td_test::TempDir dir{"td_consolidate_bad"};
  fs::path path;
  void SetUp() override {
    fs::create_directories(dir.path);
    path = dir.path / "bad.td";
  }
  // FormatError naming the file and containing `what`.
  void expect_format_error(const std::vector<std::uint8_t>& bytes,
                           std::initializer_list<const char*> what) {
    write_bytes(path, bytes);
    try {
      td::TensorDict::from_consolidated(path.string());
      ADD_FAILURE() << "expected a FormatError";
    } catch (const td::FormatError& e) {
      td_test::expect_message_contains(e.what(), {path.string().c_str()});
      td_test::expect_message_contains(e.what(), what);
    }
  }
  std::string spec_with(const std::string& from, const std::string& to) {
    std::string md = kSpecMetadata;
    auto pos = md.find(from);
    EXPECT_NE(pos, std::string::npos);
    return md.replace(pos, from.size(), to);
  }
};

TEST_F(ConsolidatedFileErrors, ShorterThanTheFooter) {
  expect_format_error({1, 2, 3, 4, 5}, {"5 bytes", "at least 8"});
  expect_format_error({}, {"0 bytes", "at least 8"});
}

TEST_F(ConsolidatedFileErrors, FooterLongerThanTheFile) {
  auto bad = std::vector<std::uint8_t>(spec_storage());
  append_le(bad, 1000, 8);
  expect_format_error(bad, {"metadata length of 1000", "32 bytes precede"});
  std::vector<std::uint8_t> negative(8, 0xFF);
  expect_format_error(negative, {"metadata length of -1"});
  // Truncated at the end: the footer is now metadata bytes.
  auto cut = consolidated_file(spec_storage(), kSpecMetadata);
  cut.resize(cut.size() - 3);
  write_bytes(path, cut);
  EXPECT_THROW(td::TensorDict::from_consolidated(path.string()), td::FormatError);
}

TEST_F(ConsolidatedFileErrors, MetadataIsNotJson) {
  expect_format_error(consolidated_file(spec_storage(), "{\"cls\": \"TensorDict\", oops"),
                      {"not valid JSON"});
}

TEST_F(ConsolidatedFileErrors, LeafOutsideTheStorage) {
  expect_format_error(
      consolidated_file(spec_storage(), spec_with(R"("c":["torch.int64",[2],16,32,0])",
                                                  R"("c":["torch.int64",[4],16,48,0])")),
      {"('b', 'c')", "outside the buffer of 32 bytes"});
  expect_format_error(
      consolidated_file(spec_storage(), spec_with(R"("a":["torch.float32",[3],0,16,4])",
                                                  R"("a":["torch.float32",[3],-8,8,4])")),
      {"'a'", "outside the buffer"});
  expect_format_error(
      consolidated_file(spec_storage(), spec_with(R"("a":["torch.float32",[3],0,16,4])",
                                                  R"("a":["torch.float32",[5],0,16,4])")),
      {"'a'", "does not hold 20 bytes"});
}

TEST_F(ConsolidatedFileErrors, WrongFieldsAndUnknownNames) {
  expect_format_error(consolidated_file(spec_storage(), spec_with("torch.int64", "torch.int65")),
                      {"('b', 'c')", "unknown dtype"});
  expect_format_error(
      consolidated_file(spec_storage(), spec_with(R"({"cls":"TensorDict","non)",
                                                  R"({"cls":"NonTensorStack","non)")),
      {"NonTensorStack", "not supported"});
  expect_format_error(
      consolidated_file(spec_storage(), spec_with(R"("leaves":{"a")", R"("leafs":{"a")")),
      {"missing \"leaves\""});
  expect_format_error(consolidated_file(spec_storage(), "[1, 2]"), {"not a JSON object"});
}

TEST_F(ConsolidatedFileErrors, MissingFile) {
  try {
    td::TensorDict::from_consolidated((dir.path / "nope.td").string());
    ADD_FAILURE() << "expected a FormatError";
  } catch (const td::FormatError& e) {
    td_test::expect_message_contains(e.what(), {"nope.td", "cannot read"});
  }
}

TEST(ConsolidatedFile, UnwritablePathIsAStorageError) {
  const std::string path = "/nonexistent-dir-td/c.td";
  TD_EXPECT_THROW_MSG(spec_example().consolidate(path), td::StorageError, "/nonexistent-dir-td/");
}

// ---- NonTensorStack entries ----------------------------------------------------------------

namespace {

// The node Python tensordict 0.15.3 writes for NonTensorStack("lift", "push",
// "pull", "lift") in a batch-[4] tensordict.
const char* kPythonTasks =
    R"({"cls":"NonTensorStack","non_tensors":{"0":["lift",[],null],"1":["push",[],null],)"
    R"("2":["pull",[],null],"3":["lift",[],null]},"leaves":{},)"
    R"("cls_metadata":{"stack_dim":0,"stack_dim_name":null,"is_locked":false}})";

// Root metadata without leaves, of batch size `batch`, holding `stack` (JSON
// text) under "tasks".
ojson root_with_stack(const std::string& stack, const json& batch) {
  ojson names = ojson::array();
  for (std::size_t i = 0; i < batch.size(); ++i) names.push_back(nullptr);
  ojson md = {
      {"cls", "TensorDict"},
      {"non_tensors", ojson::object()},
      {"leaves", ojson::object()},
      {"cls_metadata",
       {{"device", nullptr}, {"names", names}, {"batch_size", batch}, {"is_locked", false}}}};
  md["tasks"] = ojson::parse(stack);
  return md;
}

td::EntryKind kind_of(const td::TensorDictBase& t, const std::string& key) {
  for (const auto& [k, v] : t.items())
    if (k.front() == key) return v.kind();
  ADD_FAILURE() << "no entry " << key;
  return td::EntryKind::Tensor;
}

td::TensorDictBase read_metadata(const ojson& md) {
  return td::TensorDict::from_consolidated(torch::empty({0}, torch::kUInt8), md);
}

// A NonTensorStack node of the given members ("non_tensors" text, then nodes).
std::string stack_node(const std::string& non_tensors, const std::string& nodes = "",
                       int stack_dim = 0) {
  return R"({"cls":"NonTensorStack","non_tensors":{)" + non_tensors +
         R"(},"leaves":{},"cls_metadata":{"stack_dim":)" + std::to_string(stack_dim) +
         R"(,"stack_dim_name":null,"is_locked":false})" + (nodes.empty() ? "" : "," + nodes) + "}";
}

}  // namespace

TEST(Consolidate, NonTensorStackIsWrittenAsPythonWritesIt) {
  td::TensorDict d({{"a", torch::arange(4.0)}}, {4});
  d.set("tasks", td::NonTensorStack(std::vector<json>{"lift", "push", "pull", "lift"}));
  // In memory: kept out of the buffer, as NonTensorData.
  auto c = d.consolidate();
  EXPECT_EQ(c.get_non_tensor_stack("tasks").tolist(),
            json::array({"lift", "push", "pull", "lift"}));
  const ojson md = c.consolidated_metadata();
  // The locked consolidated copy records is_locked: true on the stack too.
  ojson expected = ojson::parse(kPythonTasks);
  expected["cls_metadata"]["is_locked"] = true;
  EXPECT_EQ(md["tasks"].dump(), expected.dump());
  // The file records the source's lock state: Python's node exactly.
  td_test::TempDir dir("td_consolidate");
  fs::create_directories(dir.path);
  const fs::path path = dir.path / "stack.td";
  d.consolidate(path.string());
  auto back = td::TensorDict::from_consolidated(path.string());
  EXPECT_EQ(kind_of(back, "tasks"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(back.get_non_tensor_stack("tasks").tolist(),
            json::array({"lift", "push", "pull", "lift"}));
  EXPECT_TRUE(torch::equal(back.get("a"), d.get("a")));
  const auto bytes = read_bytes(path);
  const std::string text(bytes.begin(), bytes.end());
  EXPECT_NE(text.find(std::string(R"("tasks":)") + kPythonTasks), std::string::npos) << text;
  // From the buffer and the metadata.
  auto again = td::TensorDict::from_consolidated(c.consolidated_storage(), md);
  EXPECT_EQ(again.get_non_tensor_stack("tasks").tolist(), d.get_non_tensor_stack("tasks").tolist());
}

TEST(Consolidate, NonTensorStackOfTwoDimsIsANodeOfRowNodes) {
  td::TensorDict d({}, {2, 3});
  d.set("tasks", td::NonTensorStack(
                     json{{1, json{{"k", 2}}, nullptr}, {json::array({1, 2}), "s", 2.5}}, {2, 3}));
  const ojson md = d.consolidate().consolidated_metadata();
  const ojson& node = md["tasks"];
  EXPECT_EQ(node["non_tensors"].dump(), "{}");
  EXPECT_EQ(node["0"]["cls"], "NonTensorStack");
  EXPECT_EQ(node["0"]["non_tensors"].dump(),
            R"({"0":[1,[],null],"1":[{"k":2},[],null],"2":[null,[],null]})");
  EXPECT_EQ(node["1"]["non_tensors"].dump(),
            R"({"0":[[1,2],[],null],"1":["s",[],null],"2":[2.5,[],null]})");
  std::vector<std::string> keys;
  for (auto it = node.begin(); it != node.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"cls", "non_tensors", "leaves", "cls_metadata", "0", "1"}));
  // Read back: the same stack (values that are lists stay values).
  auto back = td::TensorDict::from_consolidated(torch::empty({0}, torch::kUInt8), md);
  const auto& s = back.get_non_tensor_stack("tasks");
  EXPECT_EQ(s.batch_size().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s, d.get_non_tensor_stack("tasks"));
}

TEST(Consolidate, NonTensorStackInNestedTensorDictsAndLazyStackMembers) {
  td::TensorDict inner({{"x", torch::ones({2})}}, {2});
  inner.set("v", td::NonTensorStack(std::vector<json>{"p", "q"}));
  td::TensorDict m0({{"x", torch::zeros({2})}}, {2});
  m0.set("v", td::NonTensorStack(std::vector<json>{"r", "s"}));
  td::TensorDict m1({{"x", torch::ones({2})}}, {2});
  m1.set("v", td::NonTensorStack(std::vector<json>{"t", "u"}));
  td::TensorDict root({{"n", inner}, {"l", td::lazy_stack({m0, m1}, 0)}}, {2});
  td_test::TempDir dir("td_consolidate");
  fs::create_directories(dir.path);
  const fs::path path = dir.path / "nested.td";
  root.consolidate(path.string());
  auto back = td::TensorDict::from_consolidated(path.string());
  EXPECT_EQ(back.get_non_tensor_stack({"n", "v"}).tolist(), json::array({"p", "q"}));
  const auto lazy = back.get_tensordict("l");
  ASSERT_TRUE(lazy.is<td::LazyStackedTensorDict>());
  const auto members = lazy.as<td::LazyStackedTensorDict>().tensordicts();
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].get_non_tensor_stack("v").tolist(), json::array({"r", "s"}));
  EXPECT_EQ(members[1].get_non_tensor_stack("v").tolist(), json::array({"t", "u"}));
  // Reserved names collide for a NonTensorStack as for a nested tensordict.
  td::TensorDict bad({}, {2});
  bad.set("cls", td::NonTensorStack(std::vector<json>{"a", "b"}));
  TD_EXPECT_THROW_MSG(bad.consolidate(), td::KeyError, "NonTensorStack 'cls'", "reserved");
}

TEST(ConsolidatedFile, ReadsPythonNonTensorStackLayouts) {
  // 1-D, as in the task's example; NonTensorData members with a device.
  auto one = read_metadata(root_with_stack(kPythonTasks, {4}));
  EXPECT_EQ(one.get_non_tensor_stack("tasks").tolist(),
            json::array({"lift", "push", "pull", "lift"}));
  auto dev =
      read_metadata(root_with_stack(stack_node(R"("0":["a",[],"cpu"],"1":["b",[],"cpu"])"), {2}));
  EXPECT_EQ(dev.get_non_tensor_stack("tasks").device(), std::optional<c10::Device>(c10::kCPU));
  // Python's stack of tensordicts holding NonTensorData of batch [3], along
  // dim 1: members of batch size [3], stack_dim 1.
  auto along1 = read_metadata(
      root_with_stack(stack_node(R"("0":["A",[3],null],"1":["B",[3],null])", "", 1), {3, 2}));
  EXPECT_EQ(along1.get_non_tensor_stack("tasks").tolist(),
            json::parse(R"([["A","B"],["A","B"],["A","B"]])"));
  // Members as NonTensorData entries and as row nodes, mixed; keys in any order.
  auto mixed = read_metadata(
      root_with_stack(stack_node(R"("1":["b",[2],null])",
                                 R"("0":)" + stack_node(R"("1":["y",[],null],"0":["x",[],null])")),
                      {2, 2}));
  EXPECT_EQ(kind_of(mixed, "tasks"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(mixed.get_non_tensor_stack("tasks").tolist(), json::parse(R"([["x","y"],["b","b"]])"));
  // An empty stack (Python writes no members) takes its parent's batch size.
  auto empty = read_metadata(root_with_stack(stack_node(""), {0, 3}));
  EXPECT_EQ(empty.get_non_tensor_stack("tasks").batch_size().vec(), (std::vector<int64_t>{0, 3}));
  auto empty1 = read_metadata(root_with_stack(stack_node(""), {0}));
  EXPECT_EQ(empty1.get_non_tensor_stack("tasks").batch_size().vec(), (std::vector<int64_t>{0}));
}

TEST(ConsolidatedFile, BadNonTensorStackMetadataIsAFormatErrorNamingTheKey) {
  const auto expect_error = [](const std::string& stack, const json& batch,
                               std::initializer_list<const char*> what) {
    try {
      read_metadata(root_with_stack(stack, batch));
      ADD_FAILURE() << "expected a FormatError for " << stack;
    } catch (const td::FormatError& e) {
      td_test::expect_message_contains(e.what(), what);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected a FormatError, got " << e.what();
    }
  };
  // Members missing, not numbered 0..n-1, given twice.
  expect_error(stack_node(R"("0":["a",[],null],"2":["c",[],null])"), {2},
               {"'tasks'", "member \"1\" is missing"});
  expect_error(stack_node(R"("0":["a",[],null],"x":["c",[],null])"), {2},
               {"'tasks'", "numbered", "\"x\""});
  expect_error(stack_node(R"("0":["a",[],null],"01":["c",[],null])"), {2},
               {"'tasks'", "numbered", "\"01\""});
  expect_error(stack_node(R"("0":["a",[],null])", R"("0":)" + stack_node(R"("0":["b",[],null])")),
               {1}, {"'tasks'", "given twice"});
  // Inconsistent shapes: between members, and against the parent.
  expect_error(stack_node(R"("0":["a",[2],null],"1":["b",[3],null])"), {2},
               {"'tasks'", "differ in batch size", "[2]", "[3]"});
  expect_error(stack_node("", R"("0":)" + stack_node(R"("0":["a",[],null])") + R"(,"1":)" +
                                  stack_node(R"("0":["b",[],null],"1":["c",[],null])")),
               {2}, {"'tasks'", "differ in batch size"});
  expect_error(kPythonTasks, {3}, {"'tasks'"});
  // Malformed members and fields.
  expect_error(stack_node(R"("0":"a")"), {1}, {"('tasks', '0')", "[data, batch_size, device]"});
  expect_error(stack_node(R"("0":["a",[-1],null])"), {1}, {"('tasks', '0')", "negative"});
  expect_error(stack_node("", R"("0":{"cls":"TensorDict","non_tensors":{},"leaves":{},)"
                              R"("cls_metadata":{"batch_size":[]}})"),
               {1}, {"('tasks', '0')", "\"TensorDict\" node"});
  expect_error(stack_node("", R"("0":5)"), {1}, {"('tasks', '0')", "without \"cls\""});
  expect_error(
      R"({"cls":"NonTensorStack","non_tensors":{},"leaves":{"x":["torch.uint8",[0],0,0,0]},)"
      R"("cls_metadata":{"stack_dim":0}})",
      {0}, {"'tasks'", "tensor leaves"});
  expect_error(R"({"cls":"NonTensorStack","leaves":{},"cls_metadata":{}})", {0},
               {"'tasks'", "missing \"non_tensors\""});
  expect_error(stack_node(R"("0":["a",[],null])", "", 2), {1}, {"'tasks'", "stack_dim 2"});
  // Nested too deep: 65 levels of one member each.
  std::string deep = stack_node(R"("0":["a",[],null])");
  for (int i = 0; i < 64; ++i) deep = stack_node("", R"("0":)" + deep);
  expect_error(deep, json::array(), {"'tasks'", "nested deeper than 64"});
  // Too many values: a NonTensorData member repeated over a huge batch.
  expect_error(stack_node(R"("0":["a",[4096,4096,4096],null])"), {1},
               {"'tasks'", "more than 16777216 values"});
  // The root and lazy-stack members cannot be NonTensorStack nodes.
  try {
    read_metadata(ojson::parse(kPythonTasks));
    ADD_FAILURE() << "expected a FormatError";
  } catch (const td::FormatError& e) {
    td_test::expect_message_contains(e.what(), {"NonTensorStack", "not supported"});
  }
}
