#include "pch.h"

#include "support/core_test_helpers.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace td = tensordict;
using td_test::batch_of;
using td_test::Shape;
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

// get_via_base_header.cpp: get() compiled with tensor_dict_base.h only.
at::Tensor get_via_base_header(const td::TensorDictBase& t, std::string_view key);
at::Tensor get_via_base_header(const td::TensorDictBase& t, std::string_view a, std::string_view b);

// ---- get ----------------------------------------------------------------------

TEST(TensorDictGet, ReturnsTheStoredTensor) {
  auto obs = torch::randn({4, 3});
  td::TensorDict t({{"obs", obs}}, {4});
  EXPECT_TRUE(t.get("obs").is_same(obs));
}

TEST(TensorDictGet, NestedKey) {
  auto t = make_td();
  auto reward = t.get({"next", "reward"});
  EXPECT_EQ(reward.sizes().vec(), (Shape{4, 1}));
  EXPECT_TRUE(reward.is_same(t.get_tensordict("next").get("reward")));
}

TEST(TensorDictGet, MissingKeyIsKeyErrorListingTheKeysPresent) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get("missing"), td::KeyError, "'missing'", "['obs', 'next', 'label']");
}

TEST(TensorDictGet, MissingNestedKeyNamesThePathAndTheLevelKeys) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get({"next", "obs"}), td::KeyError, "('next', 'obs')",
                      "['reward', 'done']");
}

TEST(TensorDictGet, MissingIntermediateIsKeyError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get({"prev", "obs"}), td::KeyError, "('prev', 'obs')",
                      "['obs', 'next', 'label']");
}

TEST(TensorDictGet, WalkingThroughATensorIsTypeError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get({"obs", "x"}), td::TypeError, "('obs', 'x')", "'obs'", "Tensor");
}

TEST(TensorDictGet, NestedTensorDictEntryIsTypeError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get("next"), td::TypeError, "'next'", "TensorDict");
}

TEST(TensorDictGet, NonTensorEntryIsTypeError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get("label"), td::TypeError, "'label'", "NonTensorData");
}

TEST(TensorDictGet, EmptyKeyIsKeyError) {
  auto t = make_td();
  EXPECT_THROW(t.get(td::NestedKey()), td::KeyError);
}

TEST(TensorDictGet, DefaultIsReturnedOnlyWhenMissing) {
  auto t = make_td();
  auto fallback = torch::full({4}, 7.0);
  EXPECT_TRUE(t.get("missing", fallback).is_same(fallback));
  EXPECT_TRUE(t.get({"next", "missing"}, fallback).is_same(fallback));
  EXPECT_TRUE(t.get({"nope", "missing"}, fallback).is_same(fallback));
  EXPECT_TRUE(t.get("obs", fallback).is_same(t.get("obs")));
}

TEST(TensorDictGet, DefaultDoesNotHideAWrongKind) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get("next", torch::zeros({4})), td::TypeError, "'next'");
  TD_EXPECT_THROW_MSG(t.get("label", torch::zeros({4})), td::TypeError, "'label'");
}

TEST(TensorDictGet, NullHandleIsValueError) {
  td::TensorDictBase null;
  EXPECT_THROW(null.get("x"), td::ValueError);
  EXPECT_THROW(null.get({"a", "b"}), td::ValueError);
  EXPECT_THROW(null.get(td::NestedKey()), td::ValueError);
}

TEST(TensorDictGet, FromATranslationUnitThatSeesOnlyTheHandleHeader) {
  // get() is inlined from tensor_dict.h; without it, the library's copy runs.
  auto t = make_td();
  EXPECT_TRUE(get_via_base_header(t, "obs").is_same(t.get("obs")));
  EXPECT_TRUE(get_via_base_header(t, "next", "reward").is_same(t.get({"next", "reward"})));
  EXPECT_THROW(get_via_base_header(t, "next", "obs"), td::KeyError);
  EXPECT_THROW(get_via_base_header(t, "label"), td::TypeError);
}

// ---- the in-memory key index ------------------------------------------------------
// Keys are compared by their first 8 bytes and length, then the rest in 8-byte
// words: keys of every length, and keys that differ only in one byte at any
// position, must still be told apart.

