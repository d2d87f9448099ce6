#include "pch.h"

#include "support/core_test_helpers.h"

namespace td = tensordict;
using td_test::batch_of;
using td_test::Shape;
using td_test::Snapshot;
using Keys = std::vector<td::NestedKey>;

namespace {

// obs [4, 3], next: {reward [4, 1], done [4, 1] bool}, label "cat" (batch [4]).
td::TensorDict make_td() {
  td::TensorDict next({{"reward", torch::arange(4.0).reshape({4, 1})},
                       {"done", torch::zeros({4, 1}, torch::kBool)}},
                      {4});
  return td::TensorDict({{"obs", torch::randn({4, 3})}, {"next", next}, {"label", "cat"}}, {4});
}

}  // namespace

// ---- set -------------------------------------------------------------------------

TEST(TensorDictSet, NewKeyIsAppended) {
  auto t = make_td();
  auto action = torch::ones({4, 2});
  t.set("action", action);
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label", "action"}));
  EXPECT_TRUE(t.get("action").is_same(action));
}

TEST(TensorDictSet, ExistingKeyIsReplacedInPlaceInTheOrder) {
  auto t = make_td();
  auto old = t.get("obs");
  auto fresh = torch::zeros({4, 7}, torch::kInt64);
  t.set("obs", fresh);
  EXPECT_TRUE(t.get("obs").is_same(fresh));  // new storage, new shape/dtype ok
  EXPECT_FALSE(t.get("obs").is_same(old));
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label"}));
}

TEST(TensorDictSet, ReturnsSelfForChaining) {
  td::TensorDict t(Shape{2});
  t.set("a", torch::zeros({2})).set("b", torch::ones({2}));
  EXPECT_EQ(t.keys(), (Keys{"a", "b"}));
}

TEST(TensorDictSet, NestedSetCreatesIntermediatesWithTheParentBatch) {
  td::TensorDict t(Shape{4, 2});
  t.set({"a", "b", "c"}, torch::zeros({4, 2, 5}));
  auto a = t.get_tensordict("a");
  auto b = t.get_tensordict({"a", "b"});
  EXPECT_EQ(batch_of(a), (Shape{4, 2}));
  EXPECT_EQ(batch_of(b), (Shape{4, 2}));
  EXPECT_FALSE(a.device().has_value());
  EXPECT_EQ(t.get({"a", "b", "c"}).sizes().vec(), (Shape{4, 2, 5}));
}

TEST(TensorDictSet, NestedSetIntoExistingChildKeepsTheChild) {
  auto t = make_td();
  auto next = t.get_tensordict("next");
  t.set({"next", "obs"}, torch::zeros({4, 3}));
  EXPECT_TRUE(t.get_tensordict("next").is_same(next));
  EXPECT_TRUE(next.contains("obs"));
}

TEST(TensorDictSet, NestedSetIntoAChildWithALongerBatch) {
  td::TensorDict child({{"x", torch::zeros({4, 3})}}, {4, 3});
  td::TensorDict t({{"c", child}}, {4});
  TD_EXPECT_THROW_MSG(t.set({"c", "y"}, torch::zeros({4})), td::ShapeError, "('c', 'y')", "[4, 3]",
                      "[4]");
  t.set({"c", "y"}, torch::zeros({4, 3, 2}));
  EXPECT_TRUE(child.contains("y"));
}

TEST(TensorDictSet, ThroughATensorIsTypeErrorAndChangesNothing) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set({"obs", "x"}, torch::zeros({4})), td::TypeError, "('obs', 'x')",
                      "'obs'", "Tensor");
  TD_EXPECT_THROW_MSG(t.set({"label", "x", "y"}, torch::zeros({4})), td::TypeError,
                      "('label', 'x', 'y')", "'label'");
  snap.expect_unchanged(t);
}

TEST(TensorDictSet, WrongBatchIsShapeErrorAndKeepsTheOldValue) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set("obs", torch::zeros({3, 3})), td::ShapeError, "'obs'", "[4]", "[3, 3]");
  TD_EXPECT_THROW_MSG(t.set({"next", "reward"}, torch::zeros({2})), td::ShapeError,
                      "('next', 'reward')", "[4]", "[2]");
  snap.expect_unchanged(t);
}

TEST(TensorDictSet, RefusedNestedSetCreatesNoIntermediateLevel) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set({"new", "deeper", "x"}, torch::zeros({3})), td::ShapeError,
                      "('new', 'deeper', 'x')", "[4]", "[3]");
  TD_EXPECT_THROW_MSG(t.set({"next", "new", "x"}, torch::zeros({3})), td::ShapeError,
                      "('next', 'new', 'x')");
  EXPECT_FALSE(t.contains("new"));
  EXPECT_FALSE(t.contains({"next", "new"}));
  snap.expect_unchanged(t);
}

TEST(TensorDictSet, EmptyKeyOrEmptyPartIsKeyError) {
  auto t = make_td();
  EXPECT_THROW(t.set(td::NestedKey(), torch::zeros({4})), td::KeyError);
  TD_EXPECT_THROW_MSG(t.set({"next", ""}, torch::zeros({4})), td::KeyError, "('next', '')");
  EXPECT_THROW(t.set("", torch::zeros({4})), td::KeyError);
}

