// Memory-mapped directories both ways with the real Python tensordict
// (tests/python/memmap_cases.py, the Python side): every dtype Python writes,
// nesting and empty levels, keys that need encoding, non-tensors, tensorclasses,
// heterogeneous lazy stacks, memmap_like of an expanded tensordict, directories
// updated in place by the other side, and a pickled value.
#include "pch.h"

#include "python/peer.h"

#include <tensordict/dtype.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/non_tensor.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/tensor_class.h>

#include <sys/stat.h>
#include <fstream>
#include <functional>
#include <map>

namespace td = tensordict;
using namespace td_python;

namespace {

const std::vector<std::string> kDtypes = {
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "bool",  "uint8",
    "int8",    "int16",    "int32",   "int64",   "uint16",    "uint32",     "uint64"};

td::TensorDict non_tensor_values() {
  td::TensorDict data({{"a", f32({2})}}, {2});
  data.set_non_tensor("text", "cartpole");
  data.set_non_tensor("integer", 7);
  data.set_non_tensor("real", 0.25);
  data.set_non_tensor("list", nlohmann::json::array({1, "two", 3.5}));
  data.set_non_tensor("mapping", nlohmann::json{{"k", {1, 2}}, {"v", nullptr}});
  data.set_non_tensor("flag", true);
  data.set_non_tensor("nothing", nullptr);
  return data;
}

// The structures both sides write, by name (memmap_cases.py's structures()).
std::map<std::string, std::function<td::TensorDict()>> structures() {
  std::map<std::string, std::function<td::TensorDict()>> cases;
  for (const std::string& name : kDtypes)
    cases["dtype_" + name] = [name] {
      return td::TensorDict(
          {{"x", distinctive_values(td::dtype_from_string("torch." + name), {3, 2})}}, {3});
    };
  cases["nested_three_levels"] = [] {
    return td::TensorDict(
        {{"a", f32({3})},
         {"b",
          td::TensorDict(
              {{"c", f32({3, 2})},
               {"d", td::TensorDict({{"e", distinctive_values(torch::kLong, {3, 1, 2})}}, {3, 1})}},
              {3})}},
        {3});
  };
  cases["empty_level"] = [] {
    return td::TensorDict(
        {{"a", f32({3})},
         {"empty", td::TensorDict({}, {3})},
         {"b", td::TensorDict({{"inner_empty", td::TensorDict({}, {3, 2})}}, {3})}},
        {3});
  };
  cases["batch_scalar"] = [] { return td::TensorDict({{"a", f32({})}, {"b", f32({4})}}, {}); };
  cases["batch_zero_rows"] = [] {
    return td::TensorDict({{"a", f32({0, 5})}, {"n", td::TensorDict({{"b", f32({0})}}, {0})}}, {0});
  };
  cases["batch_2d"] = [] {
    return td::TensorDict({{"a", f32({2, 3, 4})}, {"b", distinctive_values(torch::kInt, {2, 3})}},
                          {2, 3});
  };
  cases["keys_encoding"] = [] {
    return td::TensorDict({{"with space", f32({2})},
                           {"ünïcödé", f32({2})},
                           {"dot.key", f32({2})},
                           {"dash-key", f32({2})},
                           {"UPPER", f32({2})},
                           {"nested level", td::TensorDict({{"é x", f32({2, 1})}}, {2})}},
                          {2});
  };
  cases["non_tensor_values"] = non_tensor_values;
  cases["non_tensor_stack"] = [] {
    td::TensorDict data({{"a", f32({4})}}, {4});
    data.set("tasks",
             td::NonTensorStack(std::vector<nlohmann::json>{"lift", "push", "pull", "lift"}));
    data.set("codes", td::NonTensorStack(std::vector<nlohmann::json>{1, 2, 3, 4}));
    return data;
  };
  cases["non_tensor_nested"] = [] {
    td::TensorDict data({{"a", f32({2})}, {"n", td::TensorDict({{"b", f32({2})}}, {2})}}, {2});
    data.set_non_tensor({"n", "label"}, "inner");
    return data;
  };
  cases["non_contiguous_leaf"] = [] {
    return td::TensorDict(
        {{"a", f32({3, 4}).t()},
         {"b", f32({4, 6}).index({torch::indexing::Slice(), torch::indexing::Slice(0, 6, 2)})}},
        {4});
  };
  return cases;
}

// memmap_cases.Transition.
struct Transition : td::TensorClass<Transition> {
  static constexpr std::string_view python_qualname = "memmap_cases.Transition";
  TENSORDICT_FIELDS(obs, action);
  TENSORDICT_OPTIONAL_FIELDS(mask);
  TENSORDICT_NON_TENSOR_FIELDS((std::string, env), (float, gamma), (std::optional<int>, seed));
};

// What a tensorclass holds, as one tensordict (non-tensor fields as
// NonTensorData entries; unset fields absent), as Python's _tensordict.
td::TensorDictBase as_tensordict(const Transition& t) {
  td::TensorDictBase data = t.tensordict().copy();
  for (const auto& [name, value] : t.non_tensor_values().items())
    if (!value.is_null()) data.set_non_tensor(name, value);
  return data;
}

Transition transition(bool all_fields) {
  if (all_fields)
    return Transition({{"obs", f32({4, 3})},
                       {"action", distinctive_values(torch::kLong, {4})},
                       {"mask", distinctive_values(torch::kBool, {4})},
                       {"env", "CartPole"},
                       {"gamma", td::NonTensorData(0.5f)},
                       {"seed", td::NonTensorData(3)}},
                      {4});
  return Transition({{"obs", f32({4, 3})},
                     {"action", distinctive_values(torch::kLong, {4})},
                     {"env", "Pong"},
                     {"gamma", td::NonTensorData(0.25f)}},
                    {4});
}

std::map<std::string, td::LazyStackedTensorDict> lazy_stacks() {
  std::map<std::string, td::LazyStackedTensorDict> stacks;
  stacks.emplace(
      "lazy_stack_heterogeneous",
      td::lazy_stack(
          {td::TensorDict({{"a", f32({2})}, {"b", f32({2, 3})}}, {2}),
           td::TensorDict({{"a", f32({2}) + 1}, {"c", distinctive_values(torch::kLong, {2, 1})}},
                          {2}),
           td::TensorDict({{"a", f32({2}) + 2}, {"b", f32({2, 5})}}, {2})},
          0));
  stacks.emplace("lazy_stack_dim1", td::lazy_stack({td::TensorDict({{"a", f32({2})}}, {2}),
                                                    td::TensorDict({{"a", f32({2}) * 2}}, {2})},
                                                   1));
  return stacks;
}

constexpr int64_t kExpandedRows = 1000000;

void write_stack_case(const td::LazyStackedTensorDict& stack, const fs::path& dir) {
  stack.memmap((dir / "data").string());
  for (std::size_t i = 0; i < stack.num_members(); ++i)
    write_truth(stack.tensordicts()[i], dir / ("truth_" + std::to_string(i)));
  std::ofstream(dir / "stack.json")
      << nlohmann::json{{"stack_dim", stack.stack_dim()}, {"members", stack.num_members()}}.dump();
}

::testing::AssertionResult stack_matches(const td::TensorDictBase& got, const fs::path& dir) {
  std::ifstream in(dir / "stack.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  if (!got.is<td::LazyStackedTensorDict>())
    return ::testing::AssertionFailure() << "a " << got.type_name() << ", expected a lazy stack";
  const auto stack = got.as<td::LazyStackedTensorDict>();
  if (stack.stack_dim() != meta["stack_dim"] || stack.num_members() != meta["members"])
    return ::testing::AssertionFailure() << "stack_dim " << stack.stack_dim() << ", "
                                         << stack.num_members() << " members, expected " << meta;
  for (std::size_t i = 0; i < stack.num_members(); ++i) {
    auto r = matches_truth(stack.tensordicts()[i], dir / ("truth_" + std::to_string(i)));
    if (!r) return r << " (member " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

// Rows C++ writes in place into a directory Python saved (for_cpp_update, of
// the nested_three_levels structure), and the one Python writes into C++'s
// (update_by_python, memmap_cases.py check_cpp_case()).
void update_in_place(const fs::path& data_dir) {
  td::TensorDictBase loaded = td::load_memmap(data_dir.string());
  loaded.index_put_(
      {1}, td::TensorDict(
               {{"a", torch::tensor(-7.0f)},
                {"b", td::TensorDict(
                          {{"c", torch::full({2}, 4.5f)},
                           {"d", td::TensorDict({{"e", torch::full({1, 2}, int64_t{-3})}}, {1})}},
                          {})}},
               {}));
  loaded.get({"b", "c"}).add_(1);
}

// Both directions, run once per process: Python writes its cases; C++ writes
// its own (and updates one of Python's); Python checks C++'s and updates one.
// Nothing here throws: a C++ case that fails to write is recorded in
// cpp_errors and fails its own test only.
struct Exchange {
  fs::path root = fresh_dir("memmap");
  fs::path from_python = root / "from_python";
  fs::path to_python = root / "to_python";
  nlohmann::json python_written, python_checked;
  std::map<std::string, std::string> cpp_errors;

  void write_case(const std::string& name, const std::function<void(const fs::path&)>& write) {
    try {
      write(to_python / name);
    } catch (const std::exception& e) {
      cpp_errors[name] = e.what();
    }
  }

  Exchange() {
    fs::create_directories(from_python);
    fs::create_directories(to_python);
    python_written = run_suite("memmap", "write", from_python);
    for (const auto& [name, build] : structures())
      write_case(name, [&](const fs::path& dir) {
        const td::TensorDict data = build();
        data.memmap((dir / "data").string());
        write_truth(data, dir / "truth");
      });
    for (bool all : {true, false})
      write_case(all ? "tensorclass" : "tensorclass_optional_unset", [&](const fs::path& dir) {
        const Transition t = transition(all);
        t.memmap((dir / "data").string());
        write_truth(as_tensordict(t), dir / "truth");
      });
    for (const auto& [name, stack] : lazy_stacks())
      write_case(name, [&](const fs::path& dir) { write_stack_case(stack, dir); });
    write_case("memmap_like_expanded", [](const fs::path& dir) {
      td::TensorDict row(
          {{"obs", f32({4})},
           {"n", td::TensorDict({{"a", distinctive_values(torch::kShort, {2, 2})}}, {})}},
          {});
      row.expand({kExpandedRows}).memmap_like((dir / "data").string());
    });
    if (python_written.value("for_cpp_update", "") == "OK")
      write_case("updated_by_cpp", [&](const fs::path& dir) {
        fs::create_directories(dir);
        fs::copy(from_python / "for_cpp_update" / "data", dir / "data",
                 fs::copy_options::recursive);
        update_in_place(dir / "data");
        write_truth(td::load_memmap((dir / "data").string()), dir / "truth");
      });
    write_case("update_by_python", [](const fs::path& dir) {
      const td::TensorDict data = structures().at("nested_three_levels")();
      data.memmap((dir / "data").string());
      write_truth(data, dir / "truth");
    });
    python_checked = run_suite("memmap", "check", to_python);
  }
  ~Exchange() {
    if (!std::getenv("TD_KEEP_PEER_DIRS")) fs::remove_all(root);
  }

  // The Python peer's verdict on a case C++ wrote, or why C++ could not write it.
  ::testing::AssertionResult checked(const std::string& name) const {
    if (auto it = cpp_errors.find(name); it != cpp_errors.end())
      return ::testing::AssertionFailure() << "C++ could not write " << name << ": " << it->second;
    return peer_ok(python_checked, name);
  }
};

const Exchange& exchange() {
  static const Exchange instance;
  return instance;
}

std::vector<std::string> structure_names() {
  std::vector<std::string> names;
  for (const auto& [name, build] : structures()) names.push_back(name);
  return names;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// ---- Python -> C++ ------------------------------------------------------------------

class MemmapFromPython : public ::testing::TestWithParam<std::string> {};

TEST_P(MemmapFromPython, ReadsWhatPythonWrote) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, GetParam()));
  const fs::path dir = ex.from_python / GetParam();
  const td::TensorDictBase back = td::load_memmap((dir / "data").string());
  EXPECT_TRUE(matches_truth(back, dir / "truth"));
}

INSTANTIATE_TEST_SUITE_P(Structures, MemmapFromPython, ::testing::ValuesIn([] {
                           auto names = structure_names();
                           names.insert(names.end(), {"tensorclass", "tensorclass_optional_unset"});
                           return names;
                         }()),
                         param_name);

TEST(MemmapFromPythonTyped, TensorclassLoadsAsTheCppClass) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, "tensorclass"));
  const Transition t = Transition::load_memmap((ex.from_python / "tensorclass" / "data").string());
  EXPECT_EQ(t.env(), "CartPole");
  EXPECT_EQ(t.gamma(), 0.5f);
  EXPECT_EQ(t.seed(), 3);
  EXPECT_TRUE(torch::equal(t.mask(), distinctive_values(torch::kBool, {4})));
  EXPECT_TRUE(torch::equal(t.action(), distinctive_values(torch::kLong, {4})));
}