namespace {

std::vector<std::string> keys_of_every_length() {
  std::vector<std::string> out;
  const std::string base = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH";
  for (std::size_t n = 1; n <= base.size(); ++n) {
    std::string k = base.substr(0, n);
    out.push_back(k);
    // The same length, one byte changed: first, last and (for long keys) in
    // each 8-byte word.
    for (std::size_t i : {std::size_t{0}, n - 1, n / 2, std::size_t{8}, std::size_t{15},
                          std::size_t{16}, std::size_t{24}}) {
      if (i >= n) continue;
      std::string v = k;
      v[i] = '_';
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
  }
  return out;
}

}  // namespace

TEST(TensorDictKeyIndex, EveryKeyFindsItsOwnEntry) {
  const auto keys = keys_of_every_length();
  td::TensorDict t;
  for (std::size_t i = 0; i < keys.size(); ++i)
    t.set(keys[i], torch::full({1}, static_cast<double>(i)));
  ASSERT_EQ(t.num_keys(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(t.get(keys[i]).item<double>(), static_cast<double>(i)) << keys[i];
    EXPECT_EQ(t.get({std::string_view(keys[i])}).item<double>(), static_cast<double>(i)) << keys[i];
  }
  // Near misses: one byte more, one byte less, the last byte changed.
  for (const auto& k : keys) {
    for (std::string miss : {k + "x", k.substr(0, k.size() - 1), k.substr(0, k.size() - 1) + "#"}) {
      if (miss.empty() || std::find(keys.begin(), keys.end(), miss) != keys.end()) continue;
      EXPECT_FALSE(t.contains(miss)) << miss;
      EXPECT_THROW(t.get(miss), td::KeyError) << miss;
    }
  }
}

TEST(TensorDictKeyIndex, LookupsSurviveRemovalAndGrowth) {
  td::TensorDict t;
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back("agent_" + std::to_string(i) + ".reward");
  for (std::size_t i = 0; i < keys.size(); ++i)
    t.set(keys[i], torch::full({1}, static_cast<double>(i)));
  for (std::size_t i = 0; i < keys.size(); i += 3) t.del_(keys[i]);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i % 3 == 0) {
      EXPECT_FALSE(t.contains(keys[i])) << keys[i];
    } else {
      EXPECT_EQ(t.get(keys[i]).item<double>(), static_cast<double>(i)) << keys[i];
    }
  }
  t.set(keys[0], torch::full({1}, -1.0));
  EXPECT_EQ(t.get(keys[0]).item<double>(), -1.0);
  EXPECT_EQ(t.keys().back(), td::NestedKey(keys[0]));
}

TEST(TensorDictKeyIndex, NestedLevelsEachHaveTheirOwnIndex) {
  td::TensorDict t;
  for (const char* a : {"next", "agents", "a_rather_long_group_name"})
    for (const char* b : {"obs", "reward", "observation_vector_of_the_agent"})
      t.set({a, b}, torch::full({1}, static_cast<double>(std::strlen(a) * 100 + std::strlen(b))));
  for (const char* a : {"next", "agents", "a_rather_long_group_name"})
    for (const char* b : {"obs", "reward", "observation_vector_of_the_agent"}) {
      const double want = static_cast<double>(std::strlen(a) * 100 + std::strlen(b));
      EXPECT_EQ(t.get({a, b}).item<double>(), want);
      EXPECT_EQ(t.get(td::NestedKey{a, b}).item<double>(), want);
    }
}

// ---- find / at ------------------------------------------------------------------

TEST(TensorDictFind, ReturnsEveryKind) {
  auto t = make_td();
  auto obs = t.find("obs");
  ASSERT_TRUE(obs.has_value());
  EXPECT_TRUE(obs->is_tensor());
  EXPECT_TRUE(obs->tensor().is_same(t.get("obs")));
  auto next = t.find("next");
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(next->is_tensordict());
  auto label = t.find("label");
  ASSERT_TRUE(label.has_value());
  EXPECT_EQ(label->non_tensor().data(), "cat");
  auto done = t.find({"next", "done"});
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->tensor().scalar_type(), at::kBool);
}

