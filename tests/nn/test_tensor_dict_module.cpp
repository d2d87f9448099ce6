// TensorDictModule: a torch::nn module or a function of tensors reading and
// writing tensordicts, compared with calling the module by hand.
#include "pch.h"

#include <tensordict/module.h>
#include <tensordict/nn/model_error.h>
#include <tensordict/nn/tensor_dict_module.h>

namespace td = tensordict;
using td::nn::TensorDictModule;
using Keys = std::vector<td::NestedKey>;

namespace {

// Two inputs, two outputs: (x @ W + y, x - y).
struct TwoWayImpl : torch::nn::Module {
  TwoWayImpl() { weight = register_parameter("weight", torch::randn({4, 4})); }
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& y) {
    return {x.matmul(weight) + y, x - y};
  }
  at::Tensor weight;
};
TORCH_MODULE(TwoWay);

// A vector of outputs, one per input.
struct SplitterImpl : torch::nn::Module {
  std::vector<at::Tensor> forward(at::Tensor x) { return x.chunk(2, -1); }
};
TORCH_MODULE(Splitter);

torch::nn::Sequential mlp() {
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
}

td::TensorDict sample() {
  return td::TensorDict({{"obs", torch::randn({3, 4})}, {{"next", "obs"}, torch::randn({3, 4})}},
                        {3});
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const td::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(NnTensorDictModule, SequentialHolderGivesWhatCallingItByHandGives) {
  auto net = mlp();
  TensorDictModule m(net, {"obs"}, {"action_value"});
  auto data = sample();
  auto result = m(data);
  EXPECT_TRUE(result.is_same(data));
  EXPECT_TRUE(torch::equal(data.get("action_value"), net->forward(data.get("obs"))));
}

TEST(NnTensorDictModule, TupleOutputsGoToNestedKeysInOrder) {
  TwoWay net;
  auto m = std::make_shared<TensorDictModule>(net, Keys{"obs", {"next", "obs"}},
                                              Keys{{"out", "a"}, {"out", "b"}});
  auto data = sample();
  (*m)(data);
  auto [a, b] = net->forward(data.get("obs"), data.get({"next", "obs"}));
  EXPECT_TRUE(torch::equal(data.get({"out", "a"}), a));
  EXPECT_TRUE(torch::equal(data.get({"out", "b"}), b));
  // Usable where the component takes any module.
  std::shared_ptr<td::nn::TensorDictModuleBase> base = m;
  EXPECT_EQ(base->in_keys().size(), 2u);
  EXPECT_EQ(base->out_keys().back(), td::NestedKey({"out", "b"}));
}

TEST(NnTensorDictModule, VectorOutputsAndUnderscoreSkipped) {
  TensorDictModule m(Splitter(), {"obs"}, {"_", "right"});
  auto data = sample();
  m(data);
  EXPECT_FALSE(data.contains("_"));
  EXPECT_TRUE(torch::equal(data.get("right"), data.get("obs").chunk(2, -1)[1]));
}

TEST(NnTensorDictModule, SharedPtrModuleAndTensordictOut) {
  auto lin = std::make_shared<torch::nn::LinearImpl>(4, 3);
  TensorDictModule m(lin, {"obs"}, {"y"});
  auto data = sample();
  td::TensorDict out({}, {3});
  auto returned = m.forward(data, out);
  EXPECT_TRUE(returned.is_same(out));
  EXPECT_FALSE(data.contains("y"));
  EXPECT_TRUE(torch::equal(out.get("y"), lin->forward(data.get("obs"))));
}

TEST(NnTensorDictModule, ParametersAreVisibleThroughTheWrapper) {
  auto net = mlp();
  TensorDictModule m(net, {"obs"}, {"y"});
  auto own = net->parameters();
  auto through = m.parameters();
  ASSERT_EQ(own.size(), through.size());
  for (std::size_t i = 0; i < own.size(); ++i) EXPECT_TRUE(own[i].is_same(through[i]));
  // Python's attribute name: "module".
  EXPECT_TRUE(m.named_parameters().contains("module.0.weight"));
  ASSERT_TRUE(m.module() != nullptr);
  EXPECT_EQ(m.module().get(), net.ptr().get());
  // from_module / to_module through the wrapper.
  auto params = td::from_module(m);
  EXPECT_TRUE(params.contains({"module", "2", "bias"}));
  auto zeros = params.apply([](const at::Tensor& t) { return torch::zeros_like(t); });
  td::to_module(zeros, m);
  EXPECT_TRUE(torch::equal(net->parameters()[0], torch::zeros_like(net->parameters()[0])));
  // train/eval reach the module.
  m.eval();
  EXPECT_FALSE(net->is_training());
}

TEST(NnTensorDictModule, ToDoubleReachesTheModule) {
  auto net = mlp();
  TensorDictModule m(net, {"obs"}, {"y"});
  m.to(torch::kDouble);
  EXPECT_EQ(net->parameters()[0].scalar_type(), torch::kDouble);
  auto data = sample().to(torch::kDouble);
  m(data);
  EXPECT_EQ(data.get("y").scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(data.get("y"), net->forward(data.get("obs"))));
}

TEST(NnTensorDictModule, PlainFunctions) {
  // Positional tensors, as in Python's TensorDictModule(lambda x, y: ...).
  TensorDictModule add("add",
                       [](at::Tensor x, at::Tensor y) { return std::make_tuple(x + y, x - y); },
                       {"obs", {"next", "obs"}}, {"sum", "diff"});
  auto data = sample();
  add(data);
  EXPECT_TRUE(torch::equal(data.get("sum"), data.get("obs") + data.get({"next", "obs"})));
  EXPECT_TRUE(torch::equal(data.get("diff"), data.get("obs") - data.get({"next", "obs"})));
  // A TensorFunction takes any number of inputs.
  td::nn::TensorFunction total = [](std::vector<at::Tensor> xs) {
    at::Tensor s = xs.at(0);
    for (std::size_t i = 1; i < xs.size(); ++i) s = s + xs[i];
    return std::vector<at::Tensor>{s};
  };
  TensorDictModule all("total", total, {"obs", "sum", "diff"}, {"total"});
  all(data);
  EXPECT_TRUE(torch::allclose(data.get("total"), data.get("obs") * 3));
  EXPECT_TRUE(all.parameters().empty());
  EXPECT_EQ(all.module(), nullptr);
}

TEST(NnTensorDictModule, ArityIsCheckedAtConstruction) {
  auto msg = error_of([] { TensorDictModule m(torch::nn::Linear(4, 8), {"a", "b"}, {"y"}); });
  // A Linear takes one tensor; the error names the module and the keys.
  EXPECT_NE(msg.find("Linear"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 in_keys"), std::string::npos) << msg;
  EXPECT_NE(msg.find("takes 1"), std::string::npos) << msg;
  EXPECT_THROW(TensorDictModule(TwoWay(), {"a"}, {"y"}), td::ValueError);
  EXPECT_THROW(TensorDictModule("f", [](at::Tensor x) { return x; }, {}, {"y"}), td::ValueError);
}

TEST(NnTensorDictModule, MissingKeyIsAKeyErrorAndNothingIsWritten) {
  TensorDictModule m(mlp(), {{"next", "missing"}}, {"y"});
  auto data = sample();
  auto before = data.keys(true);
  auto msg = error_of([&] { m(data); });
  EXPECT_NE(msg.find("('next', 'missing')"), std::string::npos) << msg;
  EXPECT_THROW(m(data), td::KeyError);
  EXPECT_EQ(data.keys(true), before);
}

TEST(NnTensorDictModule, OutputCountMismatchIsAValueErrorAndNothingIsWritten) {
  TensorDictModule m(TwoWay(), {"obs", "obs"}, {"y", "z", "w"});
  auto data = sample();
  EXPECT_THROW(m(data), td::ValueError);
  EXPECT_FALSE(data.contains("y"));
}

TEST(NnTensorDictModule, ModuleFailureIsTypedNamesTheModuleAndWritesNothing) {
  // A Linear(4, 8) fed a 5-feature input: LibTorch's error, typed, with the
  // module, its keys and LibTorch's own message.
  TensorDictModule m(mlp(), {"wide"}, {"y"});
  auto data = sample();
  data.set("wide", torch::randn({3, 5}));
  auto msg = error_of([&] { m(data); });
  EXPECT_NE(msg.find("TensorDictModule(Sequential)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'wide'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mat1 and mat2"), std::string::npos) << msg;
  EXPECT_THROW(m(data), td::nn::ModelError);
  EXPECT_FALSE(data.contains("y"));
}

TEST(NnTensorDictModule, OutputsNotStartingWithTheBatchSizeWriteNothing) {
  // The first output fits, the second does not: neither is written.
  TensorDictModule m("f", [](at::Tensor x) { return std::make_tuple(x, x.sum()); }, {"obs"},
                     {"y", "z"});
  auto data = sample();
  EXPECT_THROW(m(data), td::ShapeError);
  EXPECT_FALSE(data.contains("y"));
  EXPECT_FALSE(data.contains("z"));
}

TEST(NnTensorDictModule, GradientsFlowThroughTheWrapper) {
  auto net = mlp();
  TensorDictModule m(net, {"obs"}, {"y"});
  auto data = sample();
  m(data).get("y").sum().backward();
  for (const auto& p : m.parameters()) {
    ASSERT_TRUE(p.grad().defined());
  }
  EXPECT_GT(net->parameters()[0].grad().abs().sum().item<float>(), 0.0f);
}

TEST(NnTensorDictModule, SoftUpdateOfATargetNetworkThroughTheWrappers) {
  // TorchRL's target update: the parameters of two wrapped networks as
  // tensordicts (sharing the modules' tensors), target.lerp_(online, tau).
  auto online_net = mlp();
  auto target_net = mlp();
  TensorDictModule online(online_net, {"obs"}, {"q"});
  TensorDictModule target(target_net, {"obs"}, {"q"});
  auto online_params = td::from_module(online);
  auto target_params = td::from_module(target);
  std::vector<at::Tensor> before;
  for (const auto& p : target_net->parameters()) before.push_back(p.detach().clone());
  {
    torch::NoGradGuard no_grad;
    target_params.lerp_(online_params, 0.25);
  }
  auto on = online_net->parameters();
  auto tg = target_net->parameters();
  ASSERT_EQ(tg.size(), before.size());
  for (std::size_t i = 0; i < tg.size(); ++i)
    EXPECT_TRUE(torch::allclose(tg[i], before[i].lerp(on[i], 0.25))) << i;
  // The target network computes with the updated parameters.
  auto data = sample();
  target(data);
  EXPECT_TRUE(torch::equal(data.get("q"), target_net->forward(data.get("obs"))));
}
