#include "pch.h"

#include "support/core_test_helpers.h"

namespace td = tensordict;
using td_test::batch_of;
using td_test::Shape;

// ---- constructors -------------------------------------------------------------

TEST(TensorDictConstruction, DefaultIsEmptyWithNoBatchAndNoDevice) {
  td::TensorDict t;
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(batch_of(t), Shape{});
  EXPECT_FALSE(t.device().has_value());
  EXPECT_EQ(t.num_keys(), 0u);
  EXPECT_TRUE(t.is_empty());
  EXPECT_FALSE(t.is_locked());
  EXPECT_EQ(t.type_name(), "TensorDict");
  EXPECT_TRUE(t.is<td::TensorDict>());
}

TEST(TensorDictConstruction, NullHandleIsUndefinedAndThrowsOnUse) {
  td::TensorDictBase null;
  EXPECT_FALSE(null.defined());
  EXPECT_FALSE(null.is<td::TensorDict>());
  EXPECT_THROW(null.batch_size(), td::ValueError);
  EXPECT_THROW(null.keys(), td::ValueError);
}

TEST(TensorDictConstruction, EmptyWithBatchSizeAndDevice) {
  td::TensorDict t(Shape{4, 3}, at::Device(at::kCPU));
  EXPECT_EQ(batch_of(t), (Shape{4, 3}));
  ASSERT_TRUE(t.device().has_value());
  EXPECT_EQ(*t.device(), at::Device(at::kCPU));
  EXPECT_EQ(t.num_keys(), 0u);
}

TEST(TensorDictConstruction, FromInitializerListKeepsOrderAndSharesTensors) {
  auto obs = torch::randn({4, 3});
  auto reward = torch::zeros({4, 1});
  td::TensorDict t({{"obs", obs}, {"reward", reward}}, {4});
  EXPECT_EQ(batch_of(t), Shape{4});
  EXPECT_EQ(t.keys(), (std::vector<td::NestedKey>{"obs", "reward"}));
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_TRUE(t.get("reward").is_same(reward));
}

TEST(TensorDictConstruction, FromVectorOfItems) {
  std::vector<td::TensorDict::Item> items;
  items.emplace_back("b", torch::ones({2, 5}));
  items.emplace_back("a", torch::zeros({2}));
  td::TensorDict t(items, {2});
  EXPECT_EQ(t.keys(), (std::vector<td::NestedKey>{"b", "a"}));
  EXPECT_EQ(t.get("b").sizes(), (at::IntArrayRef{2, 5}));
}

TEST(TensorDictConstruction, NestedKeysCreateIntermediateLevels) {
  td::TensorDict t({{td::NestedKey{"next", "obs"}, torch::zeros({4, 3})},
                    {td::NestedKey{"next", "reward"}, torch::zeros({4, 1})}},
                   {4});
  EXPECT_EQ(t.keys(), (std::vector<td::NestedKey>{"next"}));
  auto next = t.get_tensordict("next");
  EXPECT_EQ(batch_of(next), Shape{4});
  EXPECT_EQ(next.keys(), (std::vector<td::NestedKey>{"obs", "reward"}));
}

TEST(TensorDictConstruction, BatchSizeIsNeverInferred) {
  td::TensorDict t({{"a", torch::zeros({3, 4})}, {"b", torch::zeros({3, 4})}});
  EXPECT_EQ(batch_of(t), Shape{});
  EXPECT_EQ(t.batch_dims(), 0);
}

TEST(TensorDictConstruction, LeafNotStartingWithBatchSizeIsShapeError) {
  TD_EXPECT_THROW_MSG(td::TensorDict({{"obs", torch::zeros({3, 2})}}, {4}), td::ShapeError, "'obs'",
                      "[4]", "[3, 2]", "batch dimension mismatch");
}

TEST(TensorDictConstruction, NestedLeafShapeErrorNamesThePath) {
  TD_EXPECT_THROW_MSG(td::TensorDict({{td::NestedKey{"next", "obs"}, torch::zeros({5})}}, {4}),
                      td::ShapeError, "('next', 'obs')", "[4]", "[5]");
}

