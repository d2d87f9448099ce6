// TensorDictModuleBase: the key handling every module of tensordict::nn
// shares (docs/nn.md).
#include "pch.h"

#include <tensordict/nn/tensor_dict_module_base.h>

namespace td = tensordict;

namespace {

// The smallest module: out = in * 2, or as many outputs as asked for.
class Doubler : public td::nn::TensorDictModuleBase {
 public:
  Doubler(std::vector<td::NestedKey> in, std::vector<td::NestedKey> out, int outputs = 1)
      : TensorDictModuleBase("Doubler", std::move(in), std::move(out)), outputs_(outputs) {}
  void forward_into(const td::TensorDictBase& in, td::TensorDictBase& out) override {
    auto x = read_inputs(in);
    std::vector<at::Tensor> y;
    for (int i = 0; i < outputs_; ++i) y.push_back(x.at(0) * 2);
    write_outputs(out, std::move(y));
  }

 private:
  int outputs_;
};

td::TensorDict sample() {
  return td::TensorDict({{"obs", torch::ones({3, 4})}, {{"a", "b"}, torch::zeros({3, 1})}}, {3});
}

}  // namespace

TEST(NnModuleBase, ReadsAndWritesNestedKeysInPlace) {
  Doubler m({"obs"}, {{"out", "x"}});
  auto data = sample();
  auto result = m(data);
  EXPECT_TRUE(result.is_same(data));
  EXPECT_TRUE(torch::equal(data.get({"out", "x"}), torch::full({3, 4}, 2.0)));
}

TEST(NnModuleBase, WritesIntoAnotherTensordict) {
  Doubler m({{"a", "b"}}, {"y"});
  auto data = sample();
  td::TensorDict out({}, {3});
  m.forward(data, out);
  EXPECT_TRUE(out.contains("y"));
  EXPECT_FALSE(data.contains("y"));
}

TEST(NnModuleBase, UnderscoreOutputIsNotWritten) {
  Doubler m({"obs"}, {"_", "kept"}, 2);
  auto data = sample();
  m(data);
  EXPECT_FALSE(data.contains("_"));
  EXPECT_TRUE(data.contains("kept"));
}

TEST(NnModuleBase, MissingInputIsAKeyErrorNamingKeyAndModule) {
  Doubler m({{"a", "missing"}}, {"y"});
  auto data = sample();
  try {
    m(data);
    FAIL() << "no error";
  } catch (const td::KeyError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("('a', 'missing')"), std::string::npos) << what;
    EXPECT_NE(what.find("Doubler"), std::string::npos) << what;
  }
  EXPECT_FALSE(data.contains("y"));
}

TEST(NnModuleBase, NestedTensordictAsInputIsAKeyError) {
  Doubler m({"a"}, {"y"});
  auto data = sample();
  EXPECT_THROW(m(data), td::KeyError);
}

TEST(NnModuleBase, WrongNumberOfOutputsIsAValueErrorAndWritesNothing) {
  Doubler m({"obs"}, {"y", "z"}, 1);
  auto data = sample();
  EXPECT_THROW(m(data), td::ValueError);
  EXPECT_FALSE(data.contains("y"));
}
