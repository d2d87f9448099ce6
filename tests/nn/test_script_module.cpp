// ScriptTensorDictModule over TorchScript models that Python scripted and
// traced in this run (tests/nn/python/make_models.py); outputs are compared
// with the outputs Python computed.
#include "pch.h"

#include <tensordict/nn/script_module.h>

#include "nn/models_dir.h"

namespace td = tensordict;
using td::nn::DictCall;
using td::nn::KeyLayout;
using td::nn::PositionalCall;
using td::nn::ScriptTensorDictModule;

namespace {

std::shared_ptr<ScriptTensorDictModule> two_heads() {
  return ScriptTensorDictModule::load(nn_test::model_path("two_heads_scripted.pt"),
                                      PositionalCall{{"x", {"inputs", "y"}}, {"head", "sum"}});
}

td::TensorDict two_heads_input(const std::map<std::string, at::Tensor>& ref) {
  return td::TensorDict({{"x", ref.at("x")}, {{"inputs", "y"}, ref.at("y")}}, {5});
}

}  // namespace

TEST(ScriptModule, PositionalScriptedMatchesPython) {
  auto ref = nn_test::load_reference("two_heads");
  auto module = two_heads();
  module->eval();
  auto data = two_heads_input(ref);
  auto out = (*module)(data);
  EXPECT_TRUE(torch::allclose(out.get("head"), ref.at("eval0")));
  EXPECT_TRUE(torch::allclose(out.get("sum"), ref.at("eval1")));
  // train() reaches the TorchScript module: the model doubles its head then.
  module->train();
  EXPECT_TRUE(module->script_module().is_training());
  module->forward(data);
  EXPECT_TRUE(torch::allclose(data.get("head"), ref.at("train0")));
}

TEST(ScriptModule, ParametersAreTheModelsOwn) {
  auto ref = nn_test::load_reference("two_heads");
  auto module = two_heads();
  auto params = module->named_parameters();
  ASSERT_TRUE(params.contains("linear.weight"));
  ASSERT_TRUE(params.contains("linear.bias"));
  EXPECT_EQ(params.size(), 2u);
  EXPECT_TRUE(params["linear.weight"].equal(ref.at("linear.weight")));
  EXPECT_TRUE(module->named_buffers()["scale"].equal(ref.at("scale")));
  // Writing through the wrapper's parameter changes what the model computes.
  module->eval();
  torch::NoGradGuard no_grad;
  params["linear.bias"].add_(1.0);
  auto out = (*module)(two_heads_input(ref));
  EXPECT_TRUE(torch::allclose(out.get("head"), ref.at("eval0") + ref.at("scale")));
}

TEST(ScriptModule, GradientsFlowToTheModelsParameters) {
  auto ref = nn_test::load_reference("two_heads");
  auto module = two_heads();
  module->eval();
  auto out = (*module)(two_heads_input(ref));
  out.get("head").sum().backward();
  auto grad = module->named_parameters()["linear.bias"].grad();
  ASSERT_TRUE(grad.defined());
  // d(sum((xW^T + b) * scale))/db = scale * batch
  EXPECT_TRUE(torch::allclose(grad, ref.at("scale") * 5));
}

TEST(ScriptModule, ToDtypeConvertsTheModel) {
  auto ref = nn_test::load_reference("two_heads");
  auto module = two_heads();
  module->to(torch::kFloat64);
  module->eval();
  for (const auto& p : module->script_module().parameters()) EXPECT_EQ(p.dtype(), torch::kFloat64);
  td::TensorDict data(
      {{"x", ref.at("x").to(torch::kFloat64)}, {{"inputs", "y"}, ref.at("y").to(torch::kFloat64)}},
      {5});
  auto out = (*module)(data);
  EXPECT_EQ(out.get("head").dtype(), torch::kFloat64);
  EXPECT_TRUE(torch::allclose(out.get("head"), ref.at("double0")));
}

TEST(ScriptModule, TracedModel) {
  auto ref = nn_test::load_reference("mlp");
  auto module =
      ScriptTensorDictModule::load(nn_test::model_path("mlp_traced.pt"), {{"obs"}, {"logits"}});
  auto out = (*module)(td::TensorDict({{"obs", ref.at("x")}}, {6}));
  EXPECT_TRUE(torch::allclose(out.get("logits"), ref.at("out")));
  EXPECT_EQ(module->parameters().size(), 4u);
}

TEST(ScriptModule, DictCallWithFlattenedNames) {
  auto ref = nn_test::load_reference("flat_dict");
  auto module = ScriptTensorDictModule::load(nn_test::model_path("flat_dict_scripted.pt"),
                                             DictCall{{"obs", "count"}, KeyLayout::flattened(".")});
  td::TensorDict data({{{"obs", "pos"}, ref.at("obs.pos")},
                       {{"obs", "vel"}, ref.at("obs.vel")},
                       {"count", ref.at("count")}},
                      {4});
  module->forward(data);
  // "out.sum" came back as the nested key ("out", "sum").
  EXPECT_TRUE(torch::allclose(data.get({"out", "sum"}), ref.at("=out.sum")));
  EXPECT_TRUE(torch::allclose(data.get({"out", "scaled"}), ref.at("=out.scaled")));
  // Every returned entry is written, "count" (count + 1) over the input.
  EXPECT_TRUE(data.get("count").equal(ref.at("=count")));
  EXPECT_EQ(module->named_parameters().size(), 1u);

  // out_keys filter what is written; one the model does not return is named.
  auto only = ScriptTensorDictModule::load(
      nn_test::model_path("flat_dict_scripted.pt"),
      DictCall{{"obs", "count"}, KeyLayout::flattened("."), {{"out", "scaled"}}});
  auto out = only->forward(data, td::TensorDict({}, {4}));
  EXPECT_EQ(out.keys(true, true), (std::vector<td::NestedKey>{{"out", "scaled"}}));
  auto wrong = ScriptTensorDictModule::load(
      nn_test::model_path("flat_dict_scripted.pt"),
      DictCall{{"obs", "count"}, KeyLayout::flattened("."), {{"out", "nope"}}});
  auto msg = nn_test::message_of([&] { wrong->forward(data); });
  EXPECT_NE(msg.find("('out', 'nope')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'out.sum'"), std::string::npos) << msg;
  EXPECT_THROW(wrong->forward(data), td::KeyError);
}