TEST(TensorDictConstruction, ScalarLeafNeedsEmptyBatch) {
  EXPECT_NO_THROW(td::TensorDict({{"x", torch::tensor(1.0)}}));
  TD_EXPECT_THROW_MSG(td::TensorDict({{"x", torch::tensor(1.0)}}, {2}), td::ShapeError, "'x'",
                      "[2]", "[]");
}

TEST(TensorDictConstruction, LeafWithMoreLeadingDimsThanBatchIsShapeError) {
  // [4] is not a prefix of [1, 4].
  EXPECT_THROW(td::TensorDict({{"x", torch::zeros({1, 4})}}, {4}), td::ShapeError);
}

TEST(TensorDictConstruction, NegativeBatchSizeIsShapeError) {
  TD_EXPECT_THROW_MSG(td::TensorDict(Shape{-1}), td::ShapeError, "[-1]");
}

TEST(TensorDictConstruction, UndefinedTensorIsValueError) {
  TD_EXPECT_THROW_MSG(td::TensorDict({{"x", at::Tensor()}}), td::ValueError, "'x'");
}

// ---- nested tensordict values ---------------------------------------------------

TEST(TensorDictConstructionNested, ChildWithSameBatchIsStoredAsSameObject) {
  td::TensorDict child({{"reward", torch::zeros({4, 1})}}, {4});
  td::TensorDict parent({{"next", child}}, {4});
  EXPECT_TRUE(parent.get_tensordict("next").is_same(child));
}

TEST(TensorDictConstructionNested, ChildWithLongerBatchIsStoredAsSameObject) {
  td::TensorDict child({{"x", torch::zeros({4, 3, 2})}}, {4, 3});
  td::TensorDict parent({{"sub", child}}, {4});
  auto stored = parent.get_tensordict("sub");
  EXPECT_TRUE(stored.is_same(child));
  EXPECT_EQ(batch_of(stored), (Shape{4, 3}));
}

TEST(TensorDictConstructionNested, ChildWithOtherBatchIsAShallowCopyWithParentBatch) {
  auto x = torch::zeros({4, 3});
  td::TensorDict child({{"x", x}});  // batch []
  td::TensorDict parent({{"sub", child}}, {4});
  auto stored = parent.get_tensordict("sub");
  EXPECT_FALSE(stored.is_same(child));
  EXPECT_EQ(batch_of(stored), Shape{4});
  EXPECT_TRUE(stored.get("x").is_same(x));  // shallow: same tensor
  EXPECT_EQ(batch_of(child), Shape{});      // the original is untouched
  // The copy is its own container.
  stored.set("y", torch::zeros({4}));
  EXPECT_FALSE(child.contains("y"));
}

TEST(TensorDictConstructionNested, IncompatibleChildIsShapeError) {
  td::TensorDict child({{"x", torch::zeros({3, 2})}}, {3});
  TD_EXPECT_THROW_MSG(td::TensorDict({{"sub", child}}, {4}), td::ShapeError, "'sub'", "[3]", "[4]");
  td::TensorDict unbatched({{"x", torch::zeros({3, 2})}});
  TD_EXPECT_THROW_MSG(td::TensorDict({{"sub", unbatched}}, {4}), td::ShapeError, "'sub'", "[4]",
                      "[3, 2]");
  EXPECT_EQ(batch_of(unbatched), Shape{});
}

TEST(TensorDictConstructionNested, NullChildIsValueError) {
  TD_EXPECT_THROW_MSG(td::TensorDict({{"sub", td::TensorDictBase()}}), td::ValueError, "'sub'");
}

// ---- non-tensor values ----------------------------------------------------------

TEST(TensorDictConstructionNonTensor, StringIsStoredAsNonTensorData) {
  td::TensorDict t({{"label", "cat"}, {"name", std::string("rex")}}, {4});
  EXPECT_TRUE(t.is_non_tensor("label"));
  EXPECT_EQ(t.entry_kind("label"), td::EntryKind::NonTensor);
  EXPECT_EQ(t.get_non_tensor("label"), nlohmann::json("cat"));
  EXPECT_EQ(t.get_non_tensor("name"), nlohmann::json("rex"));
}

