// HDF5 files both ways with the real Python PersistentTensorDict
// (tests/python/hdf5_cases.py, the Python side): every dtype both store,
// nested levels with their own batch sizes, gzip/shuffle/chunked datasets,
// strings and other non-tensors, NonTensorStacks, given and inferred batch
// sizes, row reads, files whose rows and leaves the other side writes, and
// the differences that stay (pinned by the Hdf5Pinned cases).
#include "pch.h"

#include "python/peer.h"

#include <tensordict/non_tensor.h>
#include <tensordict/storage/hdf5.h>

#include <torch/version.h>

#include <fstream>
#include <functional>
#include <map>
#include <optional>

namespace td = tensordict;
using namespace td_python;
using json = nlohmann::json;

namespace {

// Distinctive values (hdf5_cases.py's values(), written again here): signs,
// fractions, NaN, -0.0 and infinities where the dtype holds them.
at::Tensor values(c10::ScalarType dtype, std::vector<int64_t> shape, int64_t offset = 0) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  at::Tensor i = torch::arange(n, torch::kLong) + offset;
  at::Tensor t;
  if (c10::isComplexType(dtype)) {
    at::Tensor real = i.to(torch::kDouble) / 3 - 1;
    t = torch::complex(real, -real * 2).to(dtype);
  } else if (c10::isFloatingType(dtype)) {
    t = (i.to(torch::kDouble) / 3 - 1).to(dtype);
    if (offset == 0) {
      const double special[] = {NAN, -0.0, INFINITY, -INFINITY};
      for (int64_t k = 0; k < std::min<int64_t>(n, 4); ++k) t[k] = special[k];
    }
  } else if (dtype == torch::kBool) {
    t = i.remainder(3).eq(0);
  } else if (dtype == torch::kLong) {
    t = i * int64_t{3'000'000'000'017} - int64_t{5'000'000'000'000};
  } else {
    const int64_t bits = static_cast<int64_t>(c10::elementSize(dtype)) * 8;
    const int64_t span = int64_t{1} << bits;
    const int64_t min = dtype == torch::kByte ? 0 : -(span / 2);
    t = ((i * 37 - 50).remainder(span) + min).to(dtype);
  }
  return t.reshape(shape);
}

// ---- the content of each case (hdf5_cases.py builds the same) -----------------------

td::TensorDict dtypes_td() {
  const std::vector<std::pair<std::string, c10::ScalarType>> dtypes = {
      {"float16", torch::kHalf},
      {"float32", torch::kFloat},
      {"float64", torch::kDouble},
      {"complex64", torch::kComplexFloat},
      {"complex128", torch::kComplexDouble},
      {"bool", torch::kBool},
      {"uint8", torch::kByte},
      {"int8", torch::kChar},
      {"int16", torch::kShort},
      {"int32", torch::kInt},
      {"int64", torch::kLong}};
  td::TensorDict out({}, {4});
  for (std::size_t i = 0; i < dtypes.size(); ++i)
    out.set(dtypes[i].first,
            values(dtypes[i].second, i % 2 ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{4}));
  return out;
}

td::TensorDict nested_td() {
  td::TensorDict deep({{"y", values(torch::kDouble, {3, 4, 2})}}, {3, 4, 2});
  td::TensorDict inner({{"x", values(torch::kInt, {3, 4})}, {"deep", deep}}, {3, 4});
  return td::TensorDict({{"t", values(torch::kFloat, {3})}, {"n", inner}}, {3});
}

td::TensorDict gzip_td() {
  td::TensorDict inner({{"z", values(torch::kShort, {100, 3})}}, {100});
  return td::TensorDict({{"x", values(torch::kFloat, {100, 3})},
                         {"y", values(torch::kLong, {100, 3})},
                         {"b", values(torch::kBool, {100, 3})},
                         {"g", inner}},
                        {100});
}

td::H5DatasetOptions gzip_options() {
  td::H5DatasetOptions o;
  o.gzip = 6;
  o.shuffle = true;
  o.chunks = {7, 3};
  return o;
}

td::TensorDict non_tensors_td() {
  td::TensorDict td({{"t", values(torch::kFloat, {3})},
                     {"g", td::TensorDict({{"t2", values(torch::kLong, {3})}}, {3})}},
                    {3});
  td.set_non_tensor("s", "héllo ✓ h5");
  td.set_non_tensor("n", 7);
  td.set_non_tensor("x", 2.5);
  td.set_non_tensor("flag", true);
  td.set_non_tensor("lst", json::array({1, 2, 3}));
  td.set_non_tensor("words", json::array({"a", "bc"}));
  td.set_non_tensor({"g", "name"}, "inner");
  return td;
}