TEST(ScriptModule, DictCallWithNestedDicts) {
  auto ref = nn_test::load_reference("nested_dict");
  auto module = ScriptTensorDictModule::load(nn_test::model_path("nested_dict_scripted.pt"),
                                             DictCall{{"obs"}, KeyLayout::nested()});
  td::TensorDict data({{{"obs", "pos"}, ref.at("pos")}, {{"obs", "vel"}, ref.at("vel")}}, {4});
  module->forward(data);
  EXPECT_TRUE(torch::allclose(data.get({"out", "sum"}), ref.at("sum")));
  EXPECT_TRUE(torch::allclose(data.get({"out", "diff"}), ref.at("diff")));
  // The same model with flat names: its Dict[str, Dict[str, Tensor]] refuses
  // a Dict[str, Tensor], named as a TypeError before the interpreter runs.
  auto flat = ScriptTensorDictModule::load(nn_test::model_path("nested_dict_scripted.pt"),
                                           DictCall{{"obs"}, KeyLayout::flattened(".")});
  auto msg = nn_test::message_of([&] { flat->forward(data); });
  EXPECT_NE(msg.find("Dict[str, Dict[str, Tensor]]"), std::string::npos) << msg;
  EXPECT_THROW(flat->forward(data), td::TypeError);
}

TEST(ScriptModule, TypedErrors) {
  auto ref = nn_test::load_reference("two_heads");
  auto module = two_heads();
  // A missing key: KeyError naming the key and the module.
  td::TensorDict missing({{"x", ref.at("x")}}, {5});
  auto msg = nn_test::message_of([&] { module->forward(missing); });
  EXPECT_NE(msg.find("('inputs', 'y')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("TwoHeads"), std::string::npos) << msg;
  EXPECT_THROW(module->forward(missing), td::KeyError);
  // The model raising: ModelError with the interpreter's message.
  td::TensorDict three_d({{"x", torch::zeros({5, 1, 3})}, {{"inputs", "y"}, torch::zeros({5})}},
                         {5});
  msg = nn_test::message_of([&] { module->forward(three_d); });
  EXPECT_NE(msg.find("TwoHeads expects a 2-D x"), std::string::npos) << msg;
  EXPECT_THROW(module->forward(three_d), td::nn::ModelError);
  // A shape the model's ops refuse: ModelError too, never a c10::Error.
  td::TensorDict wide({{"x", torch::zeros({5, 7})}, {{"inputs", "y"}, torch::zeros({5})}}, {5});
  EXPECT_THROW(module->forward(wide), td::nn::ModelError);
}

TEST(ScriptModule, SignatureChecksWhenMade) {
  auto path = nn_test::model_path("two_heads_scripted.pt");
  // Three out_keys for a model returning two tensors.
  EXPECT_THROW(ScriptTensorDictModule::load(path, PositionalCall{{"x", "y"}, {"a", "b", "c"}}),
               td::ValueError);
  EXPECT_THROW(ScriptTensorDictModule::load(path, PositionalCall{{"x"}, {"a", "b"}}),
               td::ValueError);
  // A positional model under the dict convention, and the reverse.
  EXPECT_THROW(ScriptTensorDictModule::load(path, DictCall{{"x"}, KeyLayout::nested()}),
               td::TypeError);
  EXPECT_THROW(ScriptTensorDictModule::load(nn_test::model_path("flat_dict_scripted.pt"),
                                            PositionalCall{{"x"}, {"y"}}),
               td::TypeError);
  // Not a TorchScript archive.
  EXPECT_THROW(td::nn::load_script_module(nn_test::model_path("two_heads_ref.pt")),
               td::FormatError);
  EXPECT_THROW(td::nn::load_script_module(nn_test::model_path("absent.pt")), td::FormatError);
}

// examples/policy/export_policy.py's TorchScript policy: flat names in the
// model, the nested key ("policy", "logits") in the tensordict.
TEST(ScriptModule, ExportedPolicy) {
  auto example = nn_test::load_pickle("policy_example.pt").toGenericDict();
  auto policy = ScriptTensorDictModule::load(
      nn_test::model_path("policy_scripted.pt"),
      DictCall{{"observation"}, KeyLayout::flattened("."), {"action", {"policy", "logits"}}});
  td::TensorDict data({{"observation", example.at("observation").toTensor()}}, {8});
  (*policy)(data);
  EXPECT_TRUE(data.get("action").equal(example.at("action").toTensor()));
  EXPECT_TRUE(
      torch::allclose(data.get({"policy", "logits"}), example.at("policy.logits").toTensor()));
}