TEST(TensorDictConstructionNonTensor, IsBroadcastToTheBatchSize) {
  td::TensorDict t({{"label", "cat"}}, {4, 2});
  EXPECT_EQ(t.at("label").non_tensor().batch_size().vec(), (Shape{4, 2}));
}

TEST(TensorDictConstructionNonTensor, KeepsALongerBatchSize) {
  td::TensorDict t({{"meta", td::NonTensorData(nlohmann::json(1), {4, 2})}}, {4});
  EXPECT_EQ(t.at("meta").non_tensor().batch_size().vec(), (Shape{4, 2}));
}

TEST(TensorDictConstructionNonTensor, JsonObjectsListsAndNumbers) {
  nlohmann::json obj = {{"lr", 0.001}, {"layers", {64, 64}}};
  nlohmann::json list = nlohmann::json::array({1, "two", 3.5});
  td::TensorDict t({{"config", td::NonTensorData(obj)},
                    {"list", td::NonTensorData(list)},
                    {"count", td::NonTensorData(nlohmann::json(42))},
                    {"flag", td::NonTensorData(nlohmann::json(true))},
                    {"nothing", td::NonTensorData(nlohmann::json(nullptr))}},
                   {2});
  EXPECT_EQ(t.get_non_tensor("config"), obj);
  EXPECT_EQ(t.get_non_tensor("config")["layers"][1], 64);
  EXPECT_EQ(t.get_non_tensor("list"), list);
  EXPECT_EQ(t.get_non_tensor("count").get<int>(), 42);
  EXPECT_TRUE(t.get_non_tensor("flag").get<bool>());
  EXPECT_TRUE(t.get_non_tensor("nothing").is_null());
  EXPECT_EQ(t.num_keys(), 5u);
}

TEST(TensorDictConstructionNonTensor, NonTensorIsCopiedNotShared) {
  td::NonTensorData data(nlohmann::json({{"a", 1}}));
  td::TensorDict t({{"d", data}});
  data.data()["a"] = 2;
  EXPECT_EQ(t.get_non_tensor("d")["a"], 1);
}

// ---- devices --------------------------------------------------------------------------

TEST(TensorDictConstructionDevice, NoDeviceMeansMixedAllowed) {
  auto cpu = torch::zeros({2});
  auto meta = torch::empty({2}, torch::TensorOptions().device(at::kMeta));
  td::TensorDict t({{"cpu", cpu}, {"meta", meta}}, {2});
  EXPECT_FALSE(t.device().has_value());
  EXPECT_EQ(t.get("cpu").device(), at::Device(at::kCPU));
  EXPECT_EQ(t.get("meta").device(), at::Device(at::kMeta));
  EXPECT_TRUE(t.get("cpu").is_same(cpu));
  EXPECT_TRUE(t.get("meta").is_same(meta));
}

TEST(TensorDictConstructionDevice, WithDeviceCpuTensorsStayTheSame) {
  auto x = torch::zeros({2, 3});
  td::TensorDict t({{"x", x}}, {2}, at::Device(at::kCPU));
  ASSERT_TRUE(t.device().has_value());
  EXPECT_EQ(*t.device(), at::Device(at::kCPU));
  EXPECT_TRUE(t.get("x").is_same(x));
}

TEST(TensorDictConstructionDevice, WithDeviceTensorsAreMoved) {
  // cpu -> meta is a move that works without a GPU.
  auto x = torch::zeros({2, 3});
  td::TensorDict t({{"x", x}}, {2}, at::Device(at::kMeta));
  EXPECT_EQ(t.get("x").device(), at::Device(at::kMeta));
  EXPECT_EQ(t.get("x").sizes(), (at::IntArrayRef{2, 3}));
  EXPECT_EQ(x.device(), at::Device(at::kCPU));
}

TEST(TensorDictConstructionDevice, UnmovableTensorIsDeviceErrorNamingTheKey) {
  // A meta tensor has no data to copy to the CPU.
  auto meta = torch::empty({2}, torch::TensorOptions().device(at::kMeta));
  TD_EXPECT_THROW_MSG(td::TensorDict({{"m", meta}}, {2}, at::Device(at::kCPU)), td::DeviceError,
                      "'m'");
}