TEST(TensorDictSet, TensorDictValueReplacesATensor) {
  auto t = make_td();
  td::TensorDict sub({{"x", torch::zeros({4})}}, {4});
  t.set("obs", sub);
  EXPECT_EQ(t.entry_kind("obs"), td::EntryKind::TensorDict);
  EXPECT_TRUE(t.get_tensordict("obs").is_same(sub));
}

TEST(TensorDictSet, ChildOfOtherBatchIsStoredAsAResizedShallowCopy) {
  td::TensorDict t(Shape{4});
  auto x = torch::zeros({4, 2});
  td::TensorDict sub({{"x", x}});
  t.set("sub", sub);
  auto stored = t.get_tensordict("sub");
  EXPECT_FALSE(stored.is_same(sub));
  EXPECT_EQ(batch_of(stored), Shape{4});
  EXPECT_TRUE(stored.get("x").is_same(x));
  td::TensorDict bad({{"x", torch::zeros({3})}}, {3});
  TD_EXPECT_THROW_MSG(t.set({"n", "bad"}, bad), td::ShapeError, "('n', 'bad')", "[3]", "[4]");
}

// ---- set(key, value, inplace) ------------------------------------------------------

TEST(TensorDictSetInplace, ExistingKeyIsCopiedInto) {
  auto t = make_td();
  auto before = t.get("obs");
  auto ptr = before.data_ptr();
  t.set("obs", torch::ones({4, 3}), /*inplace=*/true);
  EXPECT_TRUE(t.get("obs").is_same(before));
  EXPECT_EQ(t.get("obs").data_ptr(), ptr);
  EXPECT_TRUE(at::equal(t.get("obs"), torch::ones({4, 3})));
}

TEST(TensorDictSetInplace, MissingKeyIsAdded) {
  auto t = make_td();
  auto fresh = torch::ones({4, 2});
  t.set({"next", "new"}, fresh, /*inplace=*/true);
  EXPECT_TRUE(t.get({"next", "new"}).is_same(fresh));
}

TEST(TensorDictSetInplace, FalseReplacesTheStorage) {
  auto t = make_td();
  auto fresh = torch::ones({4, 3});
  t.set("obs", fresh, /*inplace=*/false);
  EXPECT_TRUE(t.get("obs").is_same(fresh));
}

TEST(TensorDictSetInplace, WrongShapeIsShapeError) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set("obs", torch::ones({4, 2}), true), td::ShapeError, "'obs'", "[4, 2]",
                      "[4, 3]");
  snap.expect_unchanged(t);
}

// ---- set_ ----------------------------------------------------------------------------

TEST(TensorDictSetUnderscore, CopiesIntoTheSameStorage) {
  auto t = make_td();
  auto reward = t.get({"next", "reward"});
  auto ptr = reward.data_ptr();
  auto value = torch::full({4, 1}, 5.0);
  t.set_({"next", "reward"}, value);
  EXPECT_EQ(t.get({"next", "reward"}).data_ptr(), ptr);
  EXPECT_TRUE(t.get({"next", "reward"}).is_same(reward));
  EXPECT_TRUE(at::equal(reward, value));
  EXPECT_FALSE(t.get({"next", "reward"}).is_same(value));
}

TEST(TensorDictSetUnderscore, CastsToTheDestinationDtype) {
  td::TensorDict t({{"f", torch::zeros({3})}, {"b", torch::zeros({3}, torch::kBool)}}, {3});
  t.set_("f", torch::tensor({1, 2, 3}, torch::kInt64));
  EXPECT_EQ(t.get("f").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(t.get("f"), torch::tensor({1.0f, 2.0f, 3.0f})));
  t.set_("b", torch::tensor({0.0, 2.0, 0.0}));
  EXPECT_EQ(t.get("b").scalar_type(), at::kBool);
  EXPECT_TRUE(at::equal(t.get("b"), torch::tensor({false, true, false})));
}

TEST(TensorDictSetUnderscore, Broadcasts) {
  auto t = make_td();
  t.set_("obs", torch::tensor({1.0f, 2.0f, 3.0f}));
  EXPECT_TRUE(at::equal(t.get("obs"), torch::tensor({1.0f, 2.0f, 3.0f}).expand({4, 3})));
  t.set_("obs", torch::full({4, 1}, 9.0));
  EXPECT_TRUE(at::equal(t.get("obs"), torch::full({4, 3}, 9.0)));
  t.set_("obs", torch::tensor(0.5));
  EXPECT_TRUE(at::equal(t.get("obs"), torch::full({4, 3}, 0.5)));
}

TEST(TensorDictSetUnderscore, MissingKeyIsKeyError) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set_("action", torch::zeros({4})), td::KeyError, "'action'", "set_()");
  TD_EXPECT_THROW_MSG(t.set_({"next", "obs"}, torch::zeros({4})), td::KeyError, "('next', 'obs')",
                      "['reward', 'done']");
  TD_EXPECT_THROW_MSG(t.set_({"prev", "obs"}, torch::zeros({4})), td::KeyError, "('prev', 'obs')");
  snap.expect_unchanged(t);
}

