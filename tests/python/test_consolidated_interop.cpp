// Consolidated tensordicts both ways with the real Python tensordict
// (tests/python/consolidated_cases.py): the file of consolidate(filename) read
// by from_consolidated(path), and the buffer and metadata of consolidate()
// read by from_consolidated(storage, metadata), each way round, over every
// dtype both sides share, nesting, empty levels and non-tensors.
#include "pch.h"

#include "python/peer.h"

#include <tensordict/dtype.h>
#include <tensordict/non_tensor.h>
#include <tensordict/tensor_dict.h>

#include <fstream>
#include <functional>
#include <map>

namespace td = tensordict;
using namespace td_python;

namespace {

std::map<std::string, std::function<td::TensorDict()>> structures() {
  std::map<std::string, std::function<td::TensorDict()>> cases;
  cases["dtypes"] = [] {
    td::TensorDict data({}, {3});
    for (const char* name : {"float16", "bfloat16", "float64", "complex64", "bool", "uint8", "int8",
                             "int16", "int32", "int64", "uint16", "uint32", "uint64"})
      data.set(name,
               distinctive_values(td::dtype_from_string(std::string("torch.") + name), {3, 2}));
    return data;
  };
  cases["nested"] = [] {
    return td::TensorDict(
        {{"a", f32({4})},
         {"n",
          td::TensorDict(
              {{"b", f32({4, 3})},
               {"m", td::TensorDict({{"c", distinctive_values(torch::kLong, {4, 2, 2})}}, {4, 2})}},
              {4})}},
        {4});
  };
  cases["non_tensor"] = [] {
    td::TensorDict data({{"a", f32({4})}, {"n", td::TensorDict({{"b", f32({4})}}, {4})}}, {4});
    data.set_non_tensor("label", "cartpole");
    data.set_non_tensor({"n", "config"}, nlohmann::json{{"lr", 0.5}, {"layers", {2, 3}}});
    data.set("tasks",
             td::NonTensorStack(std::vector<nlohmann::json>{"lift", "push", "pull", "lift"}));
    return data;
  };
  cases["batch_2d"] = [] {
    return td::TensorDict({{"a", f32({2, 3, 5})}, {"b", distinctive_values(torch::kBool, {2, 3})}},
                          {2, 3});
  };
  cases["empty_level"] = [] {
    return td::TensorDict({{"a", f32({2})}, {"e", td::TensorDict({}, {2})}}, {2});
  };
  cases["batch_scalar"] = [] {
    return td::TensorDict({{"a", f32({})}, {"b", distinctive_values(torch::kInt, {5})}}, {});
  };
  return cases;
}

struct Exchange {
  fs::path root = fresh_dir("consolidated");
  fs::path from_python = root / "from_python";
  fs::path to_python = root / "to_python";
  nlohmann::json python_written, python_checked;
  std::map<std::string, std::string> cpp_errors;

  Exchange() {
    fs::create_directories(from_python);
    python_written = run_suite("consolidated", "write", from_python);
    for (const auto& [name, build] : structures()) {
      for (const bool file : {true, false}) {
        const std::string case_name = name + (file ? "_file" : "_buffer");
        const fs::path dir = to_python / case_name;
        try {
          fs::create_directories(dir);
          const td::TensorDict data = build();
          if (file) {
            data.consolidate((dir / "data.bin").string());
          } else {
            const td::TensorDictBase c = data.consolidate();
            const at::Tensor storage = c.consolidated_storage();
            std::ofstream(dir / "storage.bin", std::ios::binary)
                .write(static_cast<const char*>(storage.data_ptr()), storage.nbytes());
            std::ofstream(dir / "metadata.json") << c.consolidated_metadata().dump();
          }
          write_truth(data, dir / "truth");
        } catch (const std::exception& e) {
          cpp_errors[case_name] = e.what();
        }
      }
    }
    python_checked = run_suite("consolidated", "check", to_python);
  }
  ~Exchange() {
    if (!std::getenv("TD_KEEP_PEER_DIRS")) fs::remove_all(root);
  }
};

const Exchange& exchange() {
  static const Exchange instance;
  return instance;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& [name, build] : structures()) {
    names.push_back(name + "_file");
    names.push_back(name + "_buffer");
  }
  return names;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

class ConsolidatedFromPython : public ::testing::TestWithParam<std::string> {};

TEST_P(ConsolidatedFromPython, FromConsolidatedReadsWhatPythonWrote) {
  const Exchange& ex = exchange();
  const std::string& name = GetParam();
  ASSERT_TRUE(peer_ok(ex.python_written, name));
  const fs::path dir = ex.from_python / name;
  td::TensorDictBase back;
  if (name.ends_with("_file")) {
    back = td::TensorDict::from_consolidated((dir / "data.bin").string());
  } else {
    const std::string bytes = read_file(dir / "storage.bin");
    const at::Tensor storage = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(storage.data_ptr(), bytes.data(), bytes.size());
    back = td::TensorDict::from_consolidated(
        storage, nlohmann::ordered_json::parse(read_file(dir / "metadata.json")));
  }
  EXPECT_TRUE(back.is_consolidated());
  EXPECT_TRUE(matches_truth(back, dir / "truth"));
}

INSTANTIATE_TEST_SUITE_P(Structures, ConsolidatedFromPython, ::testing::ValuesIn(case_names()),
                         param_name);

class ConsolidatedToPython : public ::testing::TestWithParam<std::string> {};

TEST_P(ConsolidatedToPython, PythonReadsWhatCppConsolidated) {
  const Exchange& ex = exchange();
  if (auto it = ex.cpp_errors.find(GetParam()); it != ex.cpp_errors.end())
    FAIL() << "C++ could not write " << GetParam() << ": " << it->second;
  EXPECT_TRUE(peer_ok(ex.python_checked, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Structures, ConsolidatedToPython, ::testing::ValuesIn(case_names()),
                         param_name);

TEST(ConsolidatedExchange, EveryPythonCaseIsChecked) {
  std::vector<std::string> written;
  for (const auto& [name, verdict] : exchange().python_written.items()) written.push_back(name);
  std::vector<std::string> read = case_names();
  std::sort(written.begin(), written.end());
  std::sort(read.begin(), read.end());
  EXPECT_EQ(written, read);
}

}  // namespace
