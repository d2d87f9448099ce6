// td.index_put_(idx, value) (Python's td[idx] = value), set_at_, get_at and
// update_at_: in-place writes with dtype casts and broadcasting, lazy
// pre-allocation of missing keys, and "check everything, then write".
#include "pch.h"

#include "support/ops_test_helpers.h"

#include <string>
#include <vector>

namespace td = tensordict;
using namespace torch::indexing;
using ops_test::batch_of;
using ops_test::expect_leafwise;
using ops_test::Frozen;
using ops_test::make_fixture;
using ops_test::Shape;
using ops_test::sizes_of;

namespace {

// Same structure, different values in every leaf (bools flipped).
td::TensorDictBase distinct(const td::TensorDictBase& src) {
  return src.apply([](const at::Tensor& x) {
    if (x.scalar_type() == torch::kBool) return x.logical_not();
    if (x.is_floating_point()) return x * 10 + 0.25;
    return x * 10 + 1;
  });
}

struct PutCase {
  std::string name;
  std::vector<TensorIndex> idx;
  std::vector<TensorIndex> leaf_idx;
};

std::vector<PutCase> put_cases() {
  auto mask2 = torch::tensor(
      {{true, false, true}, {false, false, false}, {true, true, false}, {false, true, true}});
  auto mask1 = torch::tensor({false, true, false, true});
  auto rows = torch::tensor({3, 0}, torch::kLong);
  auto rows2 = torch::tensor({{3, 0}, {1, 2}}, torch::kLong);
  auto cols = torch::tensor({2, 0}, torch::kLong);
  return {
      {"int", {1}, {1}},
      {"negative int", {-2}, {-2}},
      {"two ints", {2, 1}, {2, 1}},
      {"slice", {Slice(1, 3)}, {Slice(1, 3)}},
      {"strided slice on dim 1", {Slice(), Slice(None, None, 2)}, {Slice(), Slice(None, None, 2)}},
      {"Ellipsis", {Ellipsis, 2}, {Slice(), 2}},
      {"None", {None, 1}, {None, 1}},
      {"long 1-D", {rows}, {rows}},
      {"long 2-D", {rows2}, {rows2}},
      {"long on dim 1", {Slice(), cols}, {Slice(), cols}},
      {"full mask", {mask2}, {mask2}},
      {"partial mask", {mask1}, {mask1}},
  };
}

// leaf with value written at leaf_idx, cast to the leaf's dtype.
at::Tensor put_by_hand(const at::Tensor& leaf, const std::vector<TensorIndex>& idx,
                       const at::Tensor& value) {
  at::Tensor out = leaf.clone();
  out.index_put_(idx, value.to(leaf.scalar_type()));
  return out;
}

}  // namespace

TEST(TensorDictIndexPut, TensorDictValueAtEveryIndexFormIsWrittenInPlace) {
  for (const auto& c : put_cases()) {
    SCOPED_TRACE(c.name);
    auto t = make_fixture();
    auto before = t.clone();
    Frozen identity = Frozen::of(t);
    auto value = distinct(t.index(c.idx));
    ASSERT_EQ(batch_of(value), sizes_of(torch::zeros({4, 3}).index(c.idx)));
    td::TensorDictBase& ret = t.index_put_(c.idx, value);
    EXPECT_EQ(&ret, static_cast<td::TensorDictBase*>(&t));
    expect_leafwise(t, before, [&](const at::Tensor& leaf, const td::NestedKey& k) {
      return put_by_hand(leaf, c.leaf_idx, value.get(k));
    });
    // In place: the same tensor objects are still stored.
    for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
    EXPECT_EQ(t.keys(true), identity.keys);
    EXPECT_EQ(batch_of(t.get_tensordict({"nested", "deeper"})), (Shape{4, 3, 2}));
  }
}

TEST(TensorDictIndexPut, ValuesAreCastToTheDestinationDtype) {
  auto t = make_fixture();
  auto before = t.clone();
  td::TensorDict value({{"b", torch::full({3}, 2.7)},                     // float -> int64
                        {"c", torch::tensor({0, 5, 0}).reshape({3, 1})},  // int -> bool
                        {"a", torch::full({3, 2}, 7, torch::kLong)}},     // int -> float
                       {3});
  t.index_put_({2}, value);
  EXPECT_EQ(t.get("b").scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(t.get("b")[2], torch::full({3}, 2, torch::kLong)));
  EXPECT_EQ(t.get("c").scalar_type(), torch::kBool);
  EXPECT_TRUE(torch::equal(t.get("c")[2], torch::tensor({false, true, false}).reshape({3, 1})));
  EXPECT_EQ(t.get("a").scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(t.get("a")[2], torch::full({3, 2}, 7.0)));
  // Other rows and the keys absent from the value are untouched.
  for (const auto& k : ops_test::fixture_leaves()) {
    for (int64_t r : {0, 1, 3})
      EXPECT_TRUE(torch::equal(t.get(k)[r], before.get(k)[r])) << k << " row " << r;
  }
  EXPECT_TRUE(torch::equal(t.get({"nested", "d"}), before.get({"nested", "d"})));
}