TEST(TensorDictFind, MissingIsNullopt) {
  auto t = make_td();
  EXPECT_FALSE(t.find("missing").has_value());
  EXPECT_FALSE(t.find({"next", "missing"}).has_value());
  EXPECT_FALSE(t.find({"missing", "x"}).has_value());
  EXPECT_FALSE(t.find({"obs", "x"}).has_value());  // through a tensor
  EXPECT_FALSE(t.find(td::NestedKey()).has_value());
}

TEST(TensorDictAt, ReturnsEveryKind) {
  auto t = make_td();
  EXPECT_EQ(t.at("obs").kind(), td::EntryKind::Tensor);
  EXPECT_EQ(t.at("next").kind(), td::EntryKind::TensorDict);
  EXPECT_EQ(t.at("label").kind(), td::EntryKind::NonTensor);
  EXPECT_TRUE(t.at("next").tensordict().is_same(t.get_tensordict("next")));
  EXPECT_TRUE(t.at({"next", "reward"}).tensor().is_same(t.get({"next", "reward"})));
}

TEST(TensorDictAt, MissingIsKeyError) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.at({"next", "obs"}), td::KeyError, "('next', 'obs')", "['reward', 'done']");
  TD_EXPECT_THROW_MSG(t.at("x"), td::KeyError, "'x'");
}

TEST(TensorDictAt, ValueAccessorsOfTheWrongKindAreTypeErrors) {
  auto t = make_td();
  td::Value v = t.at("obs");
  EXPECT_THROW(v.tensordict(), td::TypeError);
  EXPECT_THROW(v.non_tensor(), td::TypeError);
  td::Value n = t.at("next");
  TD_EXPECT_THROW_MSG(n.tensor(), td::TypeError, "Tensor", "TensorDict");
}

// ---- get_tensordict / get_non_tensor ------------------------------------------------

TEST(TensorDictGetTensorDict, ReturnsTheLiveChild) {
  auto t = make_td();
  auto next = t.get_tensordict("next");
  EXPECT_EQ(batch_of(next), Shape{4});
  next.set("obs", torch::zeros({4, 3}));
  EXPECT_TRUE(t.contains({"next", "obs"}));
}

TEST(TensorDictGetTensorDict, ErrorsNameTheKey) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get_tensordict("obs"), td::TypeError, "'obs'", "Tensor");
  TD_EXPECT_THROW_MSG(t.get_tensordict("label"), td::TypeError, "'label'");
  TD_EXPECT_THROW_MSG(t.get_tensordict({"next", "sub"}), td::KeyError, "('next', 'sub')");
}

TEST(TensorDictGetNonTensor, ReturnsTheJsonValue) {
  auto t = make_td();
  t.set_non_tensor({"next", "info"}, nlohmann::json({{"step", 3}}));
  EXPECT_EQ(t.get_non_tensor("label"), nlohmann::json("cat"));
  EXPECT_EQ(t.get_non_tensor({"next", "info"})["step"], 3);
}

TEST(TensorDictGetNonTensor, DefaultOnlyWhenMissing) {
  auto t = make_td();
  EXPECT_EQ(t.get_non_tensor("missing", nlohmann::json("dog")), "dog");
  EXPECT_EQ(t.get_non_tensor({"next", "missing"}, nlohmann::json(1)), 1);
  EXPECT_EQ(t.get_non_tensor("label", nlohmann::json("dog")), "cat");
  TD_EXPECT_THROW_MSG(t.get_non_tensor("obs", nlohmann::json(0)), td::TypeError, "'obs'");
}

TEST(TensorDictGetNonTensor, ErrorsNameTheKey) {
  auto t = make_td();
  TD_EXPECT_THROW_MSG(t.get_non_tensor("obs"), td::TypeError, "'obs'", "NonTensorData");
  TD_EXPECT_THROW_MSG(t.get_non_tensor({"next", "label"}), td::KeyError, "('next', 'label')");
}

TEST(TensorDictIsNonTensor, OnlyForNonTensorEntries) {
  auto t = make_td();
  EXPECT_TRUE(t.is_non_tensor("label"));
  EXPECT_FALSE(t.is_non_tensor("obs"));
  EXPECT_FALSE(t.is_non_tensor("next"));
  EXPECT_FALSE(t.is_non_tensor("missing"));
  EXPECT_FALSE(t.is_non_tensor({"next", "missing"}));
}

// ---- introspection ------------------------------------------------------------------

