// td.index({...}) / td[i]: the batch size follows LibTorch, leaves are the
// torch index applied leaf by leaf (basic indices give views, advanced ones
// copies), nested tensordicts keep their extra batch dims.
#include "pch.h"

#include "support/ops_test_helpers.h"

#include <string>
#include <type_traits>
#include <vector>

namespace td = tensordict;
using namespace torch::indexing;
using ops_test::batch_of;
using ops_test::expect_fixture_batches;
using ops_test::expect_leafwise;
using ops_test::Frozen;
using ops_test::make_fixture;
using ops_test::Shape;
using ops_test::sizes_of;

// td[0] must pick the integer overload (0 is also a null pointer constant).
static_assert(std::is_same_v<decltype(std::declval<const td::TensorDict&>()[0]), td::TensorDict>);
static_assert(
    std::is_same_v<decltype(std::declval<const td::TensorDictBase&>()[0]), td::TensorDictBase>);
static_assert(
    std::is_same_v<decltype(std::declval<const td::TensorDict&>().index({0})), td::TensorDict>);

namespace {

struct IndexCase {
  std::string name;
  std::vector<TensorIndex> idx;       // the tensordict index
  std::vector<TensorIndex> leaf_idx;  // the same index for a leaf (Ellipsis spelled out)
  bool basic;                         // only int/slice/None/Ellipsis: leaves are views
};

std::vector<IndexCase> index_cases() {
  auto mask2 = torch::tensor(
      {{true, false, true}, {false, false, false}, {true, true, false}, {false, true, true}});
  auto mask1 = torch::tensor({true, false, true, true});
  auto mask_dim1 = torch::tensor({false, true, true});
  auto l1 = torch::tensor({2, 0, 2}, torch::kLong);
  auto lneg = torch::tensor({-1, 0}, torch::kLong);
  auto l2 = torch::tensor({{0, 1}, {3, 2}}, torch::kLong);
  auto lcols = torch::tensor({2, 0}, torch::kLong);
  auto lrows = torch::tensor({0, 3}, torch::kLong);
  auto lcols2 = torch::tensor({1, 2}, torch::kLong);
  return {
      {"int", {1}, {1}, true},
      {"negative int", {-1}, {-1}, true},
      {"most negative int", {-4}, {-4}, true},
      {"int on dim 1", {Slice(), 2}, {Slice(), 2}, true},
      {"two ints", {3, -2}, {3, -2}, true},
      {"slice with step", {Slice(1, None, 2)}, {Slice(1, None, 2)}, true},
      {"slices on both dims",
       {Slice(None, None, 3), Slice(None, None, 2)},
       {Slice(None, None, 3), Slice(None, None, 2)},
       true},
      {"slice with negative start", {Slice(-2, None)}, {Slice(-2, None)}, true},
      {"empty slice", {Slice(3, 1)}, {Slice(3, 1)}, true},
      {"None", {None}, {None}, true},
      {"None in the middle", {Slice(), None}, {Slice(), None}, true},
      {"None and int", {1, None, Slice(0, 2)}, {1, None, Slice(0, 2)}, true},
      {"Ellipsis at start", {Ellipsis, 1}, {Slice(), 1}, true},
      {"Ellipsis at end", {1, Ellipsis}, {1, Slice()}, true},
      {"Ellipsis in the middle", {0, Ellipsis, 2}, {0, 2}, true},
      {"Ellipsis then None", {Ellipsis, None}, {Slice(), Slice(), None}, true},
      {"None, Ellipsis, int", {None, Ellipsis, 0}, {None, Slice(), 0}, true},
      {"Ellipsis with a slice", {Ellipsis, Slice(1, 3)}, {Slice(), Slice(1, 3)}, true},
      // torch treats a bool scalar as an advanced index (a copy); here True
      // and False are resolved like None (views). Values are the same.
      {"bool True", {true}, {None}, true},
      {"bool False", {false}, {false}, true},
      {"full mask", {mask2}, {mask2}, false},
      {"partial mask", {mask1}, {mask1}, false},
      {"mask on dim 1", {Slice(), mask_dim1}, {Slice(), mask_dim1}, false},
      {"mask after Ellipsis", {Ellipsis, mask_dim1}, {Slice(), mask_dim1}, false},
      {"long 1-D with repeats", {l1}, {l1}, false},
      {"long 1-D negative", {lneg}, {lneg}, false},
      {"long 2-D", {l2}, {l2}, false},
      {"slice then long", {Slice(), lcols}, {Slice(), lcols}, false},
      {"long then slice", {lrows, Slice(0, 2)}, {lrows, Slice(0, 2)}, false},
      {"long then full slice", {lrows, Slice()}, {lrows, Slice()}, false},
      {"two longs", {lrows, lcols2}, {lrows, lcols2}, false},
      {"int then slice", {0, Slice(0, 2)}, {0, Slice(0, 2)}, true},
      {"int then long", {2, lcols}, {2, lcols}, false},
  };
}

}  // namespace

