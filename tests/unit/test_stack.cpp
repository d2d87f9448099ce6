// Dense stack and cat: values equal torch::stack / torch::cat per leaf, nested
// tensordicts (with extra batch dims) included; every mismatch is an error
// naming what differs.
#include "pch.h"

#include "support/ops_test_helpers.h"

#include <tensordict/stack.h>

#include <string>
#include <vector>

namespace td = tensordict;
using namespace torch::indexing;
using ops_test::batch_of;
using ops_test::expect_fixture_batches;
using ops_test::expect_leafwise;
using ops_test::make_fixture;
using ops_test::Shape;
using ops_test::sizes_of;

namespace {

// A second fixture with the same structure and other values.
td::TensorDictBase other_fixture(double shift) {
  return make_fixture().apply([shift](const at::Tensor& x) {
    if (x.scalar_type() == torch::kBool) return x.logical_not();
    return (x + shift).to(x.scalar_type());
  });
}

}  // namespace

TEST(TensorDictStack, DenseStackAtEveryDimMatchesTorchStack) {
  auto t0 = make_fixture();
  auto t1 = other_fixture(100);
  auto t2 = other_fixture(-50);
  std::vector<td::TensorDictBase> tds = {t0, t1, t2};
  for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
    SCOPED_TRACE(dim);
    int64_t d = dim < 0 ? dim + 3 : dim;  // relative to the root batch [4, 3] + 1
    Shape target = {4, 3};
    target.insert(target.begin() + d, 3);
    td::TensorDict s = td::stack(tds, dim);
    expect_fixture_batches(s, target);
    expect_leafwise(s, t0, [&](const at::Tensor&, const td::NestedKey& k) {
      return torch::stack({t0.get(k), t1.get(k), t2.get(k)}, d);
    });
    // The stack is a copy.
    EXPECT_FALSE(s.get("a").is_alias_of(t0.get("a")));
    EXPECT_FALSE(s.is_locked());
    // Indexing the stacked dim gives back each input.
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<TensorIndex> idx(static_cast<std::size_t>(d), Slice());
      idx.emplace_back(i);
      EXPECT_TRUE(s.index(idx).equal(tds[i])) << "input " << i;
    }
  }
  OPS_EXPECT_THROW_MSG(td::stack(tds, 3), td::IndexError, "3");
  OPS_EXPECT_THROW_MSG(td::stack(tds, -4), td::IndexError, "-4");
}

TEST(TensorDictStack, StackAndCatOfLockedInputsAreUnlockedCopies) {
  auto t0 = make_fixture();
  auto t1 = other_fixture(3);
  t0.lock_();
  t1.lock_();
  td::TensorDict s = td::stack({t0, t1});
  EXPECT_FALSE(s.is_locked());
  EXPECT_FALSE(s.get_tensordict({"nested", "deeper"}).is_locked());
  s.set("new", torch::zeros({2, 4, 3}));
  td::TensorDict c = td::cat({t0, t1});
  EXPECT_FALSE(c.is_locked());
  expect_fixture_batches(c, {8, 3});
}

TEST(TensorDictStack, StackOfOneAndOfZeroDimTensorDicts) {
  auto t = make_fixture();
  td::TensorDict one = td::stack({t}, 0);
  expect_fixture_batches(one, {1, 4, 3});
  EXPECT_TRUE(one[0].equal(t));

  td::TensorDict a({{"x", torch::tensor({1.0, 2.0})}, {"s", "tag"}}, {});
  td::TensorDict b({{"x", torch::tensor({3.0, 4.0})}, {"s", "tag"}}, {});
  td::TensorDict s = td::stack({a, b});
  EXPECT_EQ(batch_of(s), (Shape{2}));
  EXPECT_TRUE(torch::equal(s.get("x"), torch::tensor({{1.0, 2.0}, {3.0, 4.0}})));
  EXPECT_EQ(s.get_non_tensor("s"), nlohmann::json("tag"));
  EXPECT_EQ(s.at("s").non_tensor().batch_size().vec(), (Shape{2}));
}

TEST(TensorDictStack, DeviceIsTheFirstInputs) {
  td::TensorDict a({{"x", torch::ones({2})}}, {2}, torch::Device(torch::kCPU));
  td::TensorDict b({{"x", torch::zeros({2})}}, {2});
  auto first_cpu = td::stack({a, b}).device();
  ASSERT_TRUE(first_cpu.has_value());
  EXPECT_EQ(*first_cpu, torch::Device(torch::kCPU));
  EXPECT_FALSE(td::stack({b, a}).device().has_value());
}