TEST(TensorDictSetUnderscore, WrongShapeIsShapeErrorAndWritesNothing) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set_("obs", torch::ones({4, 2})), td::ShapeError, "'obs'", "[4, 2]",
                      "[4, 3]");
  TD_EXPECT_THROW_MSG(t.set_("obs", torch::ones({2, 4, 3})), td::ShapeError, "'obs'", "[2, 4, 3]");
  TD_EXPECT_THROW_MSG(t.set_({"next", "reward"}, torch::ones({3, 1})), td::ShapeError,
                      "('next', 'reward')", "[3, 1]", "[4, 1]");
  snap.expect_unchanged(t);
}

TEST(TensorDictSetUnderscore, NonTensorEntryIsTypeError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.set_("next", torch::zeros({4})), td::TypeError, "'next'");
  TD_EXPECT_THROW_MSG(t.set_("label", torch::zeros({4})), td::TypeError, "'label'");
}

// ---- set_non_tensor ----------------------------------------------------------------

TEST(TensorDictSetNonTensor, StoresJsonWithTheParentBatch) {
  auto t = make_td();
  t.set_non_tensor({"next", "info"}, nlohmann::json({{"episode", 7}}));
  EXPECT_TRUE(t.is_non_tensor({"next", "info"}));
  EXPECT_EQ(t.get_non_tensor({"next", "info"})["episode"], 7);
  EXPECT_EQ(t.at({"next", "info"}).non_tensor().batch_size().vec(), Shape{4});
}

TEST(TensorDictSetNonTensor, ReplacesAnyEntry) {
  auto t = make_td();
  t.set_non_tensor("obs", 3.5);
  EXPECT_EQ(t.entry_kind("obs"), td::EntryKind::NonTensor);
  EXPECT_EQ(t.get_non_tensor("obs").get<double>(), 3.5);
  t.set_non_tensor("label", "dog");
  EXPECT_EQ(t.get_non_tensor("label"), "dog");
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label"}));
}

TEST(TensorDictSetNonTensor, ThroughATensorIsTypeError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.set_non_tensor({"obs", "x"}, 1), td::TypeError, "('obs', 'x')");
}

// ---- create_nested --------------------------------------------------------------------

TEST(TensorDictCreateNested, CreatesAnEmptyChildWithBatchAndDevice) {
  td::TensorDict t(Shape{4, 2}, at::Device(at::kCPU));
  auto child = t.create_nested("child");
  EXPECT_EQ(batch_of(child), (Shape{4, 2}));
  EXPECT_EQ(child.device(), at::Device(at::kCPU));
  EXPECT_EQ(child.num_keys(), 0u);
  EXPECT_TRUE(t.get_tensordict("child").is_same(child));
}

TEST(TensorDictCreateNested, NestedPathCreatesEveryLevel) {
  td::TensorDict t(Shape{3});
  auto c = t.create_nested({"a", "b", "c"});
  EXPECT_TRUE(t.get_tensordict({"a", "b", "c"}).is_same(c));
  EXPECT_EQ(batch_of(t.get_tensordict({"a", "b"})), Shape{3});
  c.set("x", torch::zeros({3}));
  EXPECT_TRUE(t.contains({"a", "b", "c", "x"}));
}

TEST(TensorDictCreateNested, ExistingChildIsReturned) {
  auto t = make_td();
  auto next = t.get_tensordict("next");
  EXPECT_TRUE(t.create_nested("next").is_same(next));
  EXPECT_EQ(next.num_keys(), 2u);
}

TEST(TensorDictCreateNested, ExistingLeafIsTypeError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.create_nested("obs"), td::TypeError, "'obs'");
  TD_EXPECT_THROW_MSG(t.create_nested({"obs", "x"}), td::TypeError, "('obs', 'x')");
  EXPECT_EQ(t.entry_kind("obs"), td::EntryKind::Tensor);
}

// ---- update -----------------------------------------------------------------------------

TEST(TensorDictUpdate, AddsAndReplacesKeysSharingTensors) {
  auto t = make_td();
  auto obs = torch::ones({4, 3});
  auto action = torch::ones({4, 2});
  td::TensorDict other({{"obs", obs}, {"action", action}}, {4});
  t.update(other);
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_TRUE(t.get("action").is_same(action));
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label", "action"}));
}

TEST(TensorDictUpdate, MergesRecursivelyIntoExistingChildren) {
  auto t = make_td();
  auto next = t.get_tensordict("next");
  auto reward = next.get("reward");
  auto done = torch::ones({4, 1}, torch::kBool);
  td::TensorDict other(
      {{td::NestedKey{"next", "done"}, done}, {td::NestedKey{"next", "obs"}, torch::zeros({4, 3})}},
      {4});
  t.update(other);
  EXPECT_TRUE(t.get_tensordict("next").is_same(next));  // merged, not replaced
  EXPECT_TRUE(next.get("reward").is_same(reward));      // untouched
  EXPECT_TRUE(next.get("done").is_same(done));
  EXPECT_EQ(next.keys(), (Keys{"reward", "done", "obs"}));
}