TEST(TensorDictConstructionDevice, NestedChildGetsTheParentDevice) {
  td::TensorDict child({{"x", torch::zeros({2})}}, {2});
  td::TensorDict t({{"sub", child}, {"label", "cat"}}, {2}, at::Device(at::kCPU));
  auto stored = t.get_tensordict("sub");
  ASSERT_TRUE(stored.device().has_value());
  EXPECT_EQ(*stored.device(), at::Device(at::kCPU));
  EXPECT_FALSE(child.device().has_value());  // the original is untouched
  EXPECT_EQ(t.at("label").non_tensor().device(), at::Device(at::kCPU));
}

TEST(TensorDictConstructionDevice, IntermediatesInheritTheDevice) {
  td::TensorDict t({{td::NestedKey{"a", "b"}, torch::zeros({2})}}, {2}, at::Device(at::kCPU));
  EXPECT_EQ(t.get_tensordict("a").device(), at::Device(at::kCPU));
  td::TensorDict u({{td::NestedKey{"a", "b"}, torch::zeros({2})}}, {2});
  EXPECT_FALSE(u.get_tensordict("a").device().has_value());
}

TEST(TensorDictConstructionDevice, ClearDeviceIsRecursive) {
  td::TensorDict t({{td::NestedKey{"a", "b"}, torch::zeros({2})}}, {2}, at::Device(at::kCPU));
  t.clear_device_();
  EXPECT_FALSE(t.device().has_value());
  EXPECT_FALSE(t.get_tensordict("a").device().has_value());
}

// ---- make --------------------------------------------------------------------------

TEST(TensorDictMake, NamedOptions) {
  auto t = td::TensorDict::make({{"x", torch::zeros({3, 2})}},
                                {.batch_size = {3}, .device = at::Device(at::kCPU)});
  EXPECT_EQ(batch_of(t), Shape{3});
  EXPECT_EQ(t.device(), at::Device(at::kCPU));
  EXPECT_FALSE(t.is_locked());
}

TEST(TensorDictMake, LockOptionLocksRecursively) {
  auto t =
      td::TensorDict::make({{"x", torch::zeros({3})}, {td::NestedKey{"n", "y"}, torch::zeros({3})}},
                           {.batch_size = {3}, .lock = true});
  EXPECT_TRUE(t.is_locked());
  EXPECT_TRUE(t.get_tensordict("n").is_locked());
  EXPECT_THROW(t.set("z", torch::zeros({3})), td::LockedError);
}

TEST(TensorDictMake, ShapeErrorIsReported) {
  EXPECT_THROW(td::TensorDict::make({{"x", torch::zeros({2})}}, {.batch_size = {3}}),
               td::ShapeError);
}

// ---- batch size setter -----------------------------------------------------------

TEST(TensorDictBatchSize, GrowIntoFeatureDims) {
  td::TensorDict t({{"a", torch::zeros({4, 3, 2})}, {"b", torch::zeros({4, 3})}}, {4});
  t.set_batch_size({4, 3});
  EXPECT_EQ(batch_of(t), (Shape{4, 3}));
  EXPECT_EQ(batch_of(t), t.shape().vec());
  EXPECT_EQ(t.batch_dims(), 2);
}

TEST(TensorDictBatchSize, ShrinkToEmpty) {
  td::TensorDict t({{"a", torch::zeros({4, 3})}}, {4, 3});
  t.set_batch_size({});
  EXPECT_EQ(batch_of(t), Shape{});
  EXPECT_EQ(t.batch_dims(), 0);
}

TEST(TensorDictBatchSize, NestedChildrenWithFewerDimsAreResized) {
  td::TensorDict t({{td::NestedKey{"n", "x"}, torch::zeros({4, 3, 5})}, {"label", "cat"}}, {4});
  auto child = t.get_tensordict("n");
  t.set_batch_size({4, 3});
  EXPECT_EQ(batch_of(child), (Shape{4, 3}));
  EXPECT_TRUE(t.get_tensordict("n").is_same(child));
  EXPECT_EQ(t.at("label").non_tensor().batch_size().vec(), (Shape{4, 3}));
}