td::TensorDict stacks_td() {
  td::TensorDict td({{"t", values(torch::kFloat, {3})}}, {3});
  td.set_non_tensor_stack("words", json::array({"a", "bé", "ccc"}));
  td.set_non_tensor_stack("ints", json::array({1, -2, 3}));
  td.set_non_tensor_stack("flags", json::array({true, false, true}));
  td.set_non_tensor_stack("reals", json::array({0.5, 1.5, -2.25}));
  return td;
}

td::TensorDict stacks_2d_td() {
  td::TensorDict td({{"t", values(torch::kInt, {2, 2, 3})}}, {2, 2});
  td.set_non_tensor_stack("grid", json::array({json::array({"a", "b"}), json::array({"c", "d"})}));
  return td;
}

td::TensorDict scalars_td() {
  return td::TensorDict({{"a", torch::tensor(1.25f)},
                         {"b", torch::tensor(int64_t{-7})},
                         {"v", values(torch::kChar, {5})}},
                        {});
}

td::TensorDict batch_given_td() {
  return td::TensorDict(
      {{"a", values(torch::kFloat, {2, 3})}, {"b", values(torch::kLong, {2, 3, 4})}}, {2});
}

td::TensorDict rows_td() {
  return td::TensorDict({{"obs", values(torch::kFloat, {6, 3})},
                         {"act", values(torch::kLong, {6})},
                         {"nested", td::TensorDict({{"r", values(torch::kDouble, {6})}}, {6})}},
                        {6});
}

at::Tensor row_index() { return torch::tensor({4, 1, 4}); }  // ROW_INDEX: unsorted, a repeat

td::TensorDict exchange_td() {
  td::TensorDict td({{"obs", values(torch::kFloat, {5, 3})},
                     {"act", values(torch::kLong, {5})},
                     {"nested", td::TensorDict({{"r", values(torch::kDouble, {5, 2})}}, {5})}},
                    {5});
  td.set_non_tensor("s", "label");
  return td;
}

// The row writes and in-place leaf updates C++ makes on the file Python wrote
// (py_rows), and on its in-memory copy: td[i] = row, td[idx] = rows, set_,
// set_at_.
void cpp_rows(td::TensorDictBase& t) {
  t.index_put_({2},
               td::TensorDict({{"obs", torch::full({3}, 7.5f)},
                               {"act", torch::tensor(int64_t{8})},
                               {"nested", td::TensorDict({{"r", torch::tensor({9.0, 10.0})}}, {})}},
                              {}));
  t.index_put_(
      {torch::tensor({4, 0})},
      td::TensorDict(
          {{"obs", torch::full({2, 3}, -3.0f)},
           {"act", torch::tensor({int64_t{-5}, int64_t{-6}})},
           {"nested", td::TensorDict({{"r", torch::full({2, 2}, -7.0, torch::kDouble)}}, {2})}},
          {2}));
  t.set_("act", t.get("act") * 10 - 1);
  t.set_at_({"nested", "r"}, torch::full({2}, 0.25, torch::kDouble), {3});
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The batch size each case is opened with (OPEN_BATCH in hdf5_cases.py); the
// others are inferred as from_h5 does.
std::optional<std::vector<int64_t>> open_batch(const std::string& name) {
  if (name == "gzip_chunked") return std::vector<int64_t>{100};
  if (name == "batch_given") return std::vector<int64_t>{2};
  if (name == "non_tensors") return std::vector<int64_t>{3};
  if (name == "py_rows" || name == "cpp_rows") return std::vector<int64_t>{5};
  return std::nullopt;
}

// ---- Python -> C++: one Python process writes every case ----------------------------

struct PythonSide {
  fs::path dir;
  json results;
};

const PythonSide& python_side() {
  static const PythonSide side = [] {
    PythonSide s;
    s.dir = fresh_dir("hdf5-python");
    s.results = run_suite("hdf5", "write", s.dir);
    return s;
  }();
  return side;
}

class Hdf5PythonWrites : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { (void)python_side(); }
};

TEST_P(Hdf5PythonWrites, ReadHere) {
  const std::string name = GetParam();
  const PythonSide& py = python_side();
  ASSERT_TRUE(peer_ok(py.results, name));
  const fs::path case_dir = py.dir / name;
  auto h5 =
      td::PersistentTensorDict::from_h5((case_dir / "data.h5").string(), "r", open_batch(name));
  EXPECT_TRUE(matches_truth(h5, case_dir / "truth"));
  EXPECT_TRUE(matches_truth(h5.to_tensordict(), case_dir / "truth"));
}

