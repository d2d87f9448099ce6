// TensorDictSequential: the keys Python computes (asked of the real Python
// tensordict in the same run), select_subsequence, and running the chain
// compared with calling the modules by hand.
#include "pch.h"

#include <tensordict/module.h>
#include <tensordict/nn/sequential.h>
#include <tensordict/nn/tensor_dict_module.h>

#include <cstdio>
#include <memory>

namespace td = tensordict;
using td::nn::TensorDictModule;
using td::nn::TensorDictModuleBase;
using td::nn::TensorDictSequential;
using Keys = std::vector<td::NestedKey>;
using json = nlohmann::json;

namespace {

// What tests/nn/python/sequential_keys.py prints: Python's answers on the
// cases it defines (run once per process; importing torch takes seconds).
const json& python_cases() {
  static const json cases = [] {
    std::string command =
        std::string("\"") + TENSORDICT_PYTHON + "\" \"" + TD_NN_SEQUENTIAL_KEYS_SCRIPT + "\"";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    if (!pipe) throw std::runtime_error("cannot run " + command);
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
    return json::parse(out);
  }();
  return cases;
}

td::NestedKey key_of(const json& k) {
  std::vector<std::string> parts = k.get<std::vector<std::string>>();
  return td::NestedKey(parts);
}

Keys keys_of(const json& ks) {
  Keys out;
  for (const auto& k : ks) out.push_back(key_of(k));
  return out;
}

// A module with these keys whose outputs are its first input (or a zero).
std::shared_ptr<TensorDictModuleBase> build(const json& spec) {
  if (spec.is_object()) {
    TensorDictSequential::ModuleList modules;
    for (const auto& s : spec["seq"]) modules.push_back(build(s));
    return std::make_shared<TensorDictSequential>(std::move(modules));
  }
  Keys out = keys_of(spec[1]);
  std::size_t n = out.size();
  td::nn::TensorFunction fn = [n](std::vector<at::Tensor> xs) {
    return std::vector<at::Tensor>(n, xs.at(0) + 1);
  };
  return std::make_shared<TensorDictModule>("id", fn, keys_of(spec[0]), std::move(out));
}

// The module's layout as the script describes it.
json describe(const TensorDictModuleBase& m) {
  if (const auto* seq = dynamic_cast<const TensorDictSequential*>(&m)) {
    json mods = json::array();
    for (const auto& sub : seq->modules()) mods.push_back(describe(*sub));
    return json{{"seq", mods}};
  }
  auto keys = [](const Keys& ks) {
    json out = json::array();
    for (const auto& k : ks) out.push_back(std::vector<std::string>(k.begin(), k.end()));
    return out;
  };
  return json::array({keys(m.in_keys()), keys(m.out_keys())});
}

std::optional<Keys> optional_keys(const json& j) {
  if (j.is_null()) return std::nullopt;
  return keys_of(j);
}

std::shared_ptr<TensorDictModule> linear(int64_t in, int64_t out, Keys in_keys, Keys out_keys) {
  return std::make_shared<TensorDictModule>(torch::nn::Linear(in, out), std::move(in_keys),
                                            std::move(out_keys));
}

}  // namespace

TEST(NnSequentialPython, InAndOutKeysAreThoseOfPython) {
  const json& cases = python_cases();
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    TensorDictSequential::ModuleList modules;
    for (const auto& s : c["modules"]) modules.push_back(build(s));
    TensorDictSequential seq(modules);
    SCOPED_TRACE(c["modules"].dump());
    EXPECT_EQ(seq.in_keys(), keys_of(c["in_keys"]));
    EXPECT_EQ(seq.out_keys(), keys_of(c["out_keys"]));
  }
}

TEST(NnSequentialPython, SelectSubsequenceKeepsTheModulesPythonKeeps) {
  int queries = 0;
  for (const auto& c : python_cases()) {
    TensorDictSequential::ModuleList modules;
    for (const auto& s : c["modules"]) modules.push_back(build(s));
    TensorDictSequential seq(modules);
    for (const auto& q : c["queries"]) {
      SCOPED_TRACE(c["modules"].dump() + " query " + q.dump());
      ++queries;
      if (q["result"] == "ValueError") {
        EXPECT_THROW(seq.select_subsequence(optional_keys(q["in"]), optional_keys(q["out"])),
                     td::ValueError);
        continue;
      }
      auto sub = seq.select_subsequence(optional_keys(q["in"]), optional_keys(q["out"]));
      EXPECT_EQ(describe(*sub)["seq"], q["result"]);
    }
  }
  EXPECT_EQ(queries, 16);
}

TEST(NnSequential, SelectSubsequenceSharesTheModules) {
  auto a = linear(4, 4, {"a"}, {"b"});
  auto b = linear(4, 4, {"b"}, {"c"});
  auto c = linear(4, 4, {"a"}, {"e"});
  TensorDictSequential seq({a, b, c});
  auto sub = seq.select_subsequence(std::nullopt, Keys{"c"});
  ASSERT_EQ(sub->size(), 2u);
  EXPECT_EQ(sub->at(0), a);
  EXPECT_EQ(sub->at(1), b);
  EXPECT_EQ(sub->in_keys(), Keys{"a"});
  EXPECT_EQ(sub->out_keys(), (Keys{"b", "c"}));
  EXPECT_THROW(sub->at(2), td::IndexError);
}