TEST(TensorDictIndex, FixtureIsWhatTheTestsAssume) {
  auto t = make_fixture();
  EXPECT_EQ(t.keys(true, true), ops_test::fixture_leaves());
  expect_fixture_batches(t, {4, 3});
  EXPECT_EQ(t.get("b").scalar_type(), torch::kLong);
  EXPECT_EQ(t.get("c").scalar_type(), torch::kBool);
  EXPECT_EQ(t.get({"nested", "deeper", "e"}).scalar_type(), torch::kDouble);
  EXPECT_EQ(t.get({"nested", "deeper", "f"}).scalar_type(), torch::kInt);
}

TEST(TensorDictIndex, EveryIndexFormMatchesTorchLeafByLeaf) {
  auto t = make_fixture();
  for (const auto& c : index_cases()) {
    SCOPED_TRACE(c.name);
    td::TensorDict r;
    try {
      r = t.index(c.idx);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "index threw: " << e.what();
      continue;
    }
    EXPECT_FALSE(r.is_same(t));
    Shape expected_batch = sizes_of(torch::zeros({4, 3}).index(c.idx));
    expect_fixture_batches(r, expected_batch);
    expect_leafwise(
        r, t, [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.index(c.leaf_idx); });
    EXPECT_FALSE(r.is_locked());
  }
}

TEST(TensorDictIndex, BasicIndicesGiveViewsAdvancedGiveCopies) {
  auto t = make_fixture();
  for (const auto& c : index_cases()) {
    SCOPED_TRACE(c.name);
    auto r = t.index(c.idx);
    for (const auto& k : ops_test::fixture_leaves()) {
      at::Tensor got = r.get(k);
      at::Tensor src = t.get(k);
      if (c.basic) {
        EXPECT_TRUE(got.is_alias_of(src)) << k << " should be a view";
        if (got.numel() > 0) EXPECT_EQ(got.data_ptr(), src.index(c.leaf_idx).data_ptr()) << k;
      } else {
        EXPECT_FALSE(got.is_alias_of(src)) << k << " should be a copy";
      }
    }
  }
}

TEST(TensorDictIndex, WritesThroughABasicIndexReachTheSource) {
  auto t = make_fixture();
  auto row = t.index({1});
  for (const auto& k : ops_test::fixture_leaves()) row.get(k).fill_(1);
  for (const auto& k : ops_test::fixture_leaves()) {
    at::Tensor leaf = t.get(k);
    EXPECT_TRUE(torch::equal(leaf[1], torch::ones_like(leaf[1]))) << k;
    EXPECT_FALSE(torch::equal(leaf[0], torch::ones_like(leaf[0]))) << k;
  }
  // A strided slice on dim 1 with the nested "deeper" dims behind it.
  auto cols = t.index({Ellipsis, Slice(0, None, 2)});
  cols.get({"nested", "deeper", "e"}).fill_(-100.0);
  auto e = t.get({"nested", "deeper", "e"});
  EXPECT_TRUE(torch::equal(e.index({Slice(), 0}), torch::full({4, 2}, -100.0, torch::kDouble)));
  EXPECT_TRUE(torch::equal(e.index({Slice(), 2}), torch::full({4, 2}, -100.0, torch::kDouble)));
  EXPECT_FALSE(torch::equal(e.index({Slice(), 1}), torch::full({4, 2}, -100.0, torch::kDouble)));
}

TEST(TensorDictIndex, WritesIntoAnAdvancedIndexResultDoNotReachTheSource) {
  auto t = make_fixture();
  Frozen before = Frozen::of(t);
  auto rows = t.index({torch::tensor({1, 2}, torch::kLong)});
  for (const auto& k : ops_test::fixture_leaves()) rows.get(k).fill_(1);
  auto masked = t.index({torch::ones({4, 3}, torch::kBool)});
  for (const auto& k : ops_test::fixture_leaves()) masked.get(k).fill_(1);
  before.expect_unchanged(t);
}