TEST(TensorDictUpdate, NewChildIsStored) {
  td::TensorDict t(Shape{4});
  td::TensorDict sub({{"x", torch::zeros({4})}}, {4});
  td::TensorDict other({{"sub", sub}}, {4});
  t.update(other);
  EXPECT_TRUE(t.get_tensordict("sub").is_same(sub));
}

TEST(TensorDictUpdate, CloneOptionStoresCopies) {
  td::TensorDict t(Shape{4});
  auto x = torch::randn({4});
  td::TensorDict other({{"x", x}, {td::NestedKey{"n", "y"}, torch::randn({4})}}, {4});
  t.update(other, {.clone = true});
  EXPECT_FALSE(t.get("x").is_same(x));
  EXPECT_NE(t.get("x").data_ptr(), x.data_ptr());
  EXPECT_TRUE(at::equal(t.get("x"), x));
  EXPECT_FALSE(t.get_tensordict("n").is_same(other.get_tensordict("n")));
  EXPECT_NE(t.get({"n", "y"}).data_ptr(), other.get({"n", "y"}).data_ptr());
  EXPECT_TRUE(at::equal(t.get({"n", "y"}), other.get({"n", "y"})));
}

TEST(TensorDictUpdate, InplaceOptionCopiesIntoExistingAndAddsNew) {
  auto t = make_td();
  auto obs = t.get("obs");
  auto ptr = obs.data_ptr();
  td::TensorDict other({{"obs", torch::ones({4, 3})}, {"action", torch::ones({4})}}, {4});
  t.update(other, {.inplace = true});
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_EQ(t.get("obs").data_ptr(), ptr);
  EXPECT_TRUE(at::equal(obs, torch::ones({4, 3})));
  EXPECT_TRUE(t.get("action").is_same(other.get("action")));
}

TEST(TensorDictUpdate, KeysToUpdateRestrictsTopLevel) {
  auto t = make_td();
  td::TensorDict other({{"obs", torch::ones({4, 3})}, {"action", torch::ones({4})}}, {4});
  t.update(other, {.keys_to_update = {"action"}});
  EXPECT_TRUE(t.contains("action"));
  EXPECT_FALSE(t.get("obs").is_same(other.get("obs")));
}

TEST(TensorDictUpdate, KeysToUpdateWithNestedKeys) {
  auto t = make_td();
  auto reward = t.get({"next", "reward"});
  td::TensorDict other({{td::NestedKey{"next", "reward"}, torch::ones({4, 1})},
                        {td::NestedKey{"next", "done"}, torch::ones({4, 1}, torch::kBool)},
                        {td::NestedKey{"other", "x"}, torch::ones({4})},
                        {"obs", torch::ones({4, 3})}},
                       {4});
  t.update(other, {.keys_to_update = {{"next", "done"}, {"other", "x"}}});
  EXPECT_TRUE(t.get({"next", "done"}).is_same(other.get({"next", "done"})));
  EXPECT_TRUE(t.get({"next", "reward"}).is_same(reward));
  EXPECT_TRUE(t.get({"other", "x"}).is_same(other.get({"other", "x"})));
  EXPECT_FALSE(t.get("obs").is_same(other.get("obs")));
}

TEST(TensorDictUpdate, WrongBatchIsShapeError) {
  auto t = make_td();
  td::TensorDict other({{"x", torch::zeros({3})}}, {3});
  TD_EXPECT_THROW_MSG(t.update(other), td::ShapeError, "'x'", "[4]", "[3]");
  EXPECT_FALSE(t.contains("x"));
}

TEST(TensorDictUpdate, NestedErrorsNameTheFullPath) {
  auto t = make_td();
  td::TensorDict other(std::vector<int64_t>{4});
  other.set({"next", "x"}, torch::zeros({4}));
  other.get_tensordict("next").set_batch_size({});
  other.get_tensordict("next").set("bad", torch::zeros({3}));
  TD_EXPECT_THROW_MSG(t.update(other), td::ShapeError, "('next', 'bad')", "[4]", "[3]");
  td::TensorDict inplace(std::vector<int64_t>{4});
  inplace.set({"next", "reward"}, torch::zeros({4, 2}));
  TD_EXPECT_THROW_MSG(t.update(inplace, {.inplace = true}), td::ShapeError, "('next', 'reward')",
                      "[4, 2]", "[4, 1]");
}

TEST(TensorDictUpdate, ABadValueAfterGoodOnesWritesNothing) {
  // Every entry is checked before the first is written (in-memory levels on
  // both sides, nested levels, and a source that is not in memory).
  auto t = make_td();
  auto snap = Snapshot::of(t);
  // Batch [] holds leaves of any shape; "wrong" does not fit batch [4].
  td::TensorDict bad(
      {{"obs", torch::ones({4, 3})}, {"new", torch::ones({4})}, {"wrong", torch::zeros({3})}}, {});
  TD_EXPECT_THROW_MSG(t.update(bad), td::ShapeError, "'wrong'", "[4]", "[3]");
  snap.expect_unchanged(t);
  EXPECT_FALSE(t.contains("new"));

  td::TensorDict nested(std::vector<int64_t>{4});
  nested.set({"next", "reward"}, torch::ones({4, 1}));
  nested.set("x", torch::ones({4}));
  nested.get_tensordict("next").set_batch_size({});
  nested.get_tensordict("next").set("bad", torch::zeros({3}));
  TD_EXPECT_THROW_MSG(t.update(nested), td::ShapeError, "('next', 'bad')");
  snap.expect_unchanged(t);

  td::TensorDict sub({{"y", torch::zeros({3})}}, {3});
  td::TensorDict with_sub({{"obs", torch::ones({4, 3})}, {"sub", sub}}, {});
  TD_EXPECT_THROW_MSG(t.update(with_sub), td::ShapeError, "'sub'");
  snap.expect_unchanged(t);
  EXPECT_FALSE(t.contains("sub"));
}

