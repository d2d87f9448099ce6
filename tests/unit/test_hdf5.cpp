// The HDF5 storage (tensordict::hdf5): layout, modes, every index form on
// rows, pre-allocation without writing, errors, threads, and the files
// Python tensordict 0.3.2 wrote. Files exchanged with h5py: test_hdf5_h5py.cpp.
#include "support/core_test_helpers.h"
#include "support/data_path.h"
#include "support/typed_test_helpers.h"

#include "storage/hdf5/h5_counters.h"

#include <tensordict/schema.h>
#include <tensordict/storage/hdf5.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace {

namespace td = tensordict;
using namespace torch::indexing;
using td_test::expect_message_contains;
using td_test::TempDir;

struct H5Test : ::testing::Test {
  TempDir dir{"td_h5"};
  void SetUp() override { std::filesystem::create_directories(dir.path); }
  std::string file(const std::string& name = "data.h5") const { return dir.str(name); }
};

// Every dtype h5py stores, nested levels, batch [4].
td::TensorDict all_dtypes() {
  auto r = torch::arange(12).view({4, 3});
  td::TensorDict nested({{"c", r.to(torch::kShort)},
                         {"deeper", td::TensorDict({{"z", r.remainder(2).eq(0)}}, {4, 3})}},
                        {4});
  return td::TensorDict({{"v", torch::arange(4)},
                         {"bool", r.remainder(3).eq(0)},
                         {"u8", (r + 250).to(torch::kByte)},
                         {"i8", (r - 6).to(torch::kChar)},
                         {"i16", (r * -300).to(torch::kShort)},
                         {"i32", (r * 100000).to(torch::kInt)},
                         {"i64", (r * int64_t{10000000000}).to(torch::kLong)},
                         {"f16", (r.to(torch::kFloat) / 4).to(torch::kHalf)},
                         {"f32", r.to(torch::kFloat) / 3},
                         {"f64", r.to(torch::kDouble) / 7},
                         {"c64", torch::complex(r.to(torch::kFloat), -r.to(torch::kFloat))},
                         {"c128", torch::complex(r.to(torch::kDouble) / 3, r.to(torch::kDouble))},
                         {"nested", nested}},
                        {4});
}

std::uintmax_t allocated_bytes(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return static_cast<std::uintmax_t>(st.st_blocks) * 512;
}

long max_rss_kb() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Layout, dtypes, batch size -------------------------------------------------