TEST(NnSequential, RunsTheChainAsByHand) {
  auto enc = torch::nn::Linear(4, 8);
  auto head = torch::nn::Linear(8, 2);
  auto seq = std::make_shared<TensorDictSequential>(TensorDictSequential::ModuleList{
      std::make_shared<TensorDictModule>(enc, Keys{"obs"}, Keys{"hidden"}),
      std::make_shared<TensorDictModule>(head, Keys{"hidden"}, Keys{{"out", "value"}})});
  EXPECT_EQ(seq->in_keys(), Keys{"obs"});
  EXPECT_EQ(seq->out_keys(), (Keys{"hidden", {"out", "value"}}));
  td::TensorDict data({{"obs", torch::randn({5, 4})}}, {5});
  auto result = (*seq)(data);
  EXPECT_TRUE(result.is_same(data));
  auto hidden = enc->forward(data.get("obs"));
  EXPECT_TRUE(torch::equal(data.get("hidden"), hidden));
  EXPECT_TRUE(torch::equal(data.get({"out", "value"}), head->forward(hidden)));
  // The submodules "0", "1" and their parameters.
  EXPECT_EQ(seq->parameters().size(), 4u);
  EXPECT_TRUE(seq->named_parameters().contains("1.module.bias"));
  auto params = td::from_module(*seq);
  EXPECT_TRUE(params.contains({"0", "module", "weight"}));
  seq->to(torch::kDouble);
  EXPECT_EQ(enc->weight.scalar_type(), torch::kDouble);
}

TEST(NnSequential, TensordictOutReceivesOnlyTheOutKeys) {
  auto seq = TensorDictSequential(
      {linear(4, 3, {"obs"}, {"hidden"}), linear(3, 2, {"hidden"}, {"value"})});
  td::TensorDict data({{"obs", torch::randn({5, 4})}}, {5});
  td::TensorDict out({}, {5});
  seq.forward(data, out);
  EXPECT_EQ(out.keys(), (Keys{"hidden", "value"}));
  EXPECT_EQ(data.keys(), Keys{"obs"});  // the input is left alone
}

TEST(NnSequential, SelectedOutKeysLeaveTheIntermediatesOut) {
  auto seq =
      TensorDictSequential({linear(4, 3, {"obs"}, {"hidden"}), linear(3, 4, {"hidden"}, {"obs"}),
                            linear(4, 2, {"obs"}, {"value"})},
                           Keys{"value"});
  EXPECT_EQ(seq.out_keys(), Keys{"value"});
  td::TensorDict data({{"obs", torch::randn({5, 4})}}, {5});
  auto obs = data.get("obs");
  seq(data);
  EXPECT_FALSE(data.contains("hidden"));
  EXPECT_TRUE(data.contains("value"));
  // The input key a module rewrote is updated, as in Python.
  EXPECT_FALSE(torch::equal(data.get("obs"), obs));
  EXPECT_THROW(seq.select_out_keys({"nope"}), td::ValueError);
  seq.reset_out_keys();
  EXPECT_EQ(seq.out_keys(), (Keys{"hidden", "obs", "value"}));
  seq(data);
  EXPECT_TRUE(data.contains("hidden"));
}

TEST(NnSequential, NestedSequentialsRun) {
  auto inner = std::make_shared<TensorDictSequential>(TensorDictSequential::ModuleList{
      linear(4, 3, {"obs"}, {"h1"}), linear(3, 3, {"h1"}, {"h2"})});
  TensorDictSequential outer({inner, linear(3, 1, {"h2"}, {"v"})});
  EXPECT_EQ(outer.in_keys(), Keys{"obs"});
  EXPECT_EQ(outer.out_keys(), (Keys{"h1", "h2", "v"}));
  td::TensorDict data({{"obs", torch::randn({2, 4})}}, {2});
  outer(data);
  EXPECT_EQ(data.keys(), (Keys{"obs", "h1", "h2", "v"}));
  EXPECT_EQ(outer.parameters().size(), 6u);
}

TEST(NnSequential, ErrorsNameTheModuleAndKeepTheirType) {
  TensorDictSequential seq({linear(4, 3, {"obs"}, {"hidden"}), linear(3, 2, {"missing"}, {"v"})});
  td::TensorDict data({{"obs", torch::randn({5, 4})}}, {5});
  try {
    seq(data);
    FAIL() << "no error";
  } catch (const td::KeyError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'missing'"), std::string::npos) << what;
    EXPECT_NE(what.find("module '1'"), std::string::npos) << what;
  }
  EXPECT_THROW(TensorDictSequential({linear(4, 3, {"obs"}, {"h"}), nullptr}), td::ValueError);
}