TEST(TensorDictUpdate, ReplacesNestedLevelsAndNonTensorsLikeSet) {
  auto t = make_td();
  td::TensorDict other({{"next", torch::zeros({4, 2})}, {"label", "dog"}}, {4});
  t.update(other);
  EXPECT_EQ(t.entry_kind("next"), td::EntryKind::Tensor);
  EXPECT_EQ(t.get_non_tensor("label"), "dog");
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label"}));
}

TEST(TensorDictUpdate, WithItselfIsANoOp) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  t.update(t);
  snap.expect_unchanged(t);
}

TEST(TensorDictUpdate, CopiesNonTensors) {
  td::TensorDict t(Shape{2});
  td::TensorDict other({{"label", "cat"}}, {2});
  t.update(other);
  EXPECT_EQ(t.get_non_tensor("label"), "cat");
}

// ---- update_ -------------------------------------------------------------------------

TEST(TensorDictUpdateUnderscore, CopiesIntoExistingStorage) {
  auto t = make_td();
  auto obs = t.get("obs");
  auto reward = t.get({"next", "reward"});
  td::TensorDict other({{"obs", torch::ones({4, 3})},
                        {td::NestedKey{"next", "reward"}, torch::full({4, 1}, 2.0)},
                        {"label", "dog"}},
                       {4});
  t.update_(other);
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_TRUE(at::equal(obs, torch::ones({4, 3})));
  EXPECT_TRUE(t.get({"next", "reward"}).is_same(reward));
  EXPECT_TRUE(at::equal(reward, torch::full({4, 1}, 2.0)));
  EXPECT_EQ(t.get_non_tensor("label"), "dog");
}

TEST(TensorDictUpdateUnderscore, MissingKeyIsKeyErrorWithNothingWritten) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  td::TensorDict other(
      {{"obs", torch::ones({4, 3})}, {td::NestedKey{"next", "missing"}, torch::ones({4})}}, {4});
  TD_EXPECT_THROW_MSG(t.update_(other), td::KeyError, "('next', 'missing')");
  snap.expect_unchanged(t);
}

TEST(TensorDictUpdateUnderscore, KeysToUpdateRestricts) {
  auto t = make_td();
  auto obs_before = t.get("obs").clone();
  td::TensorDict other({{"obs", torch::ones({4, 3})},
                        {td::NestedKey{"next", "reward"}, torch::full({4, 1}, 2.0)},
                        {"missing", torch::ones({4})}},
                       {4});
  t.update_(other, {{"next", "reward"}});
  EXPECT_TRUE(at::equal(t.get({"next", "reward"}), torch::full({4, 1}, 2.0)));
  EXPECT_TRUE(at::equal(t.get("obs"), obs_before));
  EXPECT_FALSE(t.contains("missing"));
}

TEST(TensorDictUpdateUnderscore, KindMismatchIsTypeError) {
  auto t = make_td();
  td::TensorDict other({{"label", torch::ones({4})}}, {4});
  TD_EXPECT_THROW_MSG(t.update_(other), td::TypeError, "'label'");
}

// ---- del_ / pop --------------------------------------------------------------------------

TEST(TensorDictDel, RemovesTopLevelAndNestedEntries) {
  auto t = make_td();
  t.del_("obs");
  EXPECT_FALSE(t.contains("obs"));
  t.del_({"next", "reward"});
  EXPECT_FALSE(t.contains({"next", "reward"}));
  EXPECT_TRUE(t.contains({"next", "done"}));
  t.del_("next");
  EXPECT_EQ(t.keys(), (Keys{"label"}));
}

TEST(TensorDictDel, MissingKeyIsKeyError) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.del_("missing"), td::KeyError, "'missing'", "['obs', 'next', 'label']");
  TD_EXPECT_THROW_MSG(t.del_({"next", "missing"}), td::KeyError, "('next', 'missing')");
  TD_EXPECT_THROW_MSG(t.del_({"obs", "x"}), td::TypeError, "('obs', 'x')");
  snap.expect_unchanged(t);
}

TEST(TensorDictPop, ReturnsAndRemoves) {
  auto t = make_td();
  auto obs = t.get("obs");
  td::Value v = t.pop("obs");
  EXPECT_TRUE(v.tensor().is_same(obs));
  EXPECT_FALSE(t.contains("obs"));
  td::Value done = t.pop({"next", "done"});
  EXPECT_EQ(done.tensor().scalar_type(), at::kBool);
  EXPECT_EQ(t.get_tensordict("next").keys(), (Keys{"reward"}));
  EXPECT_EQ(t.pop("label").non_tensor().data(), "cat");
}