TEST_F(H5Test, RoundTripEveryDtypeAndNestedLevels) {
  td::TensorDict src = all_dtypes();
  td::PersistentTensorDict h5 = td::to_h5(src, file());
  EXPECT_EQ(h5.type_name(), "PersistentTensorDict");
  EXPECT_TRUE(h5.is<td::PersistentTensorDict>());
  EXPECT_TRUE(h5.equal(src));
  h5.close();
  EXPECT_FALSE(h5.is_open());

  auto back = td::PersistentTensorDict::from_h5(file());
  // Batch sizes inferred per level: the longest common leading shape.
  EXPECT_EQ(back.batch_size().vec(), (std::vector<int64_t>{4}));
  EXPECT_EQ(back.get_tensordict("nested").batch_size().vec(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(back.get_tensordict({"nested", "deeper"}).batch_size().vec(),
            (std::vector<int64_t>{4, 3}));
  for (const auto& k : src.keys(true, true)) {
    at::Tensor a = back.get(k);
    EXPECT_EQ(a.scalar_type(), src.get(k).scalar_type()) << k.repr();
    EXPECT_TRUE(a.equal(src.get(k))) << k.repr();
  }
  // Keys in HDF5's link order (by name).
  std::vector<td::NestedKey> top = back.keys();
  EXPECT_EQ(top.front(), td::NestedKey("bool"));
  EXPECT_EQ(top.back(), td::NestedKey("v"));
  EXPECT_EQ(back.mode(), "r");
  EXPECT_EQ(back.filename(), file());
  EXPECT_EQ(back.group_name(), "/");
}

TEST_F(H5Test, GetReturnsACopyAndToTensordictReadsEverything) {
  auto h5 = td::to_h5(all_dtypes(), file());
  at::Tensor f = h5.get("f32");
  f.fill_(-1);  // a copy: the file keeps its values
  EXPECT_TRUE(h5.get("f32").equal(all_dtypes().get("f32")));
  td::TensorDict dense = h5.to_tensordict();
  EXPECT_TRUE(dense.is<td::TensorDict>());
  EXPECT_TRUE(dense.equal(all_dtypes()));
}

// Python refuses views and in-place memmap on a PersistentTensorDict: every
// read is a copy, so a "view" would silently not write through.
TEST_F(H5Test, ViewsAndInPlaceMemmapAreRefusedWithAHintToCopy) {
  auto src = td::TensorDict({{"x", torch::arange(24).view({2, 3, 4})},
                             {"n", td::TensorDict({{"y", torch::ones({2, 3})}}, {2, 3})}},
                            {2, 3});
  auto h5 = td::to_h5(src, file());
  auto refused = [&](auto&& op, const std::string& name) {
    try {
      op();
      ADD_FAILURE() << name << " was not refused";
    } catch (const td::UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(name + ": a PersistentTensorDict"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("to_tensordict()"), std::string::npos) << e.what();
    }
  };
  refused([&] { h5.view({6}); }, "view");
  refused([&] { h5.unflatten(1, {3, 1}); }, "unflatten");
  refused([&] { h5.permute({1, 0}); }, "permute");
  refused([&] { h5.transpose(0, 1); }, "transpose");
  refused([&] { h5.unsqueeze(0); }, "unsqueeze");
  refused([&] { h5.squeeze(); }, "squeeze");
  refused([&] { h5.squeeze(0); }, "squeeze");
  refused([&] { h5.get_tensordict("n").permute({1, 0}); }, "permute");  // nested levels too
  refused([&] { h5.memmap_(dir.str("mm")); }, "memmap_");
  refused([&] { h5.share_memory_(); }, "share_memory_");
  EXPECT_FALSE(std::filesystem::exists(dir.str("mm")));
  EXPECT_TRUE(h5.is<td::PersistentTensorDict>());  // still the file
  EXPECT_TRUE(h5.to_tensordict().equal(src));
  // Copies are fine: reshape, flatten, expand and memmap() read into new storage,
  // and the in-memory copy has every view.
  EXPECT_TRUE(h5.reshape({6}).get("x").equal(src.get("x").reshape({6, 4})));
  EXPECT_TRUE(h5.flatten(0, 1).get("x").equal(src.get("x").reshape({6, 4})));
  EXPECT_TRUE(h5.to_tensordict().permute({1, 0}).get("x").equal(src.get("x").permute({1, 0, 2})));
  auto mm = h5.memmap(dir.str("copy"));
  EXPECT_TRUE(mm.is_memmap());
  EXPECT_TRUE(mm.equal(src));
}

TEST_F(H5Test, GivenBatchSizeIsCheckedAndInheritedByNestedLevels) {
  td::to_h5(all_dtypes(), file()).close();
  td::H5OpenOptions o;
  o.batch_size = std::vector<int64_t>{4};
  auto h5 = td::PersistentTensorDict::open(file(), o);
  EXPECT_EQ(h5.get_tensordict({"nested", "deeper"}).batch_size().vec(), (std::vector<int64_t>{4}));
  o.batch_size = std::vector<int64_t>{5};
  h5.close();
  try {
    td::PersistentTensorDict::open(file(), o);
    FAIL() << "batch size 5 accepted";
  } catch (const td::ShapeError& e) {
    expect_message_contains(e.what(), {"data.h5", "does not start with the batch size [5]"});
  }
}

TEST_F(H5Test, Bfloat16IsRefusedAndNothingIsWritten) {
  auto h5 = td::to_h5(all_dtypes(), file());
  try {
    h5.set("bf", torch::zeros({4}, torch::kBFloat16));
    FAIL() << "bfloat16 accepted";
  } catch (const td::TypeError& e) {
    expect_message_contains(e.what(), {"data.h5", "bfloat16", "torch::kFloat32"});
  }
  EXPECT_FALSE(h5.contains("bf"));
  // Replacing an entry with a bfloat16 leaves the old one.
  EXPECT_THROW(h5.set("f32", torch::zeros({4, 3}, torch::kBFloat16)), td::TypeError);
  EXPECT_TRUE(h5.get("f32").equal(all_dtypes().get("f32")));
}

TEST_F(H5Test, ToH5ThatFailsLeavesTheFileAsItWas) {
  td::to_h5(all_dtypes(), file()).close();
  td::TensorDict bad = all_dtypes();
  bad.set({"nested", "bf"}, torch::zeros({4}, torch::kBFloat16));
  EXPECT_THROW(td::to_h5(bad, file()), td::TypeError);
  auto back = td::PersistentTensorDict::from_h5(file());
  EXPECT_TRUE(back.to_tensordict().equal(all_dtypes()));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path),
                          std::filesystem::directory_iterator()),
            1);  // no staging file left
}