TEST(MemmapFromPythonTyped, UnsetOptionalFieldsStayUnset) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, "tensorclass_optional_unset"));
  const Transition t =
      Transition::load_memmap((ex.from_python / "tensorclass_optional_unset" / "data").string());
  EXPECT_EQ(t.env(), "Pong");
  EXPECT_EQ(t.seed(), std::nullopt);
  EXPECT_THROW(t.mask(), td::SchemaError);
}

class MemmapFromPythonStack : public ::testing::TestWithParam<std::string> {};

TEST_P(MemmapFromPythonStack, LoadsAsALazyStack) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, GetParam()));
  const fs::path dir = ex.from_python / GetParam();
  EXPECT_TRUE(stack_matches(td::load_memmap((dir / "data").string()), dir));
}

INSTANTIATE_TEST_SUITE_P(Stacks, MemmapFromPythonStack,
                         ::testing::Values("lazy_stack_heterogeneous", "lazy_stack_dim1"),
                         param_name);

TEST(MemmapFromPythonLike, ExpandedMemmapLikeMapsZerosOfTheFullSize) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, "memmap_like_expanded"));
  const td::TensorDictBase back =
      td::load_memmap((ex.from_python / "memmap_like_expanded" / "data").string());
  EXPECT_EQ(back.batch_size(), std::vector<int64_t>({kExpandedRows}));
  EXPECT_EQ(back.get("obs").sizes(), c10::IntArrayRef({kExpandedRows, 4}));
  EXPECT_EQ(back.get({"n", "a"}).sizes(), c10::IntArrayRef({kExpandedRows, 2, 2}));
  EXPECT_EQ(back.get({"n", "a"}).scalar_type(), torch::kShort);
  EXPECT_EQ(back.get("obs").count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(back.get({"n", "a"}).count_nonzero().item<int64_t>(), 0);
}