TEST(TensorDictPop, MissingKeyIsKeyError) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.pop({"next", "missing"}), td::KeyError, "('next', 'missing')");
  snap.expect_unchanged(t);
}

TEST(TensorDictPop, DefaultWhenMissing) {
  auto t = make_td();
  auto fallback = torch::zeros({1});
  EXPECT_TRUE(t.pop("missing", fallback).tensor().is_same(fallback));
  EXPECT_TRUE(t.pop({"next", "missing"}, fallback).tensor().is_same(fallback));
  auto obs = t.get("obs");
  EXPECT_TRUE(t.pop("obs", fallback).tensor().is_same(obs));
  EXPECT_FALSE(t.contains("obs"));
}

// ---- rename_key_ ---------------------------------------------------------------------------

TEST(TensorDictRenameKey, MovesTheValueToTheEnd) {
  auto t = make_td();
  auto obs = t.get("obs");
  t.rename_key_("obs", "observation");
  EXPECT_FALSE(t.contains("obs"));
  EXPECT_TRUE(t.get("observation").is_same(obs));
  EXPECT_EQ(t.keys(), (Keys{"next", "label", "observation"}));
}

TEST(TensorDictRenameKey, NestedKeys) {
  auto t = make_td();
  auto reward = t.get({"next", "reward"});
  t.rename_key_({"next", "reward"}, {"next", "r"});
  EXPECT_EQ(t.get_tensordict("next").keys(), (Keys{"done", "r"}));
  EXPECT_TRUE(t.get({"next", "r"}).is_same(reward));
  t.rename_key_({"next", "r"}, "reward");  // across levels
  EXPECT_TRUE(t.get("reward").is_same(reward));
  EXPECT_FALSE(t.contains({"next", "r"}));
}

TEST(TensorDictRenameKey, SafeRefusesAnExistingTargetAndChangesNothing) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.rename_key_("obs", "label", /*safe=*/true), td::KeyError, "'label'");
  snap.expect_unchanged(t);
}

TEST(TensorDictRenameKey, UnsafeOverwritesTheTarget) {
  auto t = make_td();
  auto obs = t.get("obs");
  t.rename_key_("obs", "label");
  EXPECT_TRUE(t.get("label").is_same(obs));
  EXPECT_EQ(t.keys(), (Keys{"next", "label"}));
}

TEST(TensorDictRenameKey, MissingSourceIsKeyError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.rename_key_({"next", "x"}, "y"), td::KeyError, "('next', 'x')");
  EXPECT_FALSE(t.contains("y"));
}

TEST(TensorDictRenameKey, SameNameIsANoOp) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  t.rename_key_("obs", "obs", true);
  snap.expect_unchanged(t);
}

// ---- select / exclude --------------------------------------------------------------------

TEST(TensorDictSelect, KeepsKeysInSourceOrderAndSharesTensors) {
  auto t = make_td();
  auto s = t.select({"label", "obs"});
  EXPECT_EQ(s.keys(), (Keys{"obs", "label"}));
  EXPECT_TRUE(s.get("obs").is_same(t.get("obs")));
  EXPECT_EQ(batch_of(s), Shape{4});
  EXPECT_FALSE(s.is_same(t));
  EXPECT_EQ(t.num_keys(), 3u);  // source untouched
}

TEST(TensorDictSelect, NestedKeysKeepOnlyThoseLeaves) {
  auto t = make_td();
  auto s = t.select({{"next", "done"}});
  EXPECT_EQ(s.keys(true), (Keys{"next", {"next", "done"}}));
  EXPECT_TRUE(s.get({"next", "done"}).is_same(t.get({"next", "done"})));
  EXPECT_FALSE(s.get_tensordict("next").is_same(t.get_tensordict("next")));
  EXPECT_EQ(t.get_tensordict("next").num_keys(), 2u);
}

TEST(TensorDictSelect, NestedKeysKeepTheSourceOrder) {
  auto t = make_td();
  auto s = t.select({{"next", "done"}, {"next", "reward"}});
  EXPECT_EQ(s.get_tensordict("next").keys(), (Keys{"reward", "done"}));
}

TEST(TensorDictSelect, WholeChildIsShared) {
  auto t = make_td();
  auto s = t.select({"next"});
  EXPECT_TRUE(s.get_tensordict("next").is_same(t.get_tensordict("next")));
}

TEST(TensorDictSelect, StrictMissingKeyIsKeyError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.select({"obs", "missing"}), td::KeyError, "'missing'");
  TD_EXPECT_THROW_MSG(t.select({{"next", "missing"}}), td::KeyError, "('next', 'missing')");
  TD_EXPECT_THROW_MSG(t.select({{"obs", "x"}}), td::TypeError, "('obs', 'x')");
}

TEST(TensorDictSelect, NonStrictSkipsMissingKeys) {
  auto t = make_td();
  auto s = t.select({"obs", "missing", {"next", "missing"}}, /*strict=*/false);
  EXPECT_TRUE(s.contains("obs"));
  EXPECT_FALSE(s.contains("missing"));
  EXPECT_EQ(s.keys(true, true), (Keys{"obs"}));
}