INSTANTIATE_TEST_SUITE_P(Hdf5, Hdf5PythonWrites,
                         ::testing::Values("dtypes", "nested", "gzip_chunked", "non_tensors",
                                           "stacks", "stacks_2d", "scalars", "batch_given"));

TEST(Hdf5PythonWritesRows, UnsortedRowsWithARepeatReadHere) {
  const PythonSide& py = python_side();
  ASSERT_TRUE(peer_ok(py.results, "row_reads"));
  auto h5 = td::PersistentTensorDict::from_h5((py.dir / "row_reads" / "data.h5").string());
  EXPECT_TRUE(matches_truth(h5, py.dir / "row_reads" / "truth"));
  EXPECT_TRUE(matches_truth(h5.index({row_index()}), py.dir / "row_reads" / "truth_rows"));
}

// ---- the differences that stay (docs/hdf5.md, "Python tensordict 0.15.3") -----------

// 0.15.3's from_h5 counts a number non-tensor (a scalar opaque dataset) as a
// 0-d array and infers [] for its level; here non-tensors do not count.
TEST(Hdf5Pinned, NumberNonTensorDoesNotShrinkTheInferredBatchSize) {
  const PythonSide& py = python_side();
  ASSERT_TRUE(peer_ok(py.results, "scalar_non_tensor"));
  const fs::path case_dir = py.dir / "scalar_non_tensor";
  EXPECT_EQ(json::parse(read_text(case_dir / "python.json"))["inferred_batch_size"], json::array());
  auto h5 = td::PersistentTensorDict::from_h5((case_dir / "data.h5").string());
  EXPECT_EQ(h5.batch_size().vec(), (std::vector<int64_t>{3}));
  EXPECT_TRUE(matches_truth(h5, case_dir / "truth"));
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define TD_TEST_UNSIGNED_DTYPES 1
td::TensorDict unsigned_td() {
  return td::TensorDict(
      {{"u16", torch::tensor({0, 1, 60000, 65535}, torch::kLong).to(torch::kUInt16)},
       {"u32",
        torch::tensor({int64_t{0}, int64_t{1}, int64_t{4'000'000'000}, int64_t{4'294'967'295}})
            .to(torch::kUInt32)}},
      {4});
}
td::TensorDict u64_td() {  // -1 and -7 as uint64: values above 2^63
  return td::TensorDict({{"u64", torch::tensor({1, -1, 0, -7}, torch::kLong).view(torch::kUInt64)}},
                        {4});
}
#else
#define TD_TEST_UNSIGNED_DTYPES 0
#endif

// A group without tensors takes its parent's batch size here; 0.15.3's
// from_h5 raises IndexError for a group of non-tensors only, and infers []
// for an empty group and its parent.
TEST(Hdf5Pinned, GroupWithoutTensorsTakesItsParentsBatchSize) {
  const PythonSide& py = python_side();
  ASSERT_TRUE(peer_ok(py.results, "groups_without_tensors"));
  const fs::path case_dir = py.dir / "groups_without_tensors";
  const json inferred = json::parse(read_text(case_dir / "python.json"))["inferred"];
  EXPECT_EQ(inferred["non_tensor_group"], "IndexError");
  EXPECT_EQ(inferred["empty_group"], (json{{"root", json::array()}, {"g", json::array()}}));
  for (const std::string name : {"non_tensor_group", "empty_group"}) {
    auto h5 = td::PersistentTensorDict::from_h5((case_dir / (name + ".h5")).string());
    EXPECT_EQ(h5.get_tensordict("g").batch_size().vec(), (std::vector<int64_t>{3})) << name;
    EXPECT_TRUE(matches_truth(h5, case_dir / ("truth_" + name))) << name;
  }
}

// Python stores a NonTensorStack of bytes as an opaque |S array and reads
// bytes back; JSON has no bytes, so they read here as strings.
TEST(Hdf5Pinned, BytesStackElementsReadAsStrings) {
  const PythonSide& py = python_side();
  ASSERT_TRUE(peer_ok(py.results, "bytes_stack"));
  const fs::path case_dir = py.dir / "bytes_stack";
  EXPECT_EQ(json::parse(read_text(case_dir / "python.json"))["elements"],
            (json::array({"bytes", "bytes"})));
  auto h5 = td::PersistentTensorDict::from_h5((case_dir / "data.h5").string());
  EXPECT_TRUE(matches_truth(h5, case_dir / "truth"));
}

// uint16, uint32 and uint64 (torch 2.3+), as Python stores them. A LibTorch
// before 2.3 has no such dtypes: uint16/uint32 read widened to int32/int64,
// uint64 is a FormatError naming the dataset.
TEST(Hdf5PythonWritesUnsigned, ReadHereWithTheirDtypes) {
  const PythonSide& py = python_side();
  ASSERT_TRUE(peer_ok(py.results, "unsigned"));
  const fs::path case_dir = py.dir / "unsigned";
  EXPECT_EQ(json::parse(read_text(case_dir / "python.json"))["dtypes"],
            (json{{"u16", "torch.uint16"}, {"u32", "torch.uint32"}}));
  auto h5 = td::PersistentTensorDict::from_h5((case_dir / "data.h5").string());
  auto u64 = td::PersistentTensorDict::from_h5((case_dir / "u64.h5").string());
#if TD_TEST_UNSIGNED_DTYPES
  EXPECT_TRUE(matches_truth(h5, case_dir / "truth"));
  EXPECT_TRUE(matches_truth(u64, case_dir / "truth_u64"));
#else
  EXPECT_TRUE(matches_truth(h5, case_dir / "truth_widened"));
  try {
    (void)u64.get("u64");
    ADD_FAILURE() << "a uint64 dataset was read";
  } catch (const td::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("u64"), std::string::npos) << e.what();
  }
#endif
}