TEST(MemmapFromPythonPickle, APickledValueIsRefusedNamingTheKey) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, "pickled_value"));
  const std::string dir = (ex.from_python / "pickled_value" / "data").string();
  try {
    td::load_memmap(dir);
    FAIL() << "a directory holding a pickle was loaded";
  } catch (const td::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("obj"), std::string::npos) << what;
    EXPECT_NE(what.find("pickle"), std::string::npos) << what;
  }
}

// ---- C++ -> Python ------------------------------------------------------------------

class MemmapToPython : public ::testing::TestWithParam<std::string> {};

TEST_P(MemmapToPython, PythonReadsWhatCppWrote) { EXPECT_TRUE(exchange().checked(GetParam())); }

INSTANTIATE_TEST_SUITE_P(Structures, MemmapToPython, ::testing::ValuesIn([] {
                           auto names = structure_names();
                           names.insert(names.end(), {"tensorclass", "tensorclass_optional_unset",
                                                      "lazy_stack_heterogeneous", "lazy_stack_dim1",
                                                      "memmap_like_expanded"});
                           return names;
                         }()),
                         param_name);

// ---- updated in place by the other side ----------------------------------------------

TEST(MemmapInPlace, PythonReadsRowsCppWroteIntoItsDirectory) {
  ASSERT_TRUE(peer_ok(exchange().python_written, "for_cpp_update"));
  EXPECT_TRUE(exchange().checked("updated_by_cpp"));
}