TEST(TensorDictIndexPut, ValueWhoseBatchIsASuffixIsBroadcast) {
  auto t = make_fixture();
  auto before = t.clone();
  auto row = distinct(t[0]);  // batch [3]
  t.index_put_({Slice(1, 3)}, row);
  expect_leafwise(t, before, [&](const at::Tensor& leaf, const td::NestedKey& k) {
    at::Tensor out = leaf.clone();
    out.index_put_({Slice(1, 3)},
                   row.get(k).to(leaf.scalar_type()).expand_as(out.index({Slice(1, 3)})));
    return out;
  });
  // Broadcast over a mask: every selected row gets the same value.
  auto t2 = make_fixture();
  auto mask = torch::tensor({true, false, true, true});
  t2.index_put_({mask}, row);
  for (int64_t r : {0, 2, 3})
    EXPECT_TRUE(
        torch::equal(t2.get({"nested", "deeper", "f"})[r], row.get({"nested", "deeper", "f"})));
  EXPECT_TRUE(
      torch::equal(t2.get({"nested", "deeper", "f"})[1], before.get({"nested", "deeper", "f"})[1]));
  // A value of batch [3] broadcast over the whole batch [4, 3] (Ellipsis).
  auto t3 = make_fixture();
  t3.index_put_({Ellipsis}, row);
  for (int64_t r = 0; r < 4; ++r) EXPECT_TRUE(torch::equal(t3.get("a")[r], row.get("a"))) << r;
}