TEST_F(H5Test, KeyWithSlashIsRefused) {
  auto h5 = td::to_h5(all_dtypes(), file());
  try {
    h5.set("a/b", torch::zeros({4}));
    FAIL();
  } catch (const td::ValueError& e) {
    expect_message_contains(e.what(), {"a/b", "'/'", "data.h5"});
  }
  EXPECT_FALSE(h5.contains("a"));
}

TEST_F(H5Test, NonTensorValuesAsH5pyWritesThem) {
  td::TensorDict src({{"x", torch::zeros({10})}}, {10});
  src.set_non_tensor("c", "a string!");
  src.set_non_tensor("n", 3);
  src.set_non_tensor("f", 1.5);
  src.set_non_tensor("t", true);
  src.set_non_tensor("l", nlohmann::json::array({1, 2, 3}));
  src.set_non_tensor("s", nlohmann::json::array({"a", "bc", "é"}));
  src.set_non_tensor({"g", "h"}, "nested string");
  auto h5 = td::to_h5(src, file());
  h5.close();
  auto back = td::PersistentTensorDict::from_h5(file());
  // Non-tensors do not take part in batch-size inference.
  EXPECT_EQ(back.batch_size().vec(), (std::vector<int64_t>{10}));
  EXPECT_EQ(back.get_non_tensor("c"), "a string!");
  EXPECT_EQ(back.get_non_tensor("n"), 3);
  EXPECT_EQ(back.get_non_tensor("f"), 1.5);
  EXPECT_EQ(back.get_non_tensor("t"), true);
  EXPECT_EQ(back.get_non_tensor("l"), nlohmann::json::array({1, 2, 3}));
  EXPECT_EQ(back.get_non_tensor("s"), nlohmann::json::array({"a", "bc", "é"}));
  EXPECT_EQ(back.get_non_tensor({"g", "h"}), "nested string");
  EXPECT_EQ(back.entry_kind("c"), td::EntryKind::NonTensor);
  // NonTensorData with the parent's batch size.
  td::Value v = back.at("c");
  EXPECT_EQ(v.non_tensor().batch_size().vec(), (std::vector<int64_t>{10}));
  td::TensorDict dense = back.to_tensordict();
  EXPECT_EQ(dense.get_non_tensor("s"), nlohmann::json::array({"a", "bc", "é"}));
}