TEST(TensorDictExclude, RemovesTopLevelAndNestedKeys) {
  auto t = make_td();
  auto e = t.exclude({"obs", {"next", "done"}, "missing"});
  EXPECT_EQ(e.keys(true), (Keys{"next", {"next", "reward"}, "label"}));
  EXPECT_TRUE(e.get({"next", "reward"}).is_same(t.get({"next", "reward"})));
  EXPECT_EQ(t.keys(true).size(), 5u);  // source untouched
  EXPECT_EQ(batch_of(e), Shape{4});
}

TEST(TensorDictSelectInPlace, SelectUnderscoreKeepsOnlyTheKeys) {
  auto t = make_td();
  auto obs = t.get("obs");
  t.select_({"obs", {"next", "reward"}});
  EXPECT_EQ(t.keys(true), (Keys{"obs", "next", {"next", "reward"}}));
  EXPECT_TRUE(t.get("obs").is_same(obs));
}

TEST(TensorDictSelectInPlace, StrictMissingKeyChangesNothing) {
  auto t = make_td();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.select_({"obs", "missing"}), td::KeyError, "'missing'");
  snap.expect_unchanged(t);
}

TEST(TensorDictSelectInPlace, ExcludeUnderscoreRemovesKeys) {
  auto t = make_td();
  t.exclude_({"label", {"next", "reward"}, "missing"});
  EXPECT_EQ(t.keys(true), (Keys{"obs", "next", {"next", "done"}}));
}

// ---- empty ------------------------------------------------------------------------------

TEST(TensorDictEmpty, KeepsBatchAndDeviceWithoutKeys) {
  td::TensorDict t({{"x", torch::zeros({4, 2})}, {td::NestedKey{"n", "y"}, torch::zeros({4})}}, {4},
                   at::Device(at::kCPU));
  auto e = t.empty();
  EXPECT_EQ(batch_of(e), Shape{4});
  EXPECT_EQ(e.device(), at::Device(at::kCPU));
  EXPECT_EQ(e.num_keys(), 0u);
  EXPECT_EQ(t.num_keys(), 2u);
}

TEST(TensorDictEmpty, RecurseKeepsTheNestedStructure) {
  td::TensorDict child({{"y", torch::zeros({4, 2})}}, {4, 2});
  td::TensorDict t({{"x", torch::zeros({4})}, {"n", child}, {"label", "cat"}}, {4});
  auto e = t.empty(/*recurse=*/true);
  EXPECT_EQ(e.keys(true), (Keys{"n"}));
  EXPECT_EQ(batch_of(e.get_tensordict("n")), (Shape{4, 2}));
  EXPECT_FALSE(e.get_tensordict("n").is_same(child));
  EXPECT_TRUE(e.is_empty());
  EXPECT_EQ(child.num_keys(), 1u);
}

// ---- flatten_keys / unflatten_keys ------------------------------------------------------

TEST(TensorDictFlattenKeys, JoinsNestedKeysSharingTensors) {
  auto t = make_td();
  auto f = t.flatten_keys();
  EXPECT_EQ(f.keys(), (Keys{"obs", "next.reward", "next.done", "label"}));
  EXPECT_TRUE(f.get("next.reward").is_same(t.get({"next", "reward"})));
  EXPECT_EQ(f.get_non_tensor("label"), "cat");
  EXPECT_EQ(batch_of(f), Shape{4});
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label"}));  // source untouched
}

TEST(TensorDictFlattenKeys, CustomSeparator) {
  td::TensorDict t;
  t.set({"a", "b", "c"}, torch::zeros({}));
  t.set({"a", "d"}, torch::ones({}));
  auto f = t.flatten_keys("/");
  EXPECT_EQ(f.keys(), (Keys{"a/b/c", "a/d"}));
}

TEST(TensorDictFlattenKeys, CollisionIsKeyError) {
  auto t = make_td();
  t.set("next.reward", torch::zeros({4}));
  TD_EXPECT_THROW_MSG(t.flatten_keys(), td::KeyError, "next.reward");
  EXPECT_NO_THROW(t.flatten_keys("/"));
}

TEST(TensorDictFlattenKeys, EmptySeparatorIsValueError) {
  EXPECT_THROW(make_td().flatten_keys(""), td::ValueError);
  EXPECT_THROW(make_td().unflatten_keys(""), td::ValueError);
}

TEST(TensorDictUnflattenKeys, SplitsOnTheSeparator) {
  td::TensorDict t({{"obs", torch::zeros({4})},
                    {"next.reward", torch::zeros({4, 1})},
                    {"next.done", torch::zeros({4, 1})},
                    {"a.b.c", torch::zeros({4})}},
                   {4});
  auto u = t.unflatten_keys();
  EXPECT_EQ(u.keys(true, true),
            (Keys{"obs", {"next", "reward"}, {"next", "done"}, {"a", "b", "c"}}));
  EXPECT_TRUE(u.get({"next", "reward"}).is_same(t.get("next.reward")));
  EXPECT_EQ(batch_of(u.get_tensordict({"a", "b"})), Shape{4});
}