// Neither side stores bfloat16 or complex32 (h5py has no such type): both
// refuse with a TypeError, and here an existing file stays as it was.
TEST(Hdf5Pinned, Bfloat16AndComplex32AreRefusedOnBothSides) {
  const PythonSide& py = python_side();
  ASSERT_TRUE(peer_ok(py.results, "refused"));
  const fs::path case_dir = py.dir / "refused";
  const json refused = json::parse(read_text(case_dir / "refused.json"));
  for (const auto& [name, dtype] :
       {std::pair{"bfloat16", torch::kBFloat16}, std::pair{"complex32", torch::kComplexHalf}}) {
    ASSERT_TRUE(refused[name].is_object()) << name << ": Python stored it";
    EXPECT_EQ(refused[name]["error"], "TypeError");
    const fs::path f = case_dir / (std::string("cpp_") + name + ".h5");
    td::to_h5(td::TensorDict({{"ok", torch::arange(3)}}, {3}), f.string()).close();
    try {
      td::to_h5(td::TensorDict({{"x", torch::zeros({3}, dtype)}}, {3}), f.string());
      ADD_FAILURE() << name << " was stored";
    } catch (const td::TypeError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    auto kept = td::PersistentTensorDict::from_h5(f.string());
    EXPECT_EQ(kept.keys().size(), 1u);
    EXPECT_TRUE(kept.get("ok").equal(torch::arange(3)));
  }
  // h5py refuses filters on scalar datasets, so Python's from_dict with
  // compression fails on a non-tensor; here they are written unfiltered
  // (C++ -> Python case gzip_non_tensor).
  ASSERT_TRUE(refused["gzip_non_tensor"].is_object()) << "Python compressed a non-tensor";
  EXPECT_EQ(refused["gzip_non_tensor"]["error"], "TypeError");
}

// ---- C++ -> Python: every case written here, one Python process checks them --------

td::TensorDict gzip_non_tensor_td() {
  td::TensorDict td({{"x", values(torch::kFloat, {100, 3})}}, {100});
  td.set_non_tensor("s", "compressed beside");
  td.set_non_tensor("n", 3);
  return td;
}

struct CppSide {
  fs::path dir;
  json results;
  std::map<std::string, std::string> write_errors;
};

void write_case(const fs::path& case_dir, const td::TensorDict& td,
                const td::H5DatasetOptions& options = {}) {
  td::to_h5(td, (case_dir / "data.h5").string(), options).close();
  write_truth(td, case_dir / "truth");
}

// py_rows: the file Python wrote, rows and leaves written here, checked
// against Python's truth first, then its expected content as truth.
void update_python_file(const fs::path& case_dir) {
  const PythonSide& py = python_side();
  if (!py.results.contains("py_rows") || py.results["py_rows"] != "OK")
    throw std::runtime_error("Python did not write py_rows");
  fs::copy_file(py.dir / "py_rows" / "data.h5", case_dir / "data.h5");
  auto h5 = td::PersistentTensorDict::from_h5((case_dir / "data.h5").string(), "r+",
                                              std::vector<int64_t>{5});
  const auto before = matches_truth(h5, py.dir / "py_rows" / "truth");
  if (!before) throw std::runtime_error(std::string("py_rows as read: ") + before.message());
  td::TensorDict expected = h5.to_tensordict();
  cpp_rows(h5);
  cpp_rows(expected);
  h5.close();
  write_truth(expected, case_dir / "truth");
}

const std::map<std::string, std::function<void(const fs::path&)>>& cpp_cases() {
  static const std::map<std::string, std::function<void(const fs::path&)>> cases = {
    {"dtypes", [](const fs::path& d) { write_case(d, dtypes_td()); }},
    {"nested", [](const fs::path& d) { write_case(d, nested_td()); }},
    {"gzip_chunked", [](const fs::path& d) { write_case(d, gzip_td(), gzip_options()); }},
    {"gzip_non_tensor",
     [](const fs::path& d) { write_case(d, gzip_non_tensor_td(), gzip_options()); }},
    {"non_tensors", [](const fs::path& d) { write_case(d, non_tensors_td()); }},
    {"stacks", [](const fs::path& d) { write_case(d, stacks_td()); }},
    {"stacks_2d", [](const fs::path& d) { write_case(d, stacks_2d_td()); }},
    {"scalars", [](const fs::path& d) { write_case(d, scalars_td()); }},
    {"batch_given", [](const fs::path& d) { write_case(d, batch_given_td()); }},
    {"row_reads",
     [](const fs::path& d) {
       td::H5DatasetOptions chunked;
       chunked.chunks = {2};
       write_case(d, rows_td(), chunked);
       write_truth(rows_td().index({row_index()}), d / "truth_rows");
     }},
    {"cpp_rows", [](const fs::path& d) { write_case(d, exchange_td()); }},
    {"py_rows", update_python_file},
#if TD_TEST_UNSIGNED_DTYPES
    {"unsigned",
     [](const fs::path& d) {
       write_case(d, unsigned_td());
       td::to_h5(u64_td(), (d / "u64.h5").string()).close();
       write_truth(u64_td(), d / "truth_u64");
     }},
#endif
  };
  return cases;
}

const CppSide& cpp_side() {
  static const CppSide side = [] {
    CppSide s;
    s.dir = fresh_dir("hdf5-cpp");
    for (const auto& [name, write] : cpp_cases()) {
      const fs::path case_dir = s.dir / name;
      fs::create_directories(case_dir);
      try {
        write(case_dir);
      } catch (const std::exception& e) {
        s.write_errors[name] = e.what();
        fs::remove_all(case_dir);  // nothing for Python to check
      }
    }
    s.results = run_suite("hdf5", "check", s.dir);
    return s;
  }();
  return side;
}

class Hdf5CppWrites : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { (void)cpp_side(); }
};