TEST(MemmapInPlace, CppReadsRowsPythonWroteIntoItsDirectory) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(ex.checked("update_by_python"));
  const fs::path dir = ex.to_python / "update_by_python";
  const td::TensorDictBase back = td::load_memmap((dir / "data").string());
  EXPECT_TRUE(matches_truth(back, dir / "truth_after"));
  // What Python wrote, spelled out: row 1 of every leaf, and leaf "a" doubled.
  EXPECT_EQ(back.get("a")[1].item<float>(), -10.0f);
  EXPECT_EQ(back.get({"b", "d", "e"})[1].flatten()[0].item<int64_t>(), 77);
}

TEST(MemmapInPlace, EveryPythonCaseIsChecked) {
  // A case Python writes that no C++ case reads would pass unseen.
  std::vector<std::string> written;
  for (const auto& [name, verdict] : exchange().python_written.items()) written.push_back(name);
  std::vector<std::string> read = structure_names();
  read.insert(read.end(),
              {"tensorclass", "tensorclass_optional_unset", "lazy_stack_heterogeneous",
               "lazy_stack_dim1", "memmap_like_expanded", "pickled_value", "for_cpp_update"});
  std::sort(written.begin(), written.end());
  std::sort(read.begin(), read.end());
  EXPECT_EQ(written, read);
}

}  // namespace