TEST(TensorDictEntryKind, EachKindAndMissing) {
  auto t = make_td();
  EXPECT_EQ(t.entry_kind("obs"), td::EntryKind::Tensor);
  EXPECT_EQ(t.entry_kind("next"), td::EntryKind::TensorDict);
  EXPECT_EQ(t.entry_kind("label"), td::EntryKind::NonTensor);
  EXPECT_EQ(t.entry_kind({"next", "done"}), td::EntryKind::Tensor);
  EXPECT_FALSE(t.entry_kind("missing").has_value());
  EXPECT_FALSE(t.entry_kind({"obs", "x"}).has_value());
  EXPECT_STREQ(td::to_string(td::EntryKind::Tensor), "Tensor");
  EXPECT_STREQ(td::to_string(td::EntryKind::TensorDict), "TensorDict");
  EXPECT_STREQ(td::to_string(td::EntryKind::NonTensor), "NonTensorData");
}

TEST(TensorDictContains, TopLevelAndNested) {
  auto t = make_td();
  EXPECT_TRUE(t.contains("obs"));
  EXPECT_TRUE(t.contains("next"));
  EXPECT_TRUE(t.contains("label"));
  EXPECT_TRUE(t.contains({"next", "reward"}));
  EXPECT_FALSE(t.contains("reward"));  // only nested
  EXPECT_FALSE(t.contains({"next", "obs"}));
  EXPECT_FALSE(t.contains({"missing", "obs"}));
  EXPECT_FALSE(t.contains({"obs", "x"}));
  EXPECT_FALSE(t.contains(td::NestedKey()));
  EXPECT_FALSE(t.contains("next.reward"));  // no separator parsing
}

TEST(TensorDictGetItemShape, ShapeOfEachKind) {
  auto t = make_td();
  EXPECT_EQ(t.get_item_shape("obs"), (Shape{4, 3}));
  EXPECT_EQ(t.get_item_shape({"next", "done"}), (Shape{4, 1}));
  EXPECT_EQ(t.get_item_shape("next"), Shape{4});
  EXPECT_EQ(t.get_item_shape("label"), Shape{4});
  TD_EXPECT_THROW_MSG(t.get_item_shape({"next", "x"}), td::KeyError, "('next', 'x')");
}

TEST(TensorDictNumKeys, CountsTopLevelEntries) {
  auto t = make_td();
  EXPECT_EQ(t.num_keys(), 3u);
  EXPECT_EQ(t.get_tensordict("next").num_keys(), 2u);
  EXPECT_EQ(td::TensorDict().num_keys(), 0u);
}

TEST(TensorDictIsEmpty, TrueWithoutLeavesRecursively) {
  td::TensorDict t(Shape{2});
  EXPECT_TRUE(t.is_empty());
  t.create_nested("a");
  t.create_nested({"b", "c"});
  EXPECT_EQ(t.num_keys(), 2u);
  EXPECT_TRUE(t.is_empty());  // empty nested tensordicts count as empty
}

TEST(TensorDictIsEmpty, FalseWithATensorOrNonTensorAnywhere) {
  td::TensorDict a(Shape{2});
  a.set({"x", "y", "z"}, torch::zeros({2}));
  EXPECT_FALSE(a.is_empty());
  EXPECT_FALSE(a.get_tensordict("x").is_empty());
  td::TensorDict b(Shape{2});
  b.set_non_tensor({"x", "label"}, "cat");
  EXPECT_FALSE(b.is_empty());  // non-tensors are leaves
}

// ---- keys / values / items --------------------------------------------------------

TEST(TensorDictKeys, TopLevelInInsertionOrder) {
  auto t = make_td();
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label"}));
}

TEST(TensorDictKeys, ReplacingAKeyKeepsItsPosition) {
  auto t = make_td();
  t.set("obs", torch::zeros({4, 5}));
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label"}));
}

TEST(TensorDictKeys, IncludeNestedListsNodesBeforeTheirChildren) {
  auto t = make_td();
  EXPECT_EQ(t.keys(/*include_nested=*/true),
            (Keys{"obs", "next", {"next", "reward"}, {"next", "done"}, "label"}));
}