TEST(TensorDictIndexPut, EmptyValueBatchIsResetWhenTheLeavesFit) {
  // Python: value.batch_size [] is not a "suffix" of the indexed batch; the
  // value is copied and its batch size set to the indexed one.
  auto t = make_fixture();
  auto before = t.clone();
  td::TensorDict deeper({{"e", torch::full({3, 2}, 9.0, torch::kDouble)}}, {3, 2});
  td::TensorDict nested({{"d", torch::full({3, 5}, 8.0)}, {"deeper", deeper}}, {});
  td::TensorDict value({{"a", torch::full({3, 2}, 5.0)},
                        {"b", torch::tensor({1, 2, 3}, torch::kLong)},
                        {"nested", nested}},
                       {});
  t.index_put_({0}, value);
  EXPECT_TRUE(torch::equal(t.get("a")[0], torch::full({3, 2}, 5.0)));
  EXPECT_TRUE(torch::equal(t.get("b")[0], torch::tensor({1, 2, 3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(t.get({"nested", "d"})[0], torch::full({3, 5}, 8.0)));
  EXPECT_TRUE(
      torch::equal(t.get({"nested", "deeper", "e"})[0], torch::full({3, 2}, 9.0, torch::kDouble)));
  EXPECT_TRUE(torch::equal(t.get("a")[1], before.get("a")[1]));
  EXPECT_TRUE(torch::equal(t.get("c"), before.get("c")));
  EXPECT_EQ(batch_of(value), (Shape{}));  // the value itself is not modified
}

TEST(TensorDictIndexPut, IncompatibleValueBatchIsAShapeErrorAndWritesNothing) {
  auto t = make_fixture();
  Frozen before = Frozen::of(t);
  // batch [2] is neither the indexed batch [3] nor a suffix of it, and its
  // leaves do not start with [3].
  td::TensorDict value({{"a", torch::zeros({2, 2})}}, {2});
  OPS_EXPECT_THROW_MSG(t.index_put_({0}, value), td::ShapeError, "indexed destination", "differs",
                       "[3]", "[2]");
  // Whole batch into one row.
  OPS_EXPECT_THROW_MSG(t.index_put_({Slice(), Slice(0, 2)}, make_fixture()), td::ShapeError,
                       "indexed destination", "[4, 2]", "[4, 3]");
  before.expect_unchanged(t);
}

TEST(TensorDictIndexPut, LazyPreallocationCreatesZerosWithTheValueDtype) {
  td::TensorDict buf({}, {10});
  td::TensorDict deep({{"z", torch::arange(8, torch::kInt).reshape({4, 2})}}, {4});
  td::TensorDict n({{"m", torch::tensor({1.5, -2.5}, torch::kDouble)}, {"deep", deep}}, {});
  td::TensorDict row({{"obs", torch::arange(5, torch::kFloat) + 1},
                      {"step", torch::tensor(7, torch::kLong)},
                      {"flag", torch::tensor({true})},
                      {"n", n},
                      {"label", "hello"}},
                     {});
  buf.index_put_({3}, row);

  EXPECT_EQ(buf.keys(), (ops_test::Keys{"obs", "step", "flag", "n", "label"}));
  auto expect_prealloc = [&](const td::NestedKey& k, const Shape& shape) {
    SCOPED_TRACE(k.repr());
    at::Tensor leaf = buf.get(k);
    at::Tensor v = row.get(k);
    EXPECT_EQ(sizes_of(leaf), shape);
    EXPECT_EQ(leaf.scalar_type(), v.scalar_type());
    at::Tensor expected = torch::zeros(shape, v.options());
    expected[3] = v;
    EXPECT_TRUE(torch::equal(leaf, expected));
  };
  expect_prealloc("obs", {10, 5});
  expect_prealloc("step", {10});
  expect_prealloc("flag", {10, 1});
  expect_prealloc({"n", "m"}, {10, 2});
  expect_prealloc({"n", "deep", "z"}, {10, 4, 2});
  EXPECT_EQ(batch_of(buf.get_tensordict("n")), (Shape{10}));
  EXPECT_EQ(batch_of(buf.get_tensordict({"n", "deep"})), (Shape{10, 4}));
  // The non-tensor's first write spans the whole batch.
  EXPECT_EQ(buf.get_non_tensor("label"), nlohmann::json("hello"));
  EXPECT_EQ(buf.at("label").non_tensor().batch_size().vec(), (Shape{10}));
  EXPECT_EQ(batch_of(buf), (Shape{10}));

  // A second write keeps the first dtype (double -> float) and row 3.
  td::TensorDict row2(
      {{"obs", torch::full({5}, 0.5, torch::kDouble)}, {"step", torch::tensor(9, torch::kLong)}},
      {});
  buf.index_put_({7}, row2);
  EXPECT_EQ(buf.get("obs").scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(buf.get("obs")[7], torch::full({5}, 0.5)));
  EXPECT_TRUE(torch::equal(buf.get("obs")[3], torch::arange(5, torch::kFloat) + 1));
  EXPECT_EQ(buf.get("step")[7].item<int64_t>(), 9);
  EXPECT_EQ(buf.get("step")[3].item<int64_t>(), 7);
  EXPECT_EQ(buf.get("step").sum().item<int64_t>(), 16);

  // The same non-tensor value again keeps one value; a different one makes
  // the entry a NonTensorStack (test_non_tensor_stack.cpp has more).
  buf.index_put_({1}, td::TensorDict({{"label", "hello"}}, {}));
  EXPECT_EQ(buf.entry_kind("label"), td::EntryKind::NonTensor);
  buf.index_put_({1}, td::TensorDict({{"obs", torch::ones({5})}, {"label", "bye"}}, {}));
  ASSERT_EQ(buf.entry_kind("label"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(buf[1].get_non_tensor("label"), "bye");
  EXPECT_EQ(buf[0].get_non_tensor("label"), "hello");
}

TEST(TensorDictIndexPut, PreallocationWithSliceMaskAndLongIndices) {
  td::TensorDict buf({}, {6});
  auto v = torch::arange(6, torch::kFloat).reshape({3, 2});
  buf.index_put_({Slice(1, 4)}, td::TensorDict({{"x", v}}, {3}));
  auto expected = torch::zeros({6, 2});
  expected.index_put_({Slice(1, 4)}, v);
  EXPECT_TRUE(torch::equal(buf.get("x"), expected));

  auto mask = torch::tensor({true, false, false, false, true, true});
  buf.index_put_({mask}, td::TensorDict({{"y", torch::tensor({1, 2, 3}, torch::kInt)}}, {3}));
  EXPECT_TRUE(torch::equal(buf.get("y"), torch::tensor({1, 0, 0, 0, 2, 3}, torch::kInt)));

  buf.index_put_({torch::tensor({5, 0}, torch::kLong)},
                 td::TensorDict({{"w", torch::tensor({true, true})}}, {2}));
  EXPECT_TRUE(torch::equal(buf.get("w"), torch::tensor({true, false, false, false, false, true})));
}

// Python's test_tensordict_prealloc_nested, adapted: a buffer of batch [B, N]
// receives values of batch [N] holding a nested tensordict of batch [N, T].
TEST(TensorDictIndexPut, PreallocationOfNestedTensorDictsKeepsTheirExtraDims) {
  const int64_t N = 3, B = 5, T = 4;
  td::TensorDict buffer({}, {B, N});
  auto make_value = [&](double base) {
    td::TensorDict obs({{"image", torch::rand({N, T, 8}) + base}}, {N, T});
    return td::TensorDict({{"env.time", torch::rand({N, 1}) + base}, {"agent.obs", obs}}, {N});
  };
  auto td0 = make_value(0.0);
  auto td1 = make_value(10.0);
  buffer.index_put_({0}, td0);
  buffer.index_put_({1}, td1);
  EXPECT_EQ(batch_of(buffer.get_tensordict("agent.obs")), (Shape{B, N, T}));
  EXPECT_EQ(sizes_of(buffer.get({"agent.obs", "image"})), (Shape{B, N, T, 8}));
  EXPECT_EQ(sizes_of(buffer.get("env.time")), (Shape{B, N, 1}));
  EXPECT_TRUE(torch::equal(buffer.get({"agent.obs", "image"})[0], td0.get({"agent.obs", "image"})));
  EXPECT_TRUE(torch::equal(buffer.get({"agent.obs", "image"})[1], td1.get({"agent.obs", "image"})));
  EXPECT_TRUE(torch::equal(buffer.get("env.time")[1], td1.get("env.time")));
  EXPECT_EQ(buffer.get({"agent.obs", "image"}).index({Slice(2, None)}).abs().sum().item<float>(),
            0.f);
  // Indexing the buffer gives back the values.
  EXPECT_TRUE(buffer[1].get_tensordict("agent.obs").batch_size().equals({N, T}));
  EXPECT_TRUE(buffer[0].equal(td0));
}

TEST(TensorDictIndexPut, PreallocationInsideAnExistingNestedTensorDict) {
  td::TensorDict buf({}, {10});
  buf.create_nested("n");
  buf.set({"n", "deep"}, td::TensorDict({}, {10, 4}));
  td::TensorDict deep({{"z", torch::ones({4, 2}, torch::kInt)}}, {4});
  td::TensorDict value({{"n", td::TensorDict({{"m", torch::ones({2})}, {"deep", deep}}, {})}}, {});
  buf.index_put_({Slice(2, 3)}, value.unsqueeze(0));
  EXPECT_EQ(sizes_of(buf.get({"n", "m"})), (Shape{10, 2}));
  EXPECT_EQ(sizes_of(buf.get({"n", "deep", "z"})), (Shape{10, 4, 2}));
  EXPECT_EQ(batch_of(buf.get_tensordict({"n", "deep"})), (Shape{10, 4}));
  EXPECT_EQ(buf.get({"n", "deep", "z"}).sum().item<int64_t>(), 8);
  EXPECT_TRUE(torch::equal(buf.get({"n", "deep", "z"})[2], torch::ones({4, 2}, torch::kInt)));
}

TEST(TensorDictIndexPut, PreallocationOfTensorDictsNestedInTensorDictsWithExtraDims) {
  // value (batch []) -> n (batch [2]) -> m (batch [2, 3]) -> leaf [2, 3, 4]
  td::TensorDict m({{"leaf", torch::arange(24, torch::kFloat).reshape({2, 3, 4})}}, {2, 3});
  td::TensorDict n({{"m", m}, {"w", torch::ones({2, 5})}}, {2});
  td::TensorDict value({{"n", n}}, {});
  td::TensorDict buf({}, {6});
  buf.index_put_({4}, value);
  EXPECT_EQ(batch_of(buf.get_tensordict("n")), (Shape{6, 2}));
  EXPECT_EQ(batch_of(buf.get_tensordict({"n", "m"})), (Shape{6, 2, 3}));
  EXPECT_EQ(sizes_of(buf.get({"n", "m", "leaf"})), (Shape{6, 2, 3, 4}));
  EXPECT_EQ(sizes_of(buf.get({"n", "w"})), (Shape{6, 2, 5}));
  EXPECT_TRUE(torch::equal(buf.get({"n", "m", "leaf"})[4], m.get("leaf")));
  EXPECT_EQ(buf.get({"n", "m", "leaf"}).index({Slice(0, 4)}).abs().sum().item<float>(), 0.f);
  EXPECT_TRUE(buf[4].equal(value));
}

TEST(TensorDictIndexPut, KeysAbsentFromTheValueAreUntouched) {
  auto t = make_fixture();
  auto before = t.clone();
  td::TensorDict value({{"nested", td::TensorDict({{"d", torch::zeros({2, 3, 5})}}, {2, 3})}},
                       {2, 3});
  t.index_put_({Slice(0, 2)}, value);
  EXPECT_TRUE(torch::equal(t.get({"nested", "d"}).index({Slice(0, 2)}), torch::zeros({2, 3, 5})));
  EXPECT_TRUE(torch::equal(t.get({"nested", "d"}).index({Slice(2, None)}),
                           before.get({"nested", "d"}).index({Slice(2, None)})));
  for (const td::NestedKey& k :
       {td::NestedKey("a"), td::NestedKey("b"), td::NestedKey("c"),
        td::NestedKey{"nested", "deeper", "e"}, td::NestedKey{"nested", "deeper", "f"}})
    EXPECT_TRUE(torch::equal(t.get(k), before.get(k))) << k;
  EXPECT_EQ(t.keys(true), before.keys(true));
}

TEST(TensorDictIndexPut, ChainedWriteThroughABasicIndexReachesTheSource) {
  auto t = make_fixture();
  auto before = t.clone();
  auto value = distinct(t.index({1, 2}));  // batch []
  t[1].index_put_({2}, value);             // t[1] is a view: the write lands in t
  expect_leafwise(t, before, [&](const at::Tensor& leaf, const td::NestedKey& k) {
    return put_by_hand(leaf, {1, 2}, value.get(k));
  });
  // Through an advanced index the write is lost (a copy), as in Python.
  auto again = t.clone();
  t.index({torch::tensor({1}, torch::kLong)}).index_put_({0}, distinct(t[1]));
  EXPECT_TRUE(t.equal(again));
}

TEST(TensorDictIndexPut, LockedTensorDictAcceptsExistingKeysOnly) {
  auto t = make_fixture();
  t.lock_();
  auto value = distinct(t[1]);
  t.index_put_({1}, value);  // existing keys: allowed
  EXPECT_TRUE(
      torch::equal(t.get({"nested", "deeper", "f"})[1], value.get({"nested", "deeper", "f"})));
  EXPECT_TRUE(t.is_locked());

  Frozen before = Frozen::of(t);
  // "a" comes first and is valid; "zzz" is new: nothing may be written.
  td::TensorDict with_new({{"a", torch::full({3, 2}, 123.0)}, {"zzz", torch::ones({3})}}, {3});
  OPS_EXPECT_THROW_MSG(t.index_put_({2}, with_new), td::LockedError, "zzz");
  before.expect_unchanged(t);

  td::TensorDict nested_new(
      {{"a", torch::full({3, 2}, 123.0)},
       {"nested",
        td::TensorDict({{"d", torch::zeros({3, 5})}, {"fresh", torch::zeros({3})}}, {3})}},
      {3});
  OPS_EXPECT_THROW_MSG(t.index_put_({2}, nested_new), td::LockedError, "fresh");
  before.expect_unchanged(t);

  OPS_EXPECT_THROW_MSG(t.index_put_({2}, td::TensorDict({{"label2", "y"}}, {3})), td::LockedError,
                       "label2");
  before.expect_unchanged(t);
}

TEST(TensorDictIndexPut, WrongLeafShapeIsAShapeErrorAndWritesNothing) {
  auto t = make_fixture();
  Frozen before = Frozen::of(t);
  auto value = distinct(t[1]);
  // The last leaf in order is wrong: every earlier one must stay untouched.
  value.get_tensordict({"nested", "deeper"}).set("f", torch::zeros({3, 2, 4}, torch::kInt));
  OPS_EXPECT_THROW_MSG(t.index_put_({1}, value), td::ShapeError, "('nested', 'deeper', 'f')",
                       "[3, 2, 4]", "[3, 2, 3]");
  before.expect_unchanged(t);

  // A tensor where the destination holds a tensordict.
  td::TensorDict kind_clash({{"a", torch::zeros({3, 2})}, {"nested", torch::zeros({3})}}, {3});
  OPS_EXPECT_THROW_MSG(t.index_put_({1}, kind_clash), td::TypeError, "nested");
  before.expect_unchanged(t);

  // A new key with a value that cannot be pre-allocated is checked first too.
  td::TensorDict late_bad({{"new", torch::ones({3})}, {"b", torch::ones({3, 7})}}, {3});
  OPS_EXPECT_THROW_MSG(t.index_put_({1}, late_bad), td::ShapeError, "'b'", "[3, 7]");
  before.expect_unchanged(t);
  EXPECT_FALSE(t.contains("new"));
}

TEST(TensorDictIndexPut, BadIndexWritesNothing) {
  auto t = make_fixture();
  Frozen before = Frozen::of(t);
  auto value = distinct(t.index({torch::tensor({0, 1}, torch::kLong)}));
  OPS_EXPECT_THROW_MSG(t.index_put_({torch::tensor({0, 4}, torch::kLong)}, value), td::IndexError,
                       "4");
  OPS_EXPECT_THROW_MSG(t.index_put_({torch::ones({4, 2}, torch::kBool)}, value), td::IndexError,
                       "[4, 2]");
  OPS_EXPECT_THROW_MSG(t.index_put_({0, 0, 0}, value), td::IndexError, "too many");
  OPS_EXPECT_THROW_MSG(t.index_put_({torch::tensor({0, 4}, torch::kLong)}, 1.0), td::IndexError);
  before.expect_unchanged(t);

  td::TensorDict z({{"x", torch::zeros({2})}}, {});
  OPS_EXPECT_THROW_MSG(z.index_put_({0}, td::TensorDict({{"x", torch::ones({})}}, {})),
                       td::IndexError, "batch_dims==0");
  OPS_EXPECT_THROW_MSG(z.index_put_({0}, 1), td::IndexError, "batch_dims==0");
}

TEST(TensorDictIndexPut, TensorValueIsWrittenIntoEveryLeaf) {
  auto t = make_fixture();
  auto before = t.clone();
  auto v = torch::tensor({5.5});  // shape [1] broadcasts into every leaf at row 1
  t.index_put_({1}, v);
  expect_leafwise(t, before, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return put_by_hand(leaf, {1}, v);
  });
  EXPECT_EQ(t.get("b")[1][0].item<int64_t>(), 5);
  EXPECT_TRUE(t.get("c")[1].all().item<bool>());
  EXPECT_EQ(t.get_non_tensor("label"), nlohmann::json("x"));

  // A mask and a 0-dim tensor.
  auto mask = torch::tensor(
      {{true, false, false}, {false, false, true}, {false, false, false}, {true, true, true}});
  auto before2 = t.clone();
  auto zero = torch::tensor(0, torch::kLong);
  t.index_put_({mask}, zero);
  expect_leafwise(t, before2, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return put_by_hand(leaf, {mask}, zero);
  });

  // A shape that does not fit one leaf: nothing is written.
  Frozen frozen = Frozen::of(t);
  OPS_EXPECT_THROW_MSG(t.index_put_({1}, torch::ones({2})), td::ShapeError, "[2]");
  OPS_EXPECT_THROW_MSG(t.index_put_({1}, torch::ones({3, 5})), td::ShapeError, "[3, 5]");
  frozen.expect_unchanged(t);
}

TEST(TensorDictIndexPut, ScalarValueIsWrittenIntoEveryLeaf) {
  auto t = make_fixture();
  auto before = t.clone();
  t.index_put_({Slice(), 0}, 3);
  expect_leafwise(t, before, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return put_by_hand(leaf, {Slice(), 0}, torch::tensor(3));
  });
  auto before2 = t.clone();
  t.index_put_({Ellipsis, 2}, 0.75);  // cast: 0 in int leaves, true in bool ones
  expect_leafwise(t, before2, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return put_by_hand(leaf, {Slice(), 2}, torch::tensor(0.75, torch::kDouble));
  });
  EXPECT_TRUE(torch::equal(t.get("b").index({Slice(), 2}), torch::zeros({4}, torch::kLong)));
  EXPECT_TRUE(t.get("c").index({Slice(), 2}).all().item<bool>());
  t.index_put_({0}, false);
  EXPECT_EQ(t.get("a")[0].abs().sum().item<float>(), 0.f);
  EXPECT_FALSE(t.get("c")[0].any().item<bool>());
  // Locked tensordicts accept scalar writes.
  t.lock_();
  t.index_put_({3}, -1);
  EXPECT_TRUE(
      torch::equal(t.get({"nested", "deeper", "f"})[3], torch::full({3, 2, 3}, -1, torch::kInt)));
}

// ---- set_at_ / get_at / update_at_ ---------------------------------------------

TEST(TensorDictIndexPut, GetAtReadsOneLeafAtAnIndex) {
  auto t = make_fixture();
  EXPECT_TRUE(torch::equal(t.get_at({"nested", "deeper", "e"}, {Slice(), 1}),
                           t.get({"nested", "deeper", "e"}).index({Slice(), 1})));
  auto mask = torch::tensor({true, false, true, false});
  EXPECT_TRUE(torch::equal(t.get_at("a", {mask}), t.get("a").index({mask})));
  EXPECT_TRUE(torch::equal(t.get_at("b", {Ellipsis, 0}), t.get("b").index({Slice(), 0})));
  OPS_EXPECT_THROW_MSG(t.get_at("zzz", {0}), td::KeyError, "zzz");
  OPS_EXPECT_THROW_MSG(t.get_at({"nested", "zzz"}, {0}), td::KeyError, "zzz");
  OPS_EXPECT_THROW_MSG(t.get_at("label", {0}), td::TypeError, "label");
  OPS_EXPECT_THROW_MSG(t.get_at("a", {7}), td::IndexError);
}

TEST(TensorDictIndexPut, SetAtWritesOneLeafInPlace) {
  auto t = make_fixture();
  auto before = t.clone();
  auto d = t.get({"nested", "d"});
  t.set_at_({"nested", "d"}, torch::full({5}, 4, torch::kLong), {1, 2});
  EXPECT_TRUE(t.get({"nested", "d"}).is_same(d));
  auto expected = before.get({"nested", "d"}).clone();
  expected.index_put_({1, 2}, torch::full({5}, 4.0));
  EXPECT_TRUE(torch::equal(t.get({"nested", "d"}), expected));
  EXPECT_TRUE(torch::equal(t.get("a"), before.get("a")));
  // Broadcast over the indexed rows, Ellipsis over the batch dims.
  t.set_at_({"nested", "deeper", "f"}, torch::tensor({1, 2, 3}, torch::kInt), {Ellipsis, 0});
  EXPECT_TRUE(torch::equal(t.get({"nested", "deeper", "f"}).index({Slice(), 0}),
                           torch::tensor({1, 2, 3}, torch::kInt).expand({4, 2, 3})));
  // Allowed on a locked tensordict.
  t.lock_();
  t.set_at_("b", torch::tensor(-9), {0, 0});
  EXPECT_EQ(t.get("b")[0][0].item<int64_t>(), -9);

  Frozen frozen = Frozen::of(t);
  OPS_EXPECT_THROW_MSG(t.set_at_("zzz", torch::ones({3}), {0}), td::KeyError, "zzz");
  OPS_EXPECT_THROW_MSG(t.set_at_({"nested", "zzz"}, torch::ones({3}), {0}), td::KeyError, "zzz");
  OPS_EXPECT_THROW_MSG(t.set_at_("a", torch::ones({3, 3}), {0}), td::ShapeError, "'a'", "[3, 3]");
  OPS_EXPECT_THROW_MSG(t.set_at_("label", torch::ones({3}), {0}), td::TypeError, "label");
  OPS_EXPECT_THROW_MSG(t.set_at_("a", torch::ones({3, 2}), {9}), td::IndexError);
  frozen.expect_unchanged(t);
}

TEST(TensorDictIndexPut, UpdateAtWritesExistingKeysOnly) {
  auto t = make_fixture();
  auto before = t.clone();
  td::TensorDict other({{"a", torch::full({3, 2}, 1.5)},
                        {"nested", td::TensorDict({{"d", torch::full({3, 5}, -1.0)}}, {3})}},
                       {3});
  t.update_at_(other, {2});
  EXPECT_TRUE(torch::equal(t.get("a")[2], torch::full({3, 2}, 1.5)));
  EXPECT_TRUE(torch::equal(t.get({"nested", "d"})[2], torch::full({3, 5}, -1.0)));
  EXPECT_TRUE(torch::equal(t.get("a")[1], before.get("a")[1]));
  EXPECT_TRUE(torch::equal(t.get("b"), before.get("b")));

  // keys_to_update restricts the write.
  td::TensorDict other2(
      {{"a", torch::full({3, 2}, 2.5)}, {"b", torch::full({3}, 42, torch::kLong)}}, {3});
  t.update_at_(other2, {0}, {"b"});
  EXPECT_TRUE(torch::equal(t.get("b")[0], torch::full({3}, 42, torch::kLong)));
  EXPECT_TRUE(torch::equal(t.get("a")[0], before.get("a")[0]));

  // Locked: fine for existing keys.
  t.lock_();
  t.update_at_(other2, {Slice(3, 4)});
  EXPECT_TRUE(torch::equal(t.get("a")[3], torch::full({3, 2}, 2.5)));

  // A missing key is a KeyError and nothing is written (even "a", first in order).
  Frozen frozen = Frozen::of(t);
  td::TensorDict missing({{"a", torch::full({3, 2}, 77.0)}, {"zzz", torch::ones({3})}}, {3});
  OPS_EXPECT_THROW_MSG(t.update_at_(missing, {1}), td::KeyError, "zzz");
  td::TensorDict nested_missing({{"a", torch::full({3, 2}, 77.0)},
                                 {"nested", td::TensorDict({{"zzz", torch::ones({3})}}, {3})}},
                                {3});
  OPS_EXPECT_THROW_MSG(t.update_at_(nested_missing, {1}), td::KeyError, "zzz");
  t.unlock_();
  OPS_EXPECT_THROW_MSG(t.update_at_(missing, {1}), td::KeyError, "zzz");
  frozen.expect_unchanged(t);
  EXPECT_FALSE(t.contains("zzz"));
}

// A row or a block of rows of contiguous leaves is written with one memmove
// (see put_rows_by_memmove); these cover its conditions and its fallbacks.
TEST(TensorDictIndexPut, RowAndBlockWritesOfContiguousLeavesMatchTorch) {
  td::TensorDict dst({{"img", torch::zeros({6, 2, 3}, torch::kUInt8)},
                      {"r", torch::zeros({6})},
                      {"one", torch::zeros({6, 1, 1})}},  // size-1 dims: any stride is contiguous
                     {6});
  at::Tensor img = torch::arange(6, torch::kUInt8).view({1, 2, 3});
  td::TensorDict row({{"img", img[0]}, {"r", torch::tensor(2.5f)}, {"one", torch::ones({1, 1})}},
                     {});
  const auto version = dst.get("img")._version();
  dst.index_put_({-2}, row);  // negative: resolved to row 4
  EXPECT_TRUE(torch::equal(dst.get("img")[4], img[0]));
  EXPECT_TRUE(dst.get("img")[3].eq(0).all().item<bool>());
  EXPECT_TRUE(dst.get("img")[5].eq(0).all().item<bool>());
  EXPECT_EQ(dst.get("r")[4].item<float>(), 2.5f);
  EXPECT_EQ(dst.get("one")[4].item<float>(), 1.0f);
  EXPECT_GT(dst.get("img")._version(), version);  // autograd's version counter moved

  td::TensorDict block({{"img", torch::full({2, 2, 3}, 7, torch::kUInt8)},
                        {"r", torch::tensor({1.0f, 2.0f})},
                        {"one", torch::full({2, 1, 1}, 3.0f)}},
                       {2});
  dst.index_put_({Slice(1, 3)}, block);
  EXPECT_TRUE(dst.get("img").slice(0, 1, 3).eq(7).all().item<bool>());
  EXPECT_TRUE(torch::equal(dst.get("r"), torch::tensor({0.0f, 1.0f, 2.0f, 0.0f, 2.5f, 0.0f})));
  EXPECT_TRUE(dst.get("img")[0].eq(0).all().item<bool>());
  EXPECT_TRUE(torch::equal(dst.get("img")[4], img[0]));
}

TEST(TensorDictIndexPut, RowWritesFallBackForStridedBroadcastAndCastValues) {
  td::TensorDict dst({{"x", torch::zeros({4, 3})}}, {4});
  // A non-contiguous value (a column of a transposed tensor).
  at::Tensor t = torch::arange(12, torch::kFloat).view({3, 4}).t();
  dst.index_put_({1}, td::TensorDict({{"x", t[2]}}, {}));
  EXPECT_TRUE(torch::equal(dst.get("x")[1], torch::tensor({2.0f, 6.0f, 10.0f})));
  // A broadcast value (rows of shape [1] into [3]) and a cast value (int into float).
  dst.index_put_({Slice(2, 4)}, td::TensorDict({{"x", torch::full({2, 1}, 5.0f)}}, {2}));
  EXPECT_TRUE(dst.get("x").slice(0, 2, 4).eq(5).all().item<bool>());
  dst.index_put_({0}, td::TensorDict({{"x", torch::tensor({1, 2, 3})}}, {}));
  EXPECT_TRUE(torch::equal(dst.get("x")[0], torch::tensor({1.0f, 2.0f, 3.0f})));
  // A step slice is not one block.
  dst.index_put_({Slice(0, 4, 2)}, td::TensorDict({{"x", torch::full({2, 3}, 9.0f)}}, {2}));
  EXPECT_TRUE(dst.get("x")[0].eq(9).all().item<bool>());
  EXPECT_TRUE(dst.get("x")[2].eq(9).all().item<bool>());
  EXPECT_TRUE(torch::equal(dst.get("x")[1], torch::tensor({2.0f, 6.0f, 10.0f})));
}

TEST(TensorDictIndexPut, RowWriteIntoALeafThatRequiresGradKeepsTorchsError) {
  td::TensorDict dst({{"w", torch::zeros({3, 2}).requires_grad_()}}, {3});
  // torch refuses an in-place write into a leaf that requires grad; so must we.
  EXPECT_ANY_THROW(dst.index_put_({0}, td::TensorDict({{"w", torch::ones({2})}}, {})));
  EXPECT_TRUE(dst.get("w").eq(0).all().item<bool>());
}