// ---- differences from Python 0.15.3 that stay (docs/python_to_cpp.md) ----------------

namespace {

int64_t allocated_bytes(const fs::path& file) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_blocks) * 512 : -1;
}

TEST(MemmapPinned, MemmapLikeAllocatesItsFilesWherePythonLeavesThemSparse) {
  // C++ reserves the blocks (posix_fallocate), so a full disk is an error of
  // memmap_like() rather than a SIGBUS at a later write; Python truncates.
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, "memmap_like_expanded"));
  const fs::path python_file = ex.from_python / "memmap_like_expanded" / "data" / "obs.memmap";
  const fs::path cpp_file = ex.to_python / "memmap_like_expanded" / "data" / "obs.memmap";
  const int64_t size = kExpandedRows * 4 * 4;
  ASSERT_EQ(static_cast<int64_t>(fs::file_size(python_file)), size);
  ASSERT_EQ(static_cast<int64_t>(fs::file_size(cpp_file)), size);
  EXPECT_LT(allocated_bytes(python_file), size / 2);
  EXPECT_GE(allocated_bytes(cpp_file), size);
}

TEST(MemmapPinned, MetaJsonHasNoFormatVersionFields) {
  // Python 0.15 adds "_format_version" and "_class"; it reads directories
  // without them (MemmapToPython), and so does every older Python.
  std::ifstream in(exchange().to_python / "nested_three_levels" / "data" / "meta.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  EXPECT_FALSE(meta.contains("_format_version"));
  EXPECT_FALSE(meta.contains("_class"));
  EXPECT_EQ(meta["_type"], "<class 'tensordict._td.TensorDict'>");
}

TEST(MemmapPinned, Float8DtypesRoundTripInCppOnly) {
  // Python 0.15.3's memmap() fails on float8 dtypes (KeyError); C++ writes and
  // reads them under Python's dtype names.
  const fs::path dir = fresh_dir("float8");
  const at::Tensor x = torch::tensor({0.5, -2.0, 448.0}).to(at::ScalarType::Float8_e4m3fn);
  const at::Tensor y = torch::tensor({1.0, -0.25, 3.0}).to(at::ScalarType::Float8_e5m2);
  td::TensorDict({{"x", x}, {"y", y}}, {3}).memmap((dir / "data").string());
  std::ifstream in(dir / "data" / "meta.json");
  EXPECT_EQ(nlohmann::json::parse(in)["x"]["dtype"], "torch.float8_e4m3fn");
  const td::TensorDictBase back = td::load_memmap((dir / "data").string());
  EXPECT_EQ(back.get("y").scalar_type(), at::ScalarType::Float8_e5m2);
  EXPECT_TRUE(torch::equal(back.get("x").to(torch::kFloat), x.to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(back.get("y").to(torch::kFloat), y.to(torch::kFloat)));
  fs::remove_all(dir);
}

}  // namespace
