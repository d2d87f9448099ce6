// AOTITensorDictModule over AOTInductor packages that Python compiled in this
// run (tests/nn/python/make_models.py); outputs compared with Python's.
#include "pch.h"

#include <tensordict/nn/aoti_module.h>

#include "nn/models_dir.h"

namespace td = tensordict;
using td::nn::AOTITensorDictModule;
using td::nn::DictCall;
using td::nn::KeyLayout;
using td::nn::PositionalCall;

namespace {

std::shared_ptr<AOTITensorDictModule> order_probe(std::vector<td::NestedKey> out_keys = {}) {
  return std::make_shared<AOTITensorDictModule>(
      nn_test::model_path("order_probe.pt2"),
      DictCall{{}, KeyLayout::nested(), std::move(out_keys)});
}

// The probe's inputs, inserted in an order unlike the package's
// ("zeta", then ("alpha", "mid"), ("alpha", "beta")).
td::TensorDict probe_input(const std::map<std::string, at::Tensor>& ref) {
  return td::TensorDict({{{"alpha", "beta"}, ref.at("alpha.beta")},
                         {{"alpha", "mid"}, ref.at("alpha.mid")},
                         {"zeta", ref.at("zeta")}},
                        {6});
}

}  // namespace

TEST(AOTIModule, FlattensInTheCallSpecsOrder) {
  auto module = order_probe();
  // The spec's dict order is Python's insertion order, not sorted.
  EXPECT_EQ(module->in_keys(),
            (std::vector<td::NestedKey>{"zeta", {"alpha", "mid"}, {"alpha", "beta"}}));
  EXPECT_EQ(module->out_keys(), (std::vector<td::NestedKey>{{"y", "b"}, {"y", "a"}, "index"}));
  auto ref = nn_test::load_reference("order_probe");
  auto data = probe_input(ref);
  (*module)(data);
  EXPECT_TRUE(torch::allclose(data.get({"y", "b"}), ref.at("y.b"), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(data.get({"y", "a"}), ref.at("y.a"), 1e-5, 1e-6));
  EXPECT_TRUE(data.get("index").equal(ref.at("index")));
  // Nested keys stay nested: no "y_b" / "y.b" names.
  EXPECT_EQ(data.get_tensordict("y").keys(), (std::vector<td::NestedKey>{"b", "a"}));
}

TEST(AOTIModule, OutKeysFilterAndDynamicBatch) {
  auto module = order_probe({"y"});
  EXPECT_EQ(module->out_keys(), (std::vector<td::NestedKey>{{"y", "b"}, {"y", "a"}, "_"}));
  auto ref = nn_test::load_reference("order_probe");
  // A batch of 2 out of Python's 6: the batch dim is dynamic.
  auto data = probe_input(ref).index({at::indexing::Slice(0, 2)});
  auto out = module->forward(data, td::TensorDict({}, {2}));
  EXPECT_FALSE(out.contains("index"));
  EXPECT_TRUE(torch::allclose(out.get({"y", "b"}), ref.at("y.b").slice(0, 0, 2), 1e-5, 1e-6));
  EXPECT_THROW(order_probe({"nope"}), td::KeyError);
}

TEST(AOTIModule, ChecksInputsBeforeTheLoaderRuns) {
  auto module = order_probe();
  auto ref = nn_test::load_reference("order_probe");
  // dtype: an int32 index where the package takes int64.
  auto data = probe_input(ref);
  data.set({"alpha", "mid"}, ref.at("alpha.mid").to(torch::kInt32));
  auto msg = nn_test::message_of([&] { module->forward(data); });
  EXPECT_NE(msg.find("('alpha', 'mid')"), std::string::npos) << msg;
  EXPECT_THROW(module->forward(data), td::TypeError);
  // rank and static dims.
  data = probe_input(ref);
  data.set("zeta", torch::zeros({6, 3}));
  msg = nn_test::message_of([&] { module->forward(data); });
  EXPECT_NE(msg.find("'zeta'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1..1024, 2]"), std::string::npos) << msg;
  EXPECT_THROW(module->forward(data), td::ShapeError);
  data.set("zeta", torch::zeros({6, 2, 1}));
  EXPECT_THROW(module->forward(data), td::ShapeError);
  // A missing key.
  data = probe_input(ref);
  data.exclude_({"zeta"});
  EXPECT_THROW(module->forward(data), td::KeyError);
  // A non-contiguous input is made contiguous, not misread.
  data = probe_input(ref);
  data.set("zeta", ref.at("zeta").t().contiguous().t());
  ASSERT_FALSE(data.get("zeta").is_contiguous());
  module->forward(data);
  EXPECT_TRUE(torch::allclose(data.get({"y", "b"}), ref.at("y.b"), 1e-5, 1e-6));
}

TEST(AOTIModule, PositionalPackage) {
  auto ref = nn_test::load_reference("positional");
  auto module = std::make_shared<AOTITensorDictModule>(
      nn_test::model_path("positional.pt2"),
      PositionalCall{{"x", {"index", "k"}}, {"scaled", "total"}});
  td::TensorDict data({{"x", ref.at("x")}, {{"index", "k"}, ref.at("k")}}, {4});
  // "total" is a 0-dim sum: written into a tensordict without batch dims.
  auto out = module->forward(data, td::TensorDict({}, {}));
  EXPECT_TRUE(torch::allclose(out.get("scaled"), ref.at("out0")));
  EXPECT_TRUE(torch::allclose(out.get("total"), ref.at("out1")));
  // The static dim 4 is checked.
  td::TensorDict five(
      {{"x", torch::zeros({5, 3})}, {{"index", "k"}, torch::zeros({5}, torch::kLong)}}, {5});
  EXPECT_THROW(module->forward(five), td::ShapeError);
  // Counts that do not fit the spec, and a dict call on a positional model.
  EXPECT_THROW(AOTITensorDictModule(nn_test::model_path("positional.pt2"),
                                    PositionalCall{{"x"}, {"a", "b"}}),
               td::ValueError);
  EXPECT_THROW(AOTITensorDictModule(nn_test::model_path("positional.pt2"),
                                    PositionalCall{{"x", "k"}, {"a"}}),
               td::ValueError);
  EXPECT_THROW(AOTITensorDictModule(nn_test::model_path("positional.pt2"),
                                    DictCall{{}, KeyLayout::nested()}),
               td::TypeError);
}

TEST(AOTIModule, ExportedPolicy) {
  auto example = nn_test::load_pickle("policy_example.pt").toGenericDict();
  AOTITensorDictModule policy(nn_test::model_path("policy.pt2"),
                              DictCall{{"observation"}, KeyLayout::nested()});
  EXPECT_EQ(policy.out_keys(), (std::vector<td::NestedKey>{"action", {"policy", "logits"}}));
  td::TensorDict data({{"observation", example.at("observation").toTensor()}}, {8});
  policy(data);
  EXPECT_TRUE(data.get("action").equal(example.at("action").toTensor()));
  EXPECT_TRUE(torch::allclose(data.get({"policy", "logits"}),
                              example.at("policy.logits").toTensor(), 1e-5, 1e-6));
  // One observation at a time works too (batch 1 is within the export's range).
  auto one = data[0].unsqueeze(0);
  policy(one);
  EXPECT_EQ(one.get("action").item<int64_t>(), example.at("action").toTensor()[0].item<int64_t>());
}

// A model taking and returning a TensorDict, packaged after
// register_tensordict_serialization() (examples/policy/export_policy.py).
TEST(AOTIModule, TensorDictInputAndOutput) {
  auto ref = nn_test::load_reference("tensordict_io");
  AOTITensorDictModule module(nn_test::model_path("tensordict_io.pt2"),
                              DictCall{{}, KeyLayout::nested()});
  EXPECT_EQ(module.in_keys(), (std::vector<td::NestedKey>{"obs", {"extra", "bias"}}));
  EXPECT_EQ(module.out_keys(), (std::vector<td::NestedKey>{{"out", "logits"}, "mean"}));
  td::TensorDict data({{{"extra", "bias"}, ref.at("extra.bias")}, {"obs", ref.at("obs")}}, {3});
  module(data);
  EXPECT_TRUE(torch::allclose(data.get({"out", "logits"}), ref.at("out.logits"), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(data.get("mean"), ref.at("mean"), 1e-5, 1e-6));
}

TEST(AOTIModule, NotAPackage) {
  EXPECT_THROW(AOTITensorDictModule(nn_test::model_path("policy_scripted.pt"),
                                    DictCall{{}, KeyLayout::nested()}),
               td::FormatError);
  EXPECT_THROW(
      AOTITensorDictModule(nn_test::model_path("absent.pt2"), DictCall{{}, KeyLayout::nested()}),
      td::FormatError);
}
