// State dicts both ways with the real Python tensordict and torch
// (tests/python/state_dict_cases.py): torch.save(td.state_dict()) in its
// layouts and a module's state_dict() read by load_state_dict_file, and
// save_state_dict's files read by torch.load(weights_only=True), then loaded
// into a tensordict (or a module) on each side.
#include "pch.h"

#include "python/peer.h"

#include <tensordict/dtype.h>
#include <tensordict/module.h>
#include <tensordict/state_dict.h>
#include <tensordict/tensor_dict.h>

#include <functional>
#include <map>

namespace td = tensordict;
using namespace td_python;

namespace {

std::map<std::string, std::function<td::TensorDict()>> structures() {
  std::map<std::string, std::function<td::TensorDict()>> cases;
  cases["nested"] = [] {
    return td::TensorDict(
        {{"a", f32({3})},
         {"n", td::TensorDict(
                   {{"b", f32({3, 2})},
                    {"m", td::TensorDict({{"c", distinctive_values(torch::kLong, {3, 1})}}, {3})}},
                   {3})}},
        {3});
  };
  cases["dtypes"] = [] {
    td::TensorDict data({}, {2});
    for (const char* name : {"float16", "bfloat16", "float64", "complex64", "bool", "uint8", "int8",
                             "int16", "int32", "uint16", "uint32", "uint64"})
      data.set(name,
               distinctive_values(td::dtype_from_string(std::string("torch.") + name), {2, 3}));
    return data;
  };
  cases["non_tensor"] = [] {
    td::TensorDict data({{"a", f32({2})}, {"n", td::TensorDict({{"b", f32({2})}}, {2})}}, {2});
    data.set_non_tensor("label", "cartpole");
    data.set_non_tensor({"n", "note"}, "inner");
    return data;
  };
  return cases;
}

const std::map<std::string, td::StateDictOptions>& layouts() {
  static const std::map<std::string, td::StateDictOptions> l = {
      {"flat", {}}, {"nested", {.flatten = false}}, {"legacy", {.flatten = false, .legacy = true}}};
  return l;
}

torch::nn::Sequential sequential() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
}

struct Exchange {
  fs::path root = fresh_dir("state-dict");
  fs::path from_python = root / "from_python";
  fs::path to_python = root / "to_python";
  nlohmann::json python_written, python_checked;
  std::map<std::string, std::string> cpp_errors;
  std::vector<std::string> cpp_cases;

  void write_case(const std::string& name, const std::function<void(const fs::path&)>& write) {
    cpp_cases.push_back(name);
    try {
      fs::create_directories(to_python / name);
      write(to_python / name);
    } catch (const std::exception& e) {
      cpp_errors[name] = e.what();
    }
  }

  Exchange() {
    fs::create_directories(from_python);
    python_written = run_suite("state_dict", "write", from_python);
    for (const auto& [name, build] : structures())
      for (const auto& [layout, options] : layouts())
        write_case(name + "_" + layout, [&](const fs::path& dir) {
          const td::TensorDict data = build();
          td::save_state_dict(data.state_dict(options), (dir / "sd.pt").string());
          write_truth(data, dir / "truth");
        });
    write_case("module_sequential", [](const fs::path& dir) {
      auto net = sequential();
      const td::TensorDict params = td::from_module(*net);
      td::save_state_dict(params.state_dict(), (dir / "sd.pt").string());
      write_truth(params, dir / "truth");
    });
    python_checked = run_suite("state_dict", "check", to_python);
  }
  ~Exchange() {
    if (!std::getenv("TD_KEEP_PEER_DIRS")) fs::remove_all(root);
  }
};

const Exchange& exchange() {
  static const Exchange instance;
  return instance;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// ---- Python -> C++ ------------------------------------------------------------------

class StateDictFromPython : public ::testing::TestWithParam<std::string> {};

TEST_P(StateDictFromPython, LoadsIntoATensordictOfTheSameStructure) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, GetParam()));
  const fs::path dir = ex.from_python / GetParam();
  const td::StateDict sd = td::load_state_dict_file((dir / "sd.pt").string());
  td::TensorDict target = zeros_like_truth(dir / "truth");
  target.load_state_dict(sd);
  EXPECT_TRUE(matches_truth(target, dir / "truth"));
}

INSTANTIATE_TEST_SUITE_P(Layouts, StateDictFromPython,
                         ::testing::Values("nested_flat", "nested_nested", "dtypes_flat",
                                           "dtypes_nested", "non_tensor_flat", "non_tensor_nested",
                                           "keep_vars_parameters"),
                         param_name);

TEST(StateDictFromPythonModule, LoadsIntoTheSameLibTorchModule) {
  const Exchange& ex = exchange();
  ASSERT_TRUE(peer_ok(ex.python_written, "module_sequential"));
  const fs::path dir = ex.from_python / "module_sequential";
  auto net =
      torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
  td::TensorDictBase params = td::from_module(*net).clone();
  params.load_state_dict(td::load_state_dict_file((dir / "sd.pt").string()));
  td::to_module(params, *net);
  EXPECT_TRUE(matches_truth(td::from_module(*net).detach(), dir / "truth"));
}

TEST(StateDictFromPythonModule, EveryPythonCaseIsChecked) {
  std::vector<std::string> written;
  for (const auto& [name, verdict] : exchange().python_written.items()) written.push_back(name);
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written,
            (std::vector<std::string>{"dtypes_flat", "dtypes_nested", "keep_vars_parameters",
                                      "module_sequential", "nested_flat", "nested_nested",
                                      "non_tensor_flat", "non_tensor_nested"}));
}

// ---- C++ -> Python ------------------------------------------------------------------

class StateDictToPython : public ::testing::TestWithParam<std::string> {};

TEST_P(StateDictToPython, TorchLoadWithWeightsOnlyReadsWhatCppSaved) {
  const Exchange& ex = exchange();
  if (auto it = ex.cpp_errors.find(GetParam()); it != ex.cpp_errors.end())
    FAIL() << "C++ could not write " << GetParam() << ": " << it->second;
  EXPECT_TRUE(peer_ok(ex.python_checked, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Layouts, StateDictToPython,
                         ::testing::Values("nested_flat", "nested_nested", "nested_legacy",
                                           "dtypes_flat", "dtypes_nested", "dtypes_legacy",
                                           "non_tensor_flat", "non_tensor_nested",
                                           "non_tensor_legacy", "module_sequential"),
                         param_name);

}  // namespace