TEST_F(H5Test, NonTensorsHDF5CannotHoldAreRefused) {
  auto h5 = td::to_h5(td::TensorDict({{"x", torch::zeros({3})}}, {3}), file());
  EXPECT_THROW(h5.set_non_tensor("d", nlohmann::json::object({{"a", 1}})), td::TypeError);
  EXPECT_THROW(h5.set_non_tensor("r", nlohmann::json::parse("[[1, 2], [3]]")), td::TypeError);
  EXPECT_THROW(h5.set_non_tensor("m", nlohmann::json::parse("[1, \"a\"]")), td::TypeError);
  // NonTensorStacks are stored when their elements are of one kind (str, bool,
  // int or float), as Python tensordict stores them.
  EXPECT_THROW(h5.set_non_tensor_stack("st", nlohmann::json::parse("[1, 2.5, 3]")), td::TypeError);
  EXPECT_THROW(h5.set_non_tensor_stack("st", nlohmann::json::parse("[[1], [2], [3]]")),
               td::TypeError);
  EXPECT_THROW(
      h5.set_non_tensor_stack("st", nlohmann::json::array({"a", std::string("b\0c", 3), "d"})),
      td::ValueError);
  EXPECT_EQ(h5.keys().size(), 1u);
}

TEST_F(H5Test, NonTensorStacksAreStored) {
  auto h5 = td::to_h5(td::TensorDict({{"x", torch::zeros({3})}}, {3}), file());
  h5.set_non_tensor_stack("words", nlohmann::json::array({"a", "bé", ""}));
  h5.set_non_tensor_stack("ints", nlohmann::json::array({1, -2, 3}));
  h5.set_non_tensor_stack("flags", nlohmann::json::array({true, false, true}));
  h5.close();
  auto back = td::PersistentTensorDict::from_h5(file());
  EXPECT_EQ(back.batch_size().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(back.get_non_tensor_stack("words").tolist(), nlohmann::json::array({"a", "bé", ""}));
  EXPECT_EQ(back.get_non_tensor_stack("ints").tolist(), nlohmann::json::array({1, -2, 3}));
  EXPECT_EQ(back.get_non_tensor_stack("flags").tolist(),
            nlohmann::json::array({true, false, true}));
  EXPECT_EQ(back[1].get_non_tensor("words"), "bé");
}

// Modes -------------------------------------------------------------------------

TEST_F(H5Test, Modes) {
  td::to_h5(all_dtypes(), file()).close();
  {
    auto r = td::PersistentTensorDict::from_h5(file(), "r");
    try {
      r.set_("f32", torch::ones({4, 3}));
      FAIL() << "write in mode r";
    } catch (const td::StorageError& e) {
      expect_message_contains(e.what(), {"data.h5", "read-only", "'r'", "f32"});
    }
    EXPECT_THROW(r.set("new", torch::ones({4})), td::StorageError);
    EXPECT_THROW(r.index_put_({0}, torch::tensor(1)), td::StorageError);
    EXPECT_THROW(r.del_("f32"), td::StorageError);
    EXPECT_TRUE(r.to_tensordict().equal(all_dtypes()));
  }
  {
    auto rw = td::PersistentTensorDict::from_h5(file(), "r+");
    rw.set("new", torch::ones({4}));
    rw.del_("u8");
  }
  {
    auto a = td::PersistentTensorDict::from_h5(file(), "a");
    EXPECT_TRUE(a.contains("new"));
    EXPECT_FALSE(a.contains("u8"));
  }
  try {
    td::PersistentTensorDict::from_h5(file(), "w-");
    FAIL() << "w- on an existing file";
  } catch (const td::StorageError& e) {
    expect_message_contains(e.what(), {"data.h5", "already exists"});
  }
  EXPECT_THROW(td::PersistentTensorDict::from_h5(file(), "x"), td::StorageError);
  {
    auto w = td::PersistentTensorDict::from_h5(file(), "w");  // truncates
    EXPECT_EQ(w.keys().size(), 0u);
  }
  auto created = td::PersistentTensorDict::from_h5(file("new.h5"), "a");
  created.close();
  EXPECT_TRUE(std::filesystem::exists(file("new.h5")));
  EXPECT_THROW(td::PersistentTensorDict::from_h5(file(), "rw"), td::ValueError);
}

TEST_F(H5Test, OpenOnAGroup) {
  td::TensorDict src({{"outer", td::TensorDict({{"x", torch::arange(6).view({2, 3})}}, {2})}}, {2});
  td::to_h5(src, file()).close();
  td::H5OpenOptions o;
  o.group = "outer";
  auto g = td::PersistentTensorDict::open(file(), o);
  EXPECT_EQ(g.group_name(), "/outer");
  EXPECT_EQ(g.batch_size().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(g.get("x").equal(torch::arange(6).view({2, 3})));
  o.group = "missing";
  EXPECT_THROW(td::PersistentTensorDict::open(file(), o), td::StorageError);
  o.mode = "a";
  g.close();  // HDF5 refuses to open a file read-only and read-write at once
  auto created = td::PersistentTensorDict::open(file(), o);
  EXPECT_EQ(created.keys().size(), 0u);
}

// Bad input -------------------------------------------------------------------------

TEST_F(H5Test, MissingNotHdf5AndTruncatedFiles) {
  try {
    td::PersistentTensorDict::from_h5(file("missing.h5"));
    FAIL();
  } catch (const td::StorageError& e) {
    expect_message_contains(e.what(), {"missing.h5", "does not exist"});
  }
  { std::ofstream(file("text.h5")) << "this is not an HDF5 file\n"; }
  try {
    td::PersistentTensorDict::from_h5(file("text.h5"));
    FAIL();
  } catch (const td::FormatError& e) {
    expect_message_contains(e.what(), {"text.h5", "not an HDF5 file"});
  }
  td::to_h5(all_dtypes(), file()).close();
  std::filesystem::copy_file(file(), file("cut.h5"));
  std::filesystem::resize_file(file("cut.h5"), std::filesystem::file_size(file()) / 2);
  try {
    auto t = td::PersistentTensorDict::from_h5(file("cut.h5"));
    (void)t.to_tensordict();
    FAIL() << "truncated file read";
  } catch (const td::Error& e) {
    expect_message_contains(e.what(), {"cut.h5"});
  }
}

TEST_F(H5Test, ClosedFile) {
  auto h5 = td::to_h5(all_dtypes(), file());
  td::TensorDictBase nested = h5.get_tensordict("nested");
  h5.close();
  h5.close();  // no-op
  for (auto* what : {"get", "nested", "index", "set"}) {
    try {
      std::string w = what;
      if (w == "get") (void)h5.get("f32");
      if (w == "nested") (void)nested.get("c");
      if (w == "index") (void)h5[0];
      if (w == "set") h5.set_("f32", torch::zeros({4, 3}));
      FAIL() << what << " on a closed file";
    } catch (const td::StorageError& e) {
      expect_message_contains(e.what(), {"data.h5", "closed"});
    }
  }
}

TEST_F(H5Test, WrongShapeDtypeAndIndexLeaveTheFileAsItWas) {
  auto h5 = td::to_h5(all_dtypes(), file());
  EXPECT_THROW(h5.set_("f32", torch::zeros({4, 2})), td::ShapeError);
  EXPECT_THROW(h5.index_put_({0}, td::TensorDict({{"f32", torch::zeros({7})}}, {})),
               td::ShapeError);
  EXPECT_THROW(h5.set("x", torch::zeros({3})), td::ShapeError);  // not the batch size
  EXPECT_THROW((void)h5[4], td::IndexError);
  EXPECT_THROW((void)h5.index({torch::tensor({0, 9})}), td::IndexError);
  EXPECT_THROW(h5.index_put_({torch::tensor({0, -9})}, torch::tensor(1)), td::IndexError);
  EXPECT_THROW((void)h5.get("nope"), td::KeyError);
  EXPECT_TRUE(h5.to_tensordict().equal(all_dtypes()));
}

// Rows: every index form, read and written --------------------------------------------

td::TensorDict rows_data(int64_t offset = 0) {
  auto r = torch::arange(6 * 5).view({6, 5}) + offset;
  return td::TensorDict({{"a", r.to(torch::kFloat).unsqueeze(-1).expand({6, 5, 3}).contiguous()},
                         {"b", r.to(torch::kLong)},
                         {"n", td::TensorDict({{"m", r.remainder(2).eq(0)}}, {6, 5})}},
                        {6, 5});
}

std::vector<std::vector<at::indexing::TensorIndex>> index_forms() {
  return {
      {0},
      {-1},
      {3, 2},
      {Slice(1, 5, 2)},
      {Slice(None, None, 3), Slice(1, 4)},
      {Slice(), 2},
      {Slice(), Slice(None, None, 2)},
      {torch::tensor({4, 1, 3})},                                // unsorted
      {torch::tensor({1, 1, 5, 1, 0})},                          // repeated
      {torch::tensor({0, 1, 2})},                                // sorted
      {torch::tensor({-1, 0})},                                  // negative
      {torch::tensor({{0, 5}, {2, 2}})},                         // 2-D rows
      {torch::tensor({true, false, true, true, false, false})},  // mask
      {torch::tensor({5, 0}), Slice(1, 3)},
      {None, Slice(0, 2)},  // General
      {Ellipsis, 1},
      {torch::arange(30).view({6, 5}).remainder(3).eq(0)},  // 2-D mask
  };
}

TEST_F(H5Test, EveryIndexFormReadsTheSameRows) {
  td::TensorDict ref = rows_data();
  auto h5 = td::to_h5(ref, file());
  for (const auto& idx : index_forms()) {
    td::TensorDictBase got = h5.index(idx);
    td::TensorDictBase want = ref.index(idx);
    EXPECT_EQ(got.batch_size().vec(), want.batch_size().vec());
    EXPECT_TRUE(got.equal(want)) << got << "\nwant\n" << want;
    EXPECT_TRUE(h5.get_at({"n", "m"}, idx).equal(ref.get_at({"n", "m"}, idx)));
  }
}

TEST_F(H5Test, EveryIndexFormWritesOnlyThoseRows) {
  for (const auto& idx : index_forms()) {
    td::TensorDict ref = rows_data();
    auto h5 = td::to_h5(ref, file());
    td::TensorDict value = rows_data(1000).index(idx).to_tensordict();
    // Repeated rows: the last value wins, as LibTorch's index_put_ on CPU.
    ref.index_put_(idx, value);
    h5.index_put_(idx, value);
    EXPECT_TRUE(h5.to_tensordict().equal(ref));
    ref.index_put_(idx, torch::tensor(-7));
    h5.index_put_(idx, torch::tensor(-7));
    EXPECT_TRUE(h5.to_tensordict().equal(ref));
    ref.set_at_("b", torch::tensor(9), idx);
    h5.set_at_("b", torch::tensor(9), idx);
    EXPECT_TRUE(h5.get("b").equal(ref.get("b")));
    h5.close();
  }
}

TEST_F(H5Test, UpdateAtAndUpdateInPlace) {
  td::TensorDict ref = rows_data();
  auto h5 = td::to_h5(ref, file());
  auto idx = torch::tensor({3, 0});
  td::TensorDict part = rows_data(50).index({idx}).to_tensordict();
  ref.update_at_(part, {idx});
  h5.update_at_(part, {idx});
  EXPECT_TRUE(h5.to_tensordict().equal(ref));
  h5.update_(rows_data(7));
  EXPECT_TRUE(h5.to_tensordict().equal(rows_data(7)));
}

// One HDF5 selection and one H5Dread per dataset per operation.
TEST_F(H5Test, OneSelectionPerDatasetPerOperation) {
  auto h5 = td::to_h5(rows_data(), file());  // 3 leaves
  auto& c = td::detail::h5::call_counters();
  c.reset();
  (void)h5[2];
  EXPECT_EQ(c.reads.load(), 3);
  EXPECT_EQ(c.selections.load(), 3);
  c.reset();
  // 256 random rows, unsorted with repeats, of a larger file: still one read per leaf.
  auto big = td::to_h5(td::TensorDict({{"x", torch::arange(4000).view({1000, 4})},
                                       {"y", torch::arange(1000).to(torch::kFloat)}},
                                      {1000}),
                       file("big.h5"));
  auto idx = torch::randint(0, 1000, {256}, torch::kLong);
  c.reset();
  td::TensorDictBase rows = big.index({idx});
  EXPECT_EQ(c.reads.load(), 2);
  EXPECT_EQ(c.selections.load(), 2);
  EXPECT_TRUE(rows.get("x").equal(torch::arange(4000).view({1000, 4}).index({idx})));
  c.reset();
  big.index_put_({idx}, torch::tensor(3));
  EXPECT_EQ(c.writes.load(), 2);
  EXPECT_EQ(c.reads.load(), 0);
  EXPECT_EQ(c.selections.load(), 2);
  c.reset();
  (void)big.keys(true);
  (void)big.repr();
  EXPECT_EQ(c.reads.load(), 0);
}

// Pre-allocation ------------------------------------------------------------------

TEST_F(H5Test, FromSchemaAllocatesWithoutWriting) {
  td::Schema schema{{"obs", {{3, 64, 64}, torch::kByte}},
                    {"action", {{4}, torch::kFloat}},
                    {td::NestedKey({"next", "done"}), {{}, torch::kBool}}};
  const long rss_before = max_rss_kb();
  auto t0 = std::chrono::steady_clock::now();
  auto h5 = td::from_schema(schema, {1'000'000}, td::storage::H5{.filename = file()});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);  // well under a second on an idle machine
  EXPECT_LT(max_rss_kb() - rss_before, 20 * 1024);
  h5.flush();
  EXPECT_LT(allocated_bytes(file()), 1u << 20);  // 12 GB of zeros not written
  EXPECT_EQ(h5.get_item_shape("obs"), (std::vector<int64_t>{1'000'000, 3, 64, 64}));
  EXPECT_EQ(h5.get_item_shape({"next", "done"}), (std::vector<int64_t>{1'000'000}));
  EXPECT_EQ(h5[123456].get("obs").sum().item<int64_t>(), 0);
  td::TensorDict row({{"obs", torch::full({3, 64, 64}, 7, torch::kByte)},
                      {"action", torch::ones({4})},
                      {"next", td::TensorDict({{"done", torch::tensor(true)}}, {})}},
                     {});
  h5.index_put_({999'999}, row);
  EXPECT_TRUE(h5[999'999].equal(row));
  EXPECT_EQ(h5[999'998].get("obs").sum().item<int64_t>(), 0);
}

TEST_F(H5Test, FromSchemaByNameWithOptions) {
  td::Schema schema{{"x", {{2}, torch::kFloat}}, {td::NestedKey({"n", "y"}), {{}, torch::kLong}}};
  auto t = td::from_schema(schema, {100}, "h5",
                           {{"filename", file()},
                            {"chunks", {10}},
                            {"compression", "gzip"},
                            {"compression_opts", 9},
                            {"shuffle", true},
                            {"fletcher32", true}});
  EXPECT_TRUE(t.is<td::PersistentTensorDict>());
  t.index_put_({Slice(0, 50)}, torch::tensor(2));
  EXPECT_EQ(t.get("x").sum().item<float>(), 200.0f);
  EXPECT_EQ(t.get({"n", "y"}).sum().item<int64_t>(), 100);
  EXPECT_THROW(td::from_schema(schema, {1}, "h5", {{"filename", file("o.h5")}, {"nope", 1}}),
               td::SchemaError);
  EXPECT_THROW(td::from_schema(schema, {1}, "h5", {}), td::SchemaError);
  EXPECT_THROW(
      td::from_schema(schema, {1}, "h5", {{"filename", file("l.h5")}, {"compression", "lzf"}}),
      td::SchemaError);
  EXPECT_THROW(td::from_schema(td::Schema{{"b", {{2}, torch::kBFloat16}}}, {1},
                               td::storage::H5{.filename = file("bf.h5")}),
               td::TypeError);
  auto names = td::available_storages();
  EXPECT_NE(std::find(names.begin(), names.end(), "h5"), names.end());
}

// Core features over the storage --------------------------------------------------

TEST_F(H5Test, LockingAndNestedHandles) {
  auto h5 = td::to_h5(rows_data(), file());
  h5.lock_();
  EXPECT_THROW(h5.set("z", torch::zeros({6, 5})), td::LockedError);
  h5.set_("b", torch::zeros({6, 5}, torch::kLong));  // in place is allowed
  EXPECT_EQ(h5.get("b").sum().item<int64_t>(), 0);
  h5.unlock_();
  h5.set("z", torch::zeros({6, 5}));
  td::TensorDictBase n = h5.get_tensordict("n");
  EXPECT_TRUE(n.is_same(h5.get_tensordict("n")));  // the same live level
  n.set("k", torch::ones({6, 5}));
  EXPECT_TRUE(h5.contains({"n", "k"}));
  h5.set("sub", td::TensorDict({{"q", torch::ones({6, 5, 2})}}, {6, 5}));
  EXPECT_EQ(h5.get_item_shape({"sub", "q"}), (std::vector<int64_t>{6, 5, 2}));
  EXPECT_NE(h5.repr().find("PersistentTensorDict"), std::string::npos);
}

TEST_F(H5Test, RenameDeleteAndReopen) {
  auto h5 = td::to_h5(rows_data(), file());
  h5.rename_key_("b", "b2");
  h5.rename_key_({"n", "m"}, {"n", "m2"});
  h5.del_("a");
  h5.close();
  auto back = td::PersistentTensorDict::from_h5(file());
  EXPECT_EQ(back.keys(true, true),
            (std::vector<td::NestedKey>{td::NestedKey("b2"), td::NestedKey({"n", "m2"})}));
  EXPECT_TRUE(back.get("b2").equal(rows_data().get("b")));
}

TEST_F(H5Test, ConcurrentReadsFromThreads) {
  auto src = td::TensorDict({{"x", torch::arange(4000).view({1000, 4})}}, {1000});
  auto h5 = td::to_h5(src, file());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto idx = torch::tensor({(i * 7 + t) % 1000, (i * 13) % 1000});
        if (!h5.get_at("x", {idx}).equal(src.get("x").index({idx}))) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// Files written by Python tensordict 0.3.2 ------------------------------------------

TEST(H5Fixtures, Python032Plain) {
  auto h5 = td::PersistentTensorDict::from_h5(td_test::data_path("python-0.3.2/h5/v032.h5"));
  EXPECT_EQ(h5.batch_size().vec(), (std::vector<int64_t>{2}));
  EXPECT_EQ(h5.get_tensordict("nested").batch_size().vec(), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(h5.get("a").equal(torch::arange(6, torch::kFloat).view({2, 3})));
  EXPECT_TRUE(h5.get("b").equal(torch::tensor({true, false})));
  EXPECT_TRUE(h5.get({"nested", "c"}).equal(torch::zeros({2, 4}, torch::kShort)));
  EXPECT_TRUE(h5[1].get("a").equal(torch::tensor({3.0f, 4.0f, 5.0f})));
}

TEST(H5Fixtures, Python032GzipChunked) {
  auto h5 = td::PersistentTensorDict::from_h5(td_test::data_path("python-0.3.2/h5/v032c.h5"));
  EXPECT_EQ(h5.batch_size().vec(), (std::vector<int64_t>{100, 10}));
  at::Tensor x = h5.get("x");
  EXPECT_EQ(x.scalar_type(), torch::kFloat);
  EXPECT_TRUE(x.equal(torch::zeros({100, 10})));
  EXPECT_TRUE(h5.index({torch::tensor({99, 3, 99})}).get("x").equal(torch::zeros({3, 10})));
}

}  // namespace