TEST(TensorDictKeys, LeavesOnlyExcludesTensorDictsAndNonTensors) {
  auto t = make_td();
  EXPECT_EQ(t.keys(true, /*leaves_only=*/true),
            (Keys{"obs", {"next", "reward"}, {"next", "done"}}));
  EXPECT_EQ(t.keys(false, true), (Keys{"obs"}));
}

TEST(TensorDictKeys, NonTensorLeavesOption) {
  auto t = make_td();
  t.set_non_tensor({"next", "info"}, "x");
  td::KeysOptions opts{.include_nested = true, .leaves_only = true, .non_tensor_leaves = true};
  EXPECT_EQ(t.keys(opts),
            (Keys{"obs", {"next", "reward"}, {"next", "done"}, {"next", "info"}, "label"}));
  // Without leaves_only it changes nothing.
  EXPECT_EQ(t.keys(td::KeysOptions{.include_nested = true, .non_tensor_leaves = true}),
            t.keys(true));
}

TEST(TensorDictKeys, DeepNestingOrder) {
  td::TensorDict t;
  t.set({"a", "b", "c"}, torch::zeros({}));
  t.set("z", torch::zeros({}));
  t.set({"a", "d"}, torch::zeros({}));
  EXPECT_EQ(t.keys(true), (Keys{"a", {"a", "b"}, {"a", "b", "c"}, {"a", "d"}, "z"}));
  EXPECT_EQ(t.keys(true, true), (Keys{{"a", "b", "c"}, {"a", "d"}, "z"}));
}

TEST(TensorDictKeys, SortByJoinedName) {
  auto t = make_td();
  EXPECT_EQ(t.keys(td::KeysOptions{.include_nested = true, .sort = true}),
            (Keys{"label", "next", {"next", "done"}, {"next", "reward"}, "obs"}));
  EXPECT_EQ(t.keys(td::KeysOptions{.sort = true}), (Keys{"label", "next", "obs"}));
  EXPECT_EQ(t.keys(td::KeysOptions{.include_nested = true, .leaves_only = true, .sort = true}),
            (Keys{{"next", "done"}, {"next", "reward"}, "obs"}));
}

TEST(TensorDictValues, MatchKeysAndShareStorage) {
  auto t = make_td();
  auto values = t.values(true, true);
  auto keys = t.keys(true, true);
  ASSERT_EQ(values.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i)
    EXPECT_TRUE(values[i].tensor().is_same(t.get(keys[i]))) << keys[i];
  auto top = t.values();
  ASSERT_EQ(top.size(), 3u);
  EXPECT_TRUE(top[0].is_tensor());
  EXPECT_TRUE(top[1].is_tensordict());
  EXPECT_TRUE(top[2].is_non_tensor());
}

TEST(TensorDictItems, PairsKeysWithTheirValues) {
  auto t = make_td();
  auto items = t.items(true);
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[0].first, td::NestedKey("obs"));
  EXPECT_TRUE(items[0].second.tensor().is_same(t.get("obs")));
  EXPECT_EQ(items[1].first, td::NestedKey("next"));
  EXPECT_TRUE(items[1].second.tensordict().is_same(t.get_tensordict("next")));
  EXPECT_EQ(items[3].first, (td::NestedKey{"next", "done"}));
  EXPECT_EQ(items[4].second.non_tensor().data(), "cat");
  auto sorted = t.items(td::KeysOptions{.include_nested = true, .sort = true});
  EXPECT_EQ(sorted[0].first, td::NestedKey("label"));
}

TEST(TensorDictKeys, TopLevelListIsSharedUntilTheKeysChange) {
  auto t = make_td();
  auto first = t.keys();
  auto second = t.keys();
  // Built once per key set: both lists are the same object.
  EXPECT_EQ(&first[0], &second[0]);
  // Indexing shares the key set, and so the list.
  EXPECT_EQ(&t[0].keys()[0], &first[0]);
  // Replacing a value keeps it; adding a key gives a new list and leaves the
  // old one as it was.
  t.set("obs", torch::zeros({4, 3}));
  EXPECT_EQ(&t.keys()[0], &first[0]);
  t.set("extra", torch::zeros({4}));
  EXPECT_EQ(first, (Keys{"obs", "next", "label"}));
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label", "extra"}));
  t.del_("next");
  EXPECT_EQ(t.keys(), (Keys{"obs", "label", "extra"}));
  std::vector<td::NestedKey> copy = t.keys();
  copy.emplace_back("more");
  EXPECT_EQ(t.keys().size(), 3u);
  EXPECT_TRUE(t.keys().contains("label"));
  EXPECT_FALSE(t.keys().contains("next"));
  EXPECT_TRUE(td::TensorDict(Shape{2}).keys().empty());
}

