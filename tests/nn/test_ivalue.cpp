// tensordict <-> IValue conversions (docs/nn_export.md): against a dict,
// tuples, lists and scalars that Python's torch.save wrote in this run.
#include "pch.h"

#include <tensordict/nn/ivalue.h>

#include "nn/models_dir.h"

namespace td = tensordict;
using td::nn::KeyLayout;

namespace {

td::TensorDict nested_sample() {
  td::TensorDict out({{"a", torch::ones({3, 2})},
                      {{"obs", "pos"}, torch::zeros({3, 2})},
                      {{"obs", "vel"}, torch::full({3, 2}, 2.0)}},
                     {3});
  return out;
}

}  // namespace

TEST(IValueConversion, NestedLayoutMakesTypedNestedDicts) {
  auto dict = td::nn::to_ivalue_dict(nested_sample(), KeyLayout::nested());
  ASSERT_EQ(dict.size(), 2u);
  // Values differ (a tensor, a dict): Dict[str, Any]; the nested one is typed.
  EXPECT_EQ(dict.valueType()->kind(), c10::TypeKind::AnyType);
  auto obs = dict.at("obs").toGenericDict();
  EXPECT_EQ(obs.valueType()->kind(), c10::TypeKind::TensorType);
  EXPECT_TRUE(obs.at("vel").toTensor().equal(torch::full({3, 2}, 2.0)));
  // Leaves are the tensordict's tensors, not copies.
  auto sample = nested_sample();
  auto again = td::nn::to_ivalue_dict(sample, KeyLayout::nested());
  EXPECT_TRUE(again.at("a").toTensor().is_same(sample.get("a")));
}

TEST(IValueConversion, FlattenedLayoutJoinsNamesIntoOneTensorDict) {
  auto dict = td::nn::to_ivalue_dict(nested_sample(), KeyLayout::flattened("/"));
  EXPECT_EQ(dict.valueType()->kind(), c10::TypeKind::TensorType);
  std::vector<std::string> names;
  for (const auto& e : dict) names.push_back(e.key().toStringRef());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "obs/pos", "obs/vel"}));
}

TEST(IValueConversion, SelectedKeysAndCollisions) {
  auto sample = nested_sample();
  auto flat = td::nn::to_ivalue_dict(sample, {{"obs", "vel"}}, KeyLayout::flattened("."));
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_TRUE(flat.contains("obs.vel"));
  auto nested = td::nn::to_ivalue_dict(sample, {{"obs", "vel"}, "a"}, KeyLayout::nested());
  EXPECT_EQ(nested.at("obs").toGenericDict().size(), 1u);
  EXPECT_TRUE(nested.contains("a"));
  EXPECT_THROW(td::nn::to_ivalue_dict(sample, {"missing"}, KeyLayout::nested()), td::KeyError);
  // A key that already holds the separator collides with the nested key.
  sample.set("obs.pos", torch::zeros({3}));
  EXPECT_THROW(td::nn::to_ivalue_dict(sample, KeyLayout::flattened(".")), td::ValueError);
  EXPECT_THROW(KeyLayout::flattened(""), td::ValueError);
}

TEST(IValueConversion, NonTensorsBothWays) {
  td::TensorDict data({{"x", torch::zeros({2})}}, {2});
  data.set_non_tensor("name", "cartpole");
  data.set_non_tensor("steps", 12);
  data.set_non_tensor("gamma", 0.5);
  data.set_non_tensor("done", true);
  data.set_non_tensor("none", nullptr);
  auto dict = td::nn::to_ivalue_dict(data, KeyLayout::nested());
  EXPECT_EQ(dict.at("name").toStringRef(), "cartpole");
  EXPECT_EQ(dict.at("steps").toInt(), 12);
  EXPECT_EQ(dict.at("gamma").toDouble(), 0.5);
  EXPECT_TRUE(dict.at("done").toBool());
  EXPECT_TRUE(dict.at("none").isNone());
  auto back = td::nn::from_ivalue(dict, {2}, KeyLayout::nested());
  EXPECT_EQ(back.get_non_tensor("name"), "cartpole");
  EXPECT_EQ(back.get_non_tensor("steps"), 12);
  EXPECT_TRUE(back.get_non_tensor("none").is_null());

  data.set_non_tensor("list", nlohmann::json::array({1, 2}));
  try {
    td::nn::to_ivalue_dict(data, KeyLayout::nested());
    FAIL() << "a JSON list has no TorchScript value here";
  } catch (const td::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("'list'"), std::string::npos) << e.what();
  }
}