TEST(TensorDictBatchSize, NestedChildWithMoreDimsIsKept) {
  td::TensorDict child({{"x", torch::zeros({4, 3, 5})}}, {4, 3, 5});
  td::TensorDict t({{"n", child}, {"y", torch::zeros({4, 3})}}, {4});
  t.set_batch_size({4, 3});
  EXPECT_EQ(batch_of(child), (Shape{4, 3, 5}));
  t.set_batch_size({});
  EXPECT_EQ(batch_of(child), (Shape{4, 3, 5}));
}

TEST(TensorDictBatchSize, IncompatibleLeafIsShapeErrorAndNothingChanges) {
  td::TensorDict t({{"a", torch::zeros({4, 3})}}, {4});
  TD_EXPECT_THROW_MSG(t.set_batch_size({5}), td::ShapeError, "'a'", "[4, 3]", "[5]");
  EXPECT_EQ(batch_of(t), Shape{4});
  TD_EXPECT_THROW_MSG(t.set_batch_size({4, 3, 1}), td::ShapeError, "'a'", "[4, 3, 1]");
  EXPECT_EQ(batch_of(t), Shape{4});
}

TEST(TensorDictBatchSize, IncompatibleNestedLeafLeavesEveryLevelUnchanged) {
  td::TensorDict t(
      {{"ok", torch::zeros({4, 3})}, {td::NestedKey{"next", "obs"}, torch::zeros({4, 2})}}, {4});
  auto next = t.get_tensordict("next");
  TD_EXPECT_THROW_MSG(t.set_batch_size({4, 3}), td::ShapeError, "('next', 'obs')", "[4, 2]",
                      "[4, 3]");
  EXPECT_EQ(batch_of(t), Shape{4});
  EXPECT_EQ(batch_of(next), Shape{4});  // not resized half-way
}

TEST(TensorDictBatchSize, IncompatibleNestedBatchIsShapeError) {
  td::TensorDict child({{"x", torch::zeros({4, 3})}}, {4, 3});
  td::TensorDict t({{"n", child}}, {4});
  TD_EXPECT_THROW_MSG(t.set_batch_size({4, 2}), td::ShapeError, "'n'", "[4, 3]", "[4, 2]");
  EXPECT_EQ(batch_of(t), Shape{4});
}

TEST(TensorDictBatchSize, NegativeSizeIsShapeError) {
  td::TensorDict t({{"a", torch::zeros({4})}}, {4});
  EXPECT_THROW(t.set_batch_size({-4}), td::ShapeError);
  EXPECT_EQ(batch_of(t), Shape{4});
}

// ---- shape queries ---------------------------------------------------------------

TEST(TensorDictShape, BatchDimsAndAliases) {
  td::TensorDict t(Shape{4, 3, 2});
  EXPECT_EQ(t.batch_dims(), 3);
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.dim(), 3);
}

TEST(TensorDictShape, NumelIsProductOfBatch) {
  EXPECT_EQ(td::TensorDict(Shape{4, 3}).numel(), 12);
  EXPECT_EQ(td::TensorDict().numel(), 1);
  EXPECT_EQ(td::TensorDict(Shape{4, 0}).numel(), 0);
}

TEST(TensorDictShape, SizeAcceptsNegativeDims) {
  td::TensorDict t(Shape{4, 3, 2});
  EXPECT_EQ(t.size(0), 4);
  EXPECT_EQ(t.size(2), 2);
  EXPECT_EQ(t.size(-1), 2);
  EXPECT_EQ(t.size(-3), 4);
}

TEST(TensorDictShape, SizeOutOfRangeIsIndexError) {
  td::TensorDict t(Shape{4, 3});
  TD_EXPECT_THROW_MSG(t.size(2), td::IndexError, "2", "[4, 3]");
  TD_EXPECT_THROW_MSG(t.size(-3), td::IndexError, "-3", "[4, 3]");
  EXPECT_THROW(td::TensorDict().size(0), td::IndexError);
}

TEST(TensorDictShape, LenIsFirstBatchDim) {
  EXPECT_EQ(td::TensorDict(Shape{4, 3}).len(), 4);
  EXPECT_EQ(td::TensorDict(Shape{0}).len(), 0);
  EXPECT_EQ(td::TensorDict().len(), 0);
}