TEST(TensorDictStack, EmptyListIsAValueError) {
  OPS_EXPECT_THROW_MSG(td::stack({}), td::ValueError, "non-empty");
  OPS_EXPECT_THROW_MSG(td::cat({}), td::ValueError, "non-empty");
}

TEST(TensorDictStack, DifferentBatchSizesAreShapeErrors) {
  auto t = make_fixture();
  auto shorter = t.index({Slice(0, 3)});
  OPS_EXPECT_THROW_MSG(td::stack({t, shorter}), td::ShapeError, "congruent batch sizes", "[4, 3]",
                       "[3, 3]");
  OPS_EXPECT_THROW_MSG(td::stack({t, t, t.unsqueeze(0)}), td::ShapeError, "tensordict 2");
}

TEST(TensorDictStack, DifferentKeySetsAreKeyErrorsNamingTheKeys) {
  auto t = make_fixture();
  auto renamed = t.clone();
  renamed.rename_key_("b", "zeta");
  OPS_EXPECT_THROW_MSG(td::stack({t, renamed}), td::KeyError, "'b'", "'zeta'");
  auto fewer = t.exclude({"c"});
  OPS_EXPECT_THROW_MSG(td::stack({t, fewer}), td::KeyError, "'c'");
  OPS_EXPECT_THROW_MSG(td::stack({fewer, t}), td::KeyError, "'c'");
  auto nested_extra = t.clone();
  nested_extra.set({"nested", "deeper", "extra"}, torch::zeros({4, 3, 2}));
  OPS_EXPECT_THROW_MSG(td::stack({t, nested_extra}), td::KeyError, "'extra'", "deeper");
}

TEST(TensorDictStack, DifferentLeafShapesAreShapeErrorsNamingTheKey) {
  auto t = make_fixture();
  auto wider = t.clone();
  wider.set({"nested", "d"}, torch::zeros({4, 3, 6}));
  OPS_EXPECT_THROW_MSG(td::stack({t, wider}), td::ShapeError, "('nested', 'd')", "[4, 3, 5]",
                       "[4, 3, 6]");
  auto deeper = t.clone();
  deeper.set({"nested", "deeper", "f"}, torch::zeros({4, 3, 2, 1}, torch::kInt));
  OPS_EXPECT_THROW_MSG(td::stack({t, t, deeper}), td::ShapeError, "('nested', 'deeper', 'f')",
                       "tensordict 2");
}

TEST(TensorDictStack, DifferentKindsAtOneKeyAreTypeErrors) {
  auto t = make_fixture();
  auto clash = t.clone();
  clash.set("a", td::TensorDict({{"x", torch::zeros({4, 3})}}, {4, 3}));
  OPS_EXPECT_THROW_MSG(td::stack({t, clash}), td::TypeError, "'a'");
}