TEST(TensorDictItems, TopLevelItemsAreAViewOfTheValues) {
  auto t = make_td();
  auto items = t.items();
  // A replaced value is seen by a list taken before; a copy keeps the old one.
  std::vector<std::pair<td::NestedKey, td::Value>> copy = items;
  torch::Tensor replacement = torch::ones({4, 3});
  t.set("obs", replacement);
  EXPECT_TRUE(items[0].second.tensor().is_same(replacement));
  EXPECT_FALSE(copy[0].second.tensor().is_same(replacement));
  // Replacing values inside the loop is allowed.
  for (const auto& [k, v] : t.items())
    if (v.is_tensor()) t.set(k, v.tensor() * 2);
  EXPECT_TRUE(t.get("obs").equal(replacement * 2));
  // Adding or removing a key while iterating is an error, not a read of a
  // moved entry; the key set is as the loop left it.
  EXPECT_THROW(
      {
        for (const auto& [k, v] : t.items())
          if (k == td::NestedKey("obs")) t.set("added", torch::zeros({4}));
      },
      td::Error);
  EXPECT_TRUE(t.contains("added"));
  auto list = t.items();
  t.del_("added");
  EXPECT_THROW((void)list[0], td::Error);
  // Iterating a copy may change the keys.
  std::vector<std::pair<td::NestedKey, td::Value>> all = t.items();
  for (const auto& [k, v] : all)
    if (v.is_tensor()) t.set(k.join() + "_again", v.tensor());
  EXPECT_EQ(t.keys(), (Keys{"obs", "next", "label", "obs_again"}));
}

TEST(TensorDictItems, AViewKeepsItsLevelAndReadsOnWhenAnotherNodeChangesSharedKeys) {
  std::optional<td::ItemList> kept;
  {
    auto t = make_td();
    kept = t.items();
  }  // the handle is gone: the view keeps the level
  ASSERT_EQ(kept->size(), 3u);
  EXPECT_EQ((*kept)[2].first, td::NestedKey("label"));
  // A row shares the level's key index; a key added to the row copies the
  // index, and the view of the original (and its key list) reads on.
  auto t = make_td();
  auto view = t.items();
  {
    auto row = t[0];
    row.set("added", torch::zeros({}));
  }
  std::vector<std::string> seen;
  for (const auto& [k, v] : view) seen.push_back(k.join());
  EXPECT_EQ(seen, (std::vector<std::string>{"obs", "next", "label"}));
  EXPECT_TRUE(view[0].second.tensor().is_same(t.get("obs")));
  // A snapshot (a nested walk) iterates through the same iterator.
  std::vector<std::string> leaves;
  for (const auto& [k, v] : t.items(true, true)) leaves.push_back(k.join());
  EXPECT_EQ(leaves, (std::vector<std::string>{"obs", "next.reward", "next.done"}));
  EXPECT_TRUE(td::ItemList().empty());
}

TEST(TensorDictKeysView, TopLevelKeysInOrderWithoutCopies) {
  auto t = make_td();
  std::vector<std::string> seen;
  for (std::string_view k : t.keys_view()) seen.emplace_back(k);
  EXPECT_EQ(seen, (std::vector<std::string>{"obs", "next", "label"}));
  auto view = t.keys_view();
  EXPECT_EQ(view.size(), 3u);
  EXPECT_FALSE(view.empty());
  // In memory the keys are read in place: the view points into the storage.
  const auto& entries = static_cast<const td::detail::MemoryNode&>(t.node()).entries();
  EXPECT_EQ((*view.begin()).data(), entries[0].first.data());
  EXPECT_TRUE(td::TensorDict(Shape{2}).keys_view().empty());
}