TEST(TensorDictIndex, TheResultIsANewContainer) {
  auto t = make_fixture();
  Frozen before = Frozen::of(t);
  auto row = t[0];
  row.set("a", torch::zeros({3, 2}));
  row.set("brand_new", torch::zeros({3}));
  row.set({"nested", "d"}, torch::zeros({3, 5}));
  before.expect_unchanged(t);
  EXPECT_FALSE(t.contains("brand_new"));
}

// A result node shares its source's key index until one of them adds or
// removes a key: each side must then see only its own keys, at every level.
TEST(TensorDictIndex, KeyChangesAfterIndexingStayOnTheirSide) {
  auto t = make_fixture();
  auto row = t[1];
  auto rows = t.index({Slice(1, 3)});
  // Removing and adding on the result.
  row.del_("b");
  row.set("z", torch::zeros({3}));
  row.del_({"nested", "deeper", "e"});
  EXPECT_TRUE(t.contains("b"));
  EXPECT_FALSE(t.contains("z"));
  EXPECT_TRUE(t.contains({"nested", "deeper", "e"}));
  EXPECT_TRUE(torch::equal(t.get("c"), make_fixture().get("c")));
  EXPECT_TRUE(torch::equal(row.get("c"), t.get("c")[1]));
  EXPECT_TRUE(
      torch::equal(row.get({"nested", "deeper", "f"}), t.get({"nested", "deeper", "f"})[1]));
  EXPECT_EQ(row.keys(), (std::vector<td::NestedKey>{"a", "c", "nested", "label", "z"}));
  // Adding and removing on the source, after indexing.
  t.set("w", torch::ones({4, 3}));
  t.del_("a");
  t.rename_key_("c", "c2");
  EXPECT_FALSE(rows.contains("w"));
  EXPECT_TRUE(rows.contains("a"));
  EXPECT_TRUE(rows.contains("c"));
  EXPECT_FALSE(rows.contains("c2"));
  EXPECT_TRUE(torch::equal(rows.get("c"), t.get("c2").slice(0, 1, 3)));
  EXPECT_TRUE(torch::equal(t.get("w"), torch::ones({4, 3})));
  EXPECT_TRUE(torch::equal(t.get("b"), make_fixture().get("b")));
  EXPECT_TRUE(torch::equal(rows.get("b"), t.get("b").slice(0, 1, 3)));
  EXPECT_EQ(rows.keys(), (std::vector<td::NestedKey>{"a", "b", "c", "nested", "label"}));
  // Replacing an entry changes neither side's keys.
  rows.set("a", torch::zeros({2, 3, 2}));
  EXPECT_EQ(rows.keys(), (std::vector<td::NestedKey>{"a", "b", "c", "nested", "label"}));
  EXPECT_TRUE(torch::equal(rows.get("a"), torch::zeros({2, 3, 2})));
  EXPECT_FALSE(t.contains("a"));
  // Many new keys on an indexed copy (the index grows past its first table).
  auto grown = make_fixture()[0];
  for (int i = 0; i < 40; ++i) grown.set("k" + std::to_string(i), torch::full({3}, i));
  for (int i = 0; i < 40; ++i) EXPECT_EQ(grown.get("k" + std::to_string(i))[0].item<int64_t>(), i);
  EXPECT_TRUE(torch::equal(grown.get({"nested", "d"}), make_fixture().get({"nested", "d"})[0]));
}

// A leaf that LibTorch fails to index is named with its full nested key.
TEST(TensorDictIndex, LeafErrorsNameTheNestedKey) {
  td::TensorDict inner({{"x", torch::zeros({4, 2})}}, {4});
  td::TensorDict outer({{"nested", inner}}, {4});
  OPS_EXPECT_THROW_MSG(outer.index({torch::tensor({9})}), td::IndexError, "('nested', 'x')");
}

TEST(TensorDictIndex, SubscriptSugarIsIndexOnTheFirstDim) {
  auto t = make_fixture();
  for (int64_t i : {0, 2, -1, -4}) {
    SCOPED_TRACE(i);
    td::TensorDict r = t[i];
    expect_fixture_batches(r, {3});
    expect_leafwise(r, t, [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf[i]; });
  }
  // Through the base handle too.
  const td::TensorDictBase& base = t;
  td::TensorDictBase r = base[1];
  EXPECT_TRUE(r.is<td::TensorDict>());
  EXPECT_TRUE(torch::equal(r.get("a"), t.get("a")[1]));
  OPS_EXPECT_THROW_MSG(t[4], td::IndexError, "4");
  OPS_EXPECT_THROW_MSG(t[-5], td::IndexError, "-5");
}