TEST(TensorDictStack, EqualNonTensorValuesStayOneValueDifferentOnesStack) {
  auto t = make_fixture();
  auto same = other_fixture(1);
  td::TensorDict s = td::stack({t, same}, 1);
  EXPECT_EQ(s.entry_kind("label"), td::EntryKind::NonTensor);
  EXPECT_EQ(s.get_non_tensor("label"), nlohmann::json("x"));
  EXPECT_EQ(s.at("label").non_tensor().batch_size().vec(), (Shape{4, 2, 3}));
  auto different = t.clone();
  different.set_non_tensor("label", "y");
  // Different values: one value per element (test_non_tensor_stack.cpp has more).
  td::TensorDict d = td::stack({t, different}, 1);
  ASSERT_EQ(d.entry_kind("label"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(d.at("label").non_tensor_stack().batch_size().vec(), (Shape{4, 2, 3}));
  EXPECT_EQ(d.get_non_tensor_stack("label").at({3, 1, 2}), "y");
  EXPECT_EQ(d.get_non_tensor_stack("label").at({3, 0, 2}), "x");
  td::TensorDict c = td::cat({t, different});
  EXPECT_EQ(c.get_non_tensor("label"),
            nlohmann::json::parse(R"([["x","x","x"],["x","x","x"],["x","x","x"],["x","x","x"],)"
                                  R"(["y","y","y"],["y","y","y"],["y","y","y"],["y","y","y"]])"));
}

// ---- cat ----------------------------------------------------------------------------

TEST(TensorDictStack, CatAlongDim0And1MatchesTorchCat) {
  auto t0 = make_fixture();
  auto t1 = other_fixture(7).index({Slice(0, 2)});  // [2, 3]
  td::TensorDict c0 = td::cat({t0, t1}, 0);
  expect_fixture_batches(c0, {6, 3});
  expect_leafwise(c0, t0, [&](const at::Tensor&, const td::NestedKey& k) {
    return torch::cat({t0.get(k), t1.get(k)}, 0);
  });
  EXPECT_TRUE(c0.index({Slice(4, None)}).equal(t1));

  auto u1 = other_fixture(-3).index({Slice(), Slice(0, 1)});  // [4, 1]
  auto u2 = other_fixture(5);
  td::TensorDict c1 = td::cat({t0, u1, u2}, 1);
  expect_fixture_batches(c1, {4, 7});
  expect_leafwise(c1, t0, [&](const at::Tensor&, const td::NestedKey& k) {
    return torch::cat({t0.get(k), u1.get(k), u2.get(k)}, 1);
  });
  td::TensorDict cneg = td::cat({t0, u1, u2}, -1);
  EXPECT_TRUE(cneg.equal(c1));
  EXPECT_FALSE(c0.get("a").is_alias_of(t0.get("a")));
}

TEST(TensorDictStack, CatMismatchesAreErrors) {
  auto t = make_fixture();
  OPS_EXPECT_THROW_MSG(td::cat({t, t.index({Slice(), Slice(0, 2)})}, 0), td::ShapeError, "[4, 3]",
                       "[4, 2]");
  OPS_EXPECT_THROW_MSG(td::cat({t, t.unsqueeze(0)}, 0), td::ShapeError, "[1, 4, 3]");
  OPS_EXPECT_THROW_MSG(td::cat({t, t.exclude({"c"})}, 0), td::KeyError, "'c'");
  auto renamed = t.clone();
  renamed.rename_key_("a", "alpha");
  OPS_EXPECT_THROW_MSG(td::cat({t, renamed}, 1), td::KeyError, "'a'", "'alpha'");
  auto wider = t.clone();
  wider.set({"nested", "d"}, torch::zeros({4, 3, 6}));
  OPS_EXPECT_THROW_MSG(td::cat({t, wider}, 0), td::ShapeError, "('nested', 'd')");
  OPS_EXPECT_THROW_MSG(td::cat({t, t}, 2), td::IndexError, "2");
  td::TensorDict z({{"x", torch::ones({2})}}, {});
  OPS_EXPECT_THROW_MSG(td::cat({z, z}, 0), td::IndexError);
}

// Parts indexed from one tensordict share its key index and are paired by
// position; parts that do not (other key order, a key replaced) by key. The
// result is the same either way.
TEST(TensorDictStack, PartsOfOneTensorDictAndForeignPartsCombineByKey) {
  auto t = make_fixture();
  std::vector<td::TensorDictBase> rows, slices;
  for (int64_t i = 0; i < 4; ++i) rows.push_back(t[i]);
  for (int64_t i = 0; i < 4; i += 2) slices.push_back(t.index({Slice(i, i + 2)}));
  auto memory_node = [](const td::TensorDictBase& x) -> const td::detail::MemoryNode& {
    return static_cast<const td::detail::MemoryNode&>(x.node());
  };
  ASSERT_TRUE(memory_node(rows[3]).shares_keys_with(memory_node(rows[0])));
  ASSERT_TRUE(memory_node(slices[1]).shares_keys_with(memory_node(slices[0])));
  EXPECT_TRUE(td::stack(rows, 0).equal(t));
  EXPECT_TRUE(td::cat(slices, 0).equal(t));

  // A value replaced in one part (same keys, same order) is the one used.
  auto changed = t.index({Slice(2, 4)});
  changed.set({"nested", "d"}, torch::full({2, 3, 5}, 9.0));
  ASSERT_TRUE(memory_node(changed).shares_keys_with(memory_node(slices[0])));
  td::TensorDict c = td::cat({slices[0], changed}, 0);
  EXPECT_TRUE(at::equal(c.get({"nested", "d"}).index({Slice(2, 4)}), torch::full({2, 3, 5}, 9.0f)));
  EXPECT_TRUE(at::equal(c.get("a"), t.get("a")));

  // The same keys inserted in another order.
  td::TensorDict reordered({{"label", "x"}}, {2, 3});
  reordered.set("nested", slices[1].get_tensordict("nested"));
  for (const char* k : {"c", "b", "a"}) reordered.set(k, slices[1].get(k));
  td::TensorDict r = td::cat({slices[0], reordered}, 0);
  EXPECT_TRUE(r.equal(t));
  EXPECT_EQ(r.keys(), t.keys());  // the first part's order

  // A leaf replaced by a tensordict at the same position is a TypeError.
  auto odd = t.index({Slice(2, 4)});
  odd.set("a", td::TensorDict({{"x", torch::zeros({2, 3})}}, {2, 3}));
  OPS_EXPECT_THROW_MSG(td::cat({slices[0], odd}, 0), td::TypeError, "'a'", "tensordict 1");
}