TEST(IValueConversion, FromPythonSaveDictTuplesListsAndScalars) {
  auto sample = nn_test::load_pickle("ivalue_sample.pt");
  auto data = td::nn::from_ivalue(sample, {3}, KeyLayout::nested());
  const auto py = sample.toGenericDict();
  EXPECT_TRUE(data.get("a").equal(py.at("a").toTensor()));
  EXPECT_TRUE(data.get({"nested", "deeper", "c"}).equal(torch::ones({3, 1}, torch::kFloat64)));
  // Tuples and lists: keys "0", "1", ...
  EXPECT_TRUE(data.get({"pair", "1"}).equal(torch::ones({3, 4})));
  EXPECT_TRUE(data.get({"seq", "0"}).equal(torch::full({3}, 7.0)));
  EXPECT_EQ(data.get_tensordict("pair").batch_size().vec(), (std::vector<int64_t>{3}));
  // Scalars: NonTensorData.
  EXPECT_EQ(data.get_non_tensor("name"), "cartpole");
  EXPECT_EQ(data.get_non_tensor("steps"), 12);
  EXPECT_DOUBLE_EQ(data.get_non_tensor("gamma").get<double>(), 0.99);
  EXPECT_EQ(data.get_non_tensor("done"), true);
  // Key order is Python's insertion order.
  std::vector<std::string> keys;
  for (auto k : data.keys_view()) keys.emplace_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "nested", "pair", "seq", "name", "steps", "gamma",
                                            "done"}));
}

TEST(IValueConversion, FromIValueFlattenedSplitsNames) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  dict.insert("policy.logits", torch::zeros({4, 2}));
  dict.insert("action", torch::zeros({4}));
  auto data = td::nn::from_ivalue(dict, {4}, KeyLayout::flattened("."));
  EXPECT_TRUE(data.contains({"policy", "logits"}));
  auto kept = td::nn::from_ivalue(dict, {4}, KeyLayout::nested());
  EXPECT_TRUE(kept.contains("policy.logits"));
}

TEST(IValueConversion, TypedErrorsNameTheKey) {
  // A tensor that does not start with the batch size.
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericDict inner(c10::StringType::get(), c10::TensorType::get());
  inner.insert("bad", torch::zeros({5}));
  dict.insert("outer", inner);
  try {
    td::nn::from_ivalue(dict, {3}, KeyLayout::nested());
    FAIL();
  } catch (const td::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos) << e.what();
  }
  // No key at the top; a value of an unsupported kind.
  EXPECT_THROW(td::nn::from_ivalue(torch::zeros({3}), {3}, KeyLayout::nested()), td::TypeError);
  c10::impl::GenericDict odd(c10::StringType::get(), c10::AnyType::get());
  odd.insert("device", c10::IValue(c10::Device(c10::kCPU)));
  try {
    td::nn::from_ivalue(odd, {}, KeyLayout::nested());
    FAIL();
  } catch (const td::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("'device'"), std::string::npos) << e.what();
  }
  c10::impl::GenericDict int_keys(c10::IntType::get(), c10::TensorType::get());
  int_keys.insert(1, torch::zeros({3}));
  EXPECT_THROW(td::nn::from_ivalue(int_keys, {3}, KeyLayout::nested()), td::TypeError);
}