TEST(TensorDictUnflattenKeys, CustomSeparatorLeavesDotsAlone) {
  td::TensorDict t({{"a::b", torch::zeros({})}, {"c.d", torch::zeros({})}});
  auto u = t.unflatten_keys("::");
  EXPECT_EQ(u.keys(true, true), (Keys{{"a", "b"}, "c.d"}));
}

TEST(TensorDictUnflattenKeys, RoundTrip) {
  auto t = make_td();
  auto back = t.flatten_keys().unflatten_keys();
  EXPECT_EQ(back.keys(true), t.keys(true));
  for (const auto& k : t.keys(true, true)) EXPECT_TRUE(back.get(k).is_same(t.get(k))) << k;
}

TEST(TensorDictUnflattenKeys, CollisionIsKeyError) {
  td::TensorDict leaf_first({{"a", torch::zeros({})}, {"a.b", torch::zeros({})}});
  TD_EXPECT_THROW_MSG(leaf_first.unflatten_keys(), td::KeyError, "'a'");
  td::TensorDict nested_first({{"a.b", torch::zeros({})}, {"a", torch::zeros({})}});
  TD_EXPECT_THROW_MSG(nested_first.unflatten_keys(), td::KeyError, "'a'");
}

// ---- clone / copy / to_tensordict -------------------------------------------------------

TEST(TensorDictClone, IsDeep) {
  auto t = make_td();
  auto c = t.clone();
  EXPECT_FALSE(c.is_same(t));
  EXPECT_EQ(c.keys(true), t.keys(true));
  EXPECT_EQ(batch_of(c), batch_of(t));
  for (const auto& k : t.keys(true, true)) {
    EXPECT_NE(c.get(k).data_ptr(), t.get(k).data_ptr()) << k;
    EXPECT_TRUE(at::equal(c.get(k), t.get(k))) << k;
  }
  EXPECT_FALSE(c.get_tensordict("next").is_same(t.get_tensordict("next")));
  EXPECT_EQ(c.get_non_tensor("label"), "cat");
}

TEST(TensorDictClone, IsIndependent) {
  auto t = make_td();
  auto c = t.clone();
  c.get({"next", "reward"}).fill_(100.0);
  c.set("new", torch::zeros({4}));
  c.set_non_tensor("label", "dog");
  EXPECT_FALSE(t.contains("new"));
  EXPECT_TRUE(at::equal(t.get({"next", "reward"}), torch::arange(4.0).reshape({4, 1})));
  EXPECT_EQ(t.get_non_tensor("label"), "cat");
}

TEST(TensorDictClone, KeepsDevice) {
  td::TensorDict t({{"x", torch::zeros({2})}}, {2}, at::Device(at::kCPU));
  EXPECT_EQ(t.clone().device(), at::Device(at::kCPU));
}

TEST(TensorDictCopy, SharesTensorsInNewContainers) {
  auto t = make_td();
  auto c = t.copy();
  EXPECT_FALSE(c.is_same(t));
  for (const auto& k : t.keys(true, true)) EXPECT_TRUE(c.get(k).is_same(t.get(k))) << k;
  EXPECT_FALSE(c.get_tensordict("next").is_same(t.get_tensordict("next")));
  c.set("new", torch::zeros({4}));
  c.set({"next", "new"}, torch::zeros({4}));
  EXPECT_FALSE(t.contains("new"));
  EXPECT_FALSE(t.contains({"next", "new"}));
  c.get("obs").fill_(3.0);  // shared storage
  EXPECT_TRUE(at::equal(t.get("obs"), torch::full({4, 3}, 3.0)));
}

TEST(TensorDictToTensorDict, IsAnUnlockedDenseCopy) {
  auto t = make_td();
  t.lock_();
  auto d = t.to_tensordict();
  EXPECT_FALSE(d.is_same(t));
  EXPECT_FALSE(d.is_locked());
  EXPECT_FALSE(d.get_tensordict("next").is_locked());
  EXPECT_EQ(d.keys(true), t.keys(true));
  for (const auto& k : t.keys(true, true)) {
    EXPECT_TRUE(at::equal(d.get(k), t.get(k))) << k;
    EXPECT_NE(d.get(k).data_ptr(), t.get(k).data_ptr()) << k;
  }
}

// ---- handle semantics ------------------------------------------------------------------

TEST(TensorDictHandle, CopyingAHandleAliases) {
  auto a = make_td();
  td::TensorDict b = a;
  EXPECT_TRUE(b.is_same(a));
  b.set("x", torch::zeros({4}));
  EXPECT_TRUE(a.contains("x"));
  td::TensorDictBase base = a;
  base.del_("obs");
  EXPECT_FALSE(b.contains("obs"));
}

TEST(TensorDictHandle, CloneDoesNotAlias) {
  auto a = make_td();
  td::TensorDictBase b = a.clone();
  b.set("x", torch::zeros({4}));
  EXPECT_FALSE(a.contains("x"));
}

TEST(TensorDictHandle, CheckedDowncast) {
  td::TensorDictBase base = make_td();
  EXPECT_TRUE(base.is<td::TensorDict>());
  td::TensorDict t = base.as<td::TensorDict>();
  EXPECT_TRUE(t.is_same(base));
  EXPECT_THROW(td::TensorDictBase().as<td::TensorDict>(), td::TypeError);
}