TEST(TensorDictIndex, EmptyOrFullSlicesReturnTheSameObject) {
  auto t = make_fixture();
  EXPECT_TRUE(t.index({}).is_same(t));
  EXPECT_TRUE(t.index({Slice()}).is_same(t));
  EXPECT_TRUE(t.index({Slice(), Slice()}).is_same(t));
  EXPECT_TRUE(t.index({Ellipsis}).is_same(t));
  EXPECT_TRUE(t.index({Slice(), Ellipsis}).is_same(t));
  // A slice that happens to cover everything is still a new container.
  auto r = t.index({Slice(0, 4)});
  EXPECT_FALSE(r.is_same(t));
  expect_fixture_batches(r, {4, 3});
  // Locked sources: same object, still locked.
  t.lock_();
  EXPECT_TRUE(t.index({Ellipsis}).is_same(t));
  EXPECT_TRUE(t.index({Ellipsis}).is_locked());
}

TEST(TensorDictIndex, ResultIsUnlockedEvenWhenTheSourceIsLocked) {
  auto t = make_fixture();
  t.lock_();
  for (const auto& c : index_cases()) {
    SCOPED_TRACE(c.name);
    auto r = t.index(c.idx);
    EXPECT_FALSE(r.is_locked());
    EXPECT_FALSE(r.get_tensordict("nested").is_locked());
    EXPECT_FALSE(r.get_tensordict({"nested", "deeper"}).is_locked());
    r.set("added", torch::zeros(r.batch_size()));  // no LockedError
    EXPECT_TRUE(r.contains("added"));
  }
  EXPECT_FALSE(t.contains("added"));
}

TEST(TensorDictIndex, NestedDeeperKeepsItsExtraDims) {
  auto t = make_fixture();
  auto r = t.index({Ellipsis, 1});
  EXPECT_EQ(batch_of(r), (Shape{4}));
  auto deeper = r.get_tensordict({"nested", "deeper"});
  EXPECT_EQ(batch_of(deeper), (Shape{4, 2}));
  EXPECT_TRUE(torch::equal(deeper.get("e"), t.get({"nested", "deeper", "e"}).index({Slice(), 1})));
  EXPECT_EQ(sizes_of(deeper.get("f")), (Shape{4, 2, 3}));
  // Indexing the deeper tensordict itself uses its own (longer) batch.
  auto inner = t.get_tensordict({"nested", "deeper"}).index({Ellipsis, 0});
  EXPECT_EQ(batch_of(inner), (Shape{4, 3}));
  EXPECT_TRUE(
      torch::equal(inner.get("f"), t.get({"nested", "deeper", "f"}).index({Slice(), Slice(), 0})));
  // A mask over the root batch flattens the root dims only.
  auto masked = t.index({torch::ones({4, 3}, torch::kBool)});
  EXPECT_EQ(batch_of(masked.get_tensordict({"nested", "deeper"})), (Shape{12, 2}));
  EXPECT_EQ(sizes_of(masked.get({"nested", "deeper", "f"})), (Shape{12, 2, 3}));
}

TEST(TensorDictIndex, NonTensorBatchFollowsTheIndex) {
  auto t = make_fixture();
  auto r = t.index({torch::tensor({0, 1, 1, 3, 2}, torch::kLong), 1});
  EXPECT_EQ(batch_of(r), (Shape{5}));
  EXPECT_EQ(r.get_non_tensor("label"), nlohmann::json("x"));
  EXPECT_EQ(r.at("label").non_tensor().batch_size().vec(), (Shape{5}));
  auto s = t.index({None, 0});
  EXPECT_EQ(s.at("label").non_tensor().batch_size().vec(), (Shape{1, 3}));
}

TEST(TensorDictIndex, ZeroDimTensorDictOnlyAcceptsNoneEllipsisTrue) {
  td::TensorDict z({{"x", torch::arange(2.0)},
                    {"n", td::TensorDict({{"y", torch::ones({3}, torch::kLong)}}, {})}});
  OPS_EXPECT_THROW_MSG(z.index({0}), td::IndexError, "batch_dims==0");
  OPS_EXPECT_THROW_MSG(z[0], td::IndexError, "batch_dims==0");
  OPS_EXPECT_THROW_MSG(z.index({Slice(0, 1)}), td::IndexError, "batch_dims==0");
  OPS_EXPECT_THROW_MSG(z.index({torch::tensor({0}, torch::kLong)}), td::IndexError,
                       "batch_dims==0");
  OPS_EXPECT_THROW_MSG(z.index({None, 0}), td::IndexError, "batch_dims==0");
  EXPECT_TRUE(z.index({Ellipsis}).is_same(z));

  auto u = z.index({None});
  EXPECT_EQ(batch_of(u), (Shape{1}));
  EXPECT_TRUE(torch::equal(u.get("x"), z.get("x").unsqueeze(0)));
  EXPECT_EQ(batch_of(u.get_tensordict("n")), (Shape{1}));
  EXPECT_TRUE(torch::equal(u.get({"n", "y"}), z.get({"n", "y"}).unsqueeze(0)));

  auto v = z.index({true});
  EXPECT_EQ(batch_of(v), (Shape{1}));
  EXPECT_TRUE(torch::equal(v.get("x"), z.get("x").unsqueeze(0)));

  auto w = z.index({None, Ellipsis, None});
  EXPECT_EQ(batch_of(w), (Shape{1, 1}));
  EXPECT_EQ(sizes_of(w.get("x")), (Shape{1, 1, 2}));
}