TEST_P(Hdf5CppWrites, ReadInPython) {
  const std::string name = GetParam();
  const CppSide& cpp = cpp_side();
  ASSERT_EQ(cpp.write_errors.count(name), 0u) << cpp.write_errors.at(name);
  EXPECT_TRUE(peer_ok(cpp.results, name));
}

INSTANTIATE_TEST_SUITE_P(Hdf5, Hdf5CppWrites,
                         ::testing::Values("dtypes", "nested", "gzip_chunked", "gzip_non_tensor",
                                           "non_tensors", "stacks", "stacks_2d", "scalars",
                                           "batch_given", "row_reads"
#if TD_TEST_UNSIGNED_DTYPES
                                           ,
                                           "unsigned"
#endif
                                           ));

// ---- files whose rows the other side writes ------------------------------------------

// Python wrote it, C++ wrote rows (td[i] = row, td[idx] = rows) and leaves in
// place, Python reads every value back.
TEST(Hdf5RowExchange, PythonFileRowsWrittenHereReadInPython) {
  const CppSide& cpp = cpp_side();
  ASSERT_EQ(cpp.write_errors.count("py_rows"), 0u) << cpp.write_errors.at("py_rows");
  EXPECT_TRUE(peer_ok(cpp.results, "py_rows"));
}

// C++ wrote it, Python wrote rows and leaves in place (hdf5_cases.py's
// python_rows), C++ reads every value back.
TEST(Hdf5RowExchange, FileWrittenHereRowsWrittenInPythonReadHere) {
  const CppSide& cpp = cpp_side();
  ASSERT_EQ(cpp.write_errors.count("cpp_rows"), 0u) << cpp.write_errors.at("cpp_rows");
  ASSERT_TRUE(peer_ok(cpp.results, "cpp_rows"));
  const fs::path case_dir = cpp.dir / "cpp_rows";
  auto h5 = td::PersistentTensorDict::from_h5((case_dir / "data.h5").string(), "r",
                                              std::vector<int64_t>{5});
  EXPECT_TRUE(matches_truth(h5, case_dir / "truth_after"));
  EXPECT_FALSE(matches_truth(h5, case_dir / "truth")) << "Python's row writes did not land";
}

}  // namespace