TEST(TensorDictKeysView, ItemsViewPairsKeysWithTheStoredValues) {
  auto t = make_td();
  std::size_t i = 0;
  for (auto [k, v] : t.items_view()) {
    if (i == 0) {
      EXPECT_EQ(k, "obs");
      EXPECT_TRUE(v.tensor().is_same(t.get("obs")));
    } else if (i == 1) {
      EXPECT_EQ(k, "next");
      EXPECT_TRUE(v.tensordict().is_same(t.get_tensordict("next")));
    } else {
      EXPECT_EQ(k, "label");
      EXPECT_EQ(v.non_tensor().data(), "cat");
    }
    ++i;
  }
  EXPECT_EQ(i, 3u);
}

TEST(TensorDictKeysView, KeepsATemporaryTensorDictAlive) {
  std::vector<std::string> seen;
  for (std::string_view k : make_td().keys_view()) seen.emplace_back(k);
  EXPECT_EQ(seen.size(), 3u);
  auto items = make_td().items_view();  // the tensordict handle is gone
  EXPECT_EQ((*items.begin()).second.tensor().size(0), 4);
}

TEST(TensorDictKeysView, OtherStoragesGiveASnapshot) {
  auto a = td::TensorDict({{"x", torch::zeros({3})}, {"y", torch::ones({3, 2})}}, {3});
  auto b = td::TensorDict({{"x", torch::ones({3})}, {"y", torch::ones({3, 2})}}, {3});
  auto stacked = td::lazy_stack({a, b}, 0);
  std::vector<std::string> seen;
  for (std::string_view k : stacked.keys_view()) seen.emplace_back(k);
  std::vector<std::string> expected;
  for (const auto& k : stacked.keys()) expected.push_back(k.front());
  EXPECT_EQ(seen, expected);
  for (auto [k, v] : stacked.items_view())
    EXPECT_TRUE(at::equal(v.tensor(), stacked.get(std::string(k))));
}

TEST(TensorDictItems, NonTensorItems) {
  auto t = make_td();
  t.set_non_tensor({"next", "info"}, nlohmann::json({1, 2}));
  auto top = t.non_tensor_items();
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].first, td::NestedKey("label"));
  EXPECT_EQ(top[0].second, "cat");
  auto all = t.non_tensor_items(/*include_nested=*/true);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, (td::NestedKey{"next", "info"}));
  EXPECT_EQ(all[0].second, nlohmann::json({1, 2}));
  EXPECT_EQ(all[1].first, td::NestedKey("label"));
}

TEST(TensorDictForEach, VisitsLikeItems) {
  auto t = make_td();
  for (const auto& opts : {td::KeysOptions{}, td::KeysOptions{.include_nested = true},
                           td::KeysOptions{.include_nested = true, .leaves_only = true},
                           td::KeysOptions{.include_nested = true, .sort = true}}) {
    Keys seen;
    t.for_each([&](const td::NestedKey& k, const td::Value&) { seen.push_back(k); }, opts);
    EXPECT_EQ(seen, t.keys(opts));
  }
}

TEST(TensorDictForEach, PassesTheStoredValues) {
  auto t = make_td();
  int tensors = 0;
  t.for_each(
      [&](const td::NestedKey& k, const td::Value& v) {
        ASSERT_TRUE(v.is_tensor());
        EXPECT_TRUE(v.tensor().is_same(t.get(k)));
        ++tensors;
      },
      td::KeysOptions{.include_nested = true, .leaves_only = true});
  EXPECT_EQ(tensors, 3);
}

TEST(TensorDictForEach, AKeyAddedByTheCallbackEndsTheWalkWithAnError) {
  auto t = make_td();
  int calls = 0;
  EXPECT_THROW(t.for_each([&](const td::NestedKey&, const td::Value&) {
    if (++calls == 1) t.set("added", torch::zeros({4}));
  }),
               td::Error);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(t.contains("added"));
  // In a nested level too.
  calls = 0;
  EXPECT_THROW(t.for_each(
                   [&](const td::NestedKey& k, const td::Value&) {
                     if (k == td::NestedKey{"next", "reward"})
                       t.get_tensordict("next").set("more", torch::zeros({4}));
                     ++calls;
                   },
                   td::KeysOptions{.include_nested = true}),
               td::Error);
  // Replacing values is allowed.
  t.for_each([&](const td::NestedKey& k, const td::Value& v) {
    if (v.is_tensor()) t.set(k, v.tensor() + 1);
  });
  EXPECT_TRUE(t.get("added").equal(torch::ones({4})));
}