TEST(TensorDictIndex, TooManyIndicesIsAnIndexError) {
  auto t = make_fixture();
  OPS_EXPECT_THROW_MSG(t.index({0, 0, 0}), td::IndexError, "too many indices", "[4, 3]");
  OPS_EXPECT_THROW_MSG(t.index({0, Slice(), Slice(0, 1)}), td::IndexError, "too many indices");
  OPS_EXPECT_THROW_MSG(t.index({Slice(), torch::zeros({3, 2}, torch::kBool)}), td::IndexError);
  OPS_EXPECT_THROW_MSG(t.index({Ellipsis, 0, Ellipsis}), td::IndexError, "ellipsis");
}

TEST(TensorDictIndex, OutOfRangeIndicesAreIndexErrorsAndChangeNothing) {
  auto t = make_fixture();
  Frozen before = Frozen::of(t);
  OPS_EXPECT_THROW_MSG(t.index({4}), td::IndexError, "4");
  OPS_EXPECT_THROW_MSG(t.index({Slice(), 3}), td::IndexError, "3");
  OPS_EXPECT_THROW_MSG(t.index({torch::tensor({0, 4}, torch::kLong)}), td::IndexError, "4",
                       "size 4");
  OPS_EXPECT_THROW_MSG(t.index({torch::tensor({-5, 1}, torch::kLong)}), td::IndexError, "-5");
  OPS_EXPECT_THROW_MSG(t.index({torch::tensor({{0, 1}, {2, 9}}, torch::kLong)}), td::IndexError,
                       "9");
  OPS_EXPECT_THROW_MSG(t.index({Slice(), torch::tensor({0, 3}, torch::kLong)}), td::IndexError);
  before.expect_unchanged(t);
}

TEST(TensorDictIndex, MaskOfTheWrongShapeIsAnIndexError) {
  auto t = make_fixture();
  OPS_EXPECT_THROW_MSG(t.index({torch::ones({4, 2}, torch::kBool)}), td::IndexError, "[4, 2]",
                       "[4, 3]");
  OPS_EXPECT_THROW_MSG(t.index({torch::ones({3}, torch::kBool)}), td::IndexError, "[3]", "[4]");
  OPS_EXPECT_THROW_MSG(t.index({Slice(), torch::ones({4}, torch::kBool)}), td::IndexError, "[4]",
                       "[3]");
}

TEST(TensorDictIndex, MaskedSelectIsMaskIndexing) {
  auto t = make_fixture();
  auto mask = torch::tensor(
      {{true, false, true}, {false, false, false}, {true, true, false}, {false, true, true}});
  td::TensorDict r = t.masked_select(mask);
  expect_fixture_batches(r, {6});
  expect_leafwise(r, t,
                  [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.index({mask}); });
  auto rows = torch::tensor({false, true, true, false});
  td::TensorDict r1 = t.masked_select(rows);
  expect_fixture_batches(r1, {2, 3});
  OPS_EXPECT_THROW_MSG(t.masked_select(mask.to(torch::kLong)), td::TypeError, "bool");
  OPS_EXPECT_THROW_MSG(t.masked_select(torch::ones({2, 3}, torch::kBool)), td::IndexError,
                       "[2, 3]");
}

TEST(TensorDictIndex, EmptySelections) {
  auto t = make_fixture();
  auto none = t.index({torch::zeros({4, 3}, torch::kBool)});
  expect_fixture_batches(none, {0});
  EXPECT_EQ(sizes_of(none.get({"nested", "deeper", "f"})), (Shape{0, 2, 3}));
  auto empty_long = t.index({torch::empty({0}, torch::kLong)});
  expect_fixture_batches(empty_long, {0, 3});
  EXPECT_EQ(sizes_of(empty_long.get("a")), (Shape{0, 3, 2}));
}
