// apply, arithmetic, reductions, comparisons, fills, dtypes and devices: each
// compared with the same torch op applied leaf by leaf.
#include "pch.h"

#include "support/ops_test_helpers.h"

#include <torch/version.h>

#include <cmath>
#include <string>
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

namespace {

constexpr int64_t kB = 2;

// The fixture without its bool leaf (sub/neg/div are not defined on bools).
td::TensorDictBase numeric_fixture() { return make_fixture().exclude({"c"}); }

// Only the floating-point leaves: a, nested.d, nested.deeper.e.
td::TensorDictBase float_fixture() {
  return make_fixture().exclude({"b", "c", {"nested", "deeper", "f"}});
}

// Same structure and dtypes, other values, never zero.
td::TensorDictBase nonzero_other(const td::TensorDictBase& t) {
  return t.apply([](const at::Tensor& x) {
    if (x.scalar_type() == torch::kBool) return x.logical_not();
    return (x.abs() + 2).to(x.scalar_type());
  });
}

// A batch-shaped tensor viewed to broadcast against `leaf` (right-padded).
at::Tensor batch_view(const at::Tensor& w, const at::Tensor& leaf) {
  Shape s = {4, 3};
  s.resize(leaf.dim(), 1);
  return w.expand({4, 3}).reshape(s);
}

}  // namespace

// ---- apply --------------------------------------------------------------------------

TEST(TensorDictMath, ApplyMapsEveryLeafAndKeepsNonTensors) {
  auto t = make_fixture();
  td::TensorDictBase r = t.apply([](const at::Tensor& x) { return x * 2; });
  expect_fixture_batches(r, {4, 3});
  expect_leafwise(r, t, [](const at::Tensor& x, const td::NestedKey&) { return x * 2; });
  EXPECT_FALSE(r.get("a").is_alias_of(t.get("a")));
  t.lock_();
  EXPECT_FALSE(t.apply([](const at::Tensor& x) { return x; }).is_locked());
}

TEST(TensorDictMath, ApplyWithBatchSizeForShapeChangingFunctions) {
  auto t = make_fixture();
  td::TensorDictBase r =
      t.apply([](const at::Tensor& x) { return x.sum(1); }, std::vector<int64_t>{4});
  // Python passes the new batch size to nested tensordicts as well.
  expect_fixture_batches(r, {4}, {});
  expect_leafwise(r, t, [](const at::Tensor& x, const td::NestedKey&) { return x.sum(1); });

  td::TensorDictBase u =
      t.apply([](const at::Tensor& x) { return x.unsqueeze(kB); }, std::vector<int64_t>{4, 3, 1});
  expect_fixture_batches(u, {4, 3, 1}, {});
  expect_leafwise(u, t, [](const at::Tensor& x, const td::NestedKey&) { return x.unsqueeze(kB); });

  td::TensorDictBase flat =
      t.apply([](const at::Tensor& x) { return x.flatten(0, 1); }, std::vector<int64_t>{12});
  EXPECT_EQ(batch_of(flat), (Shape{12}));
  EXPECT_EQ(sizes_of(flat.get({"nested", "deeper", "f"})), (Shape{12, 2, 3}));

  OPS_EXPECT_THROW_MSG(t.apply([](const at::Tensor& x) { return x; }, std::vector<int64_t>{5}),
                       td::ShapeError, "[5]");
}

TEST(TensorDictMath, ApplyDropsLeavesForWhichFnReturnsUndefined) {
  auto t = make_fixture();
  td::TensorDictBase r = t.apply([](const at::Tensor& x) {
    return x.scalar_type() == torch::kBool || x.scalar_type() == torch::kInt ? at::Tensor() : x + 1;
  });
  EXPECT_FALSE(r.contains("c"));
  EXPECT_FALSE(r.contains({"nested", "deeper", "f"}));
  EXPECT_TRUE(r.contains({"nested", "deeper", "e"}));
  EXPECT_EQ(r.keys(true, true),
            (ops_test::Keys{"a", "b", {"nested", "d"}, {"nested", "deeper", "e"}}));
  EXPECT_TRUE(torch::equal(r.get("b"), t.get("b") + 1));
  EXPECT_EQ(r.get_non_tensor("label"), nlohmann::json("x"));
}

TEST(TensorDictMath, ApplyWithAnotherTensorDict) {
  auto t = make_fixture();
  auto other = nonzero_other(t);
  auto fn = [](const at::Tensor& x, const at::Tensor& y) {
    return x.to(torch::kDouble) * 10 - y.to(torch::kDouble);
  };
  td::TensorDictBase r = t.apply(fn, other);
  expect_fixture_batches(r, {4, 3});
  expect_leafwise(r, t,
                  [&](const at::Tensor& x, const td::NestedKey& k) { return fn(x, other.get(k)); });
  // Extra keys in other are ignored; a missing one is a KeyError naming it.
  auto bigger = other.clone();
  bigger.set("extra", torch::zeros({4, 3}));
  EXPECT_EQ(t.apply(fn, bigger).keys(true, true), t.keys(true, true));
  OPS_EXPECT_THROW_MSG(t.apply(fn, other.exclude({{"nested", "deeper", "f"}})), td::KeyError,
                       "('nested', 'deeper', 'f')");
}

TEST(TensorDictMath, ApplyInPlaceKeepsStorageAndWorksWhenLocked) {
  auto t = make_fixture();
  auto before = t.clone();
  Frozen identity = Frozen::of(t);
  std::vector<void*> ptrs;
  for (const auto& k : ops_test::fixture_leaves()) ptrs.push_back(t.get(k).data_ptr());
  t.lock_();
  td::TensorDictBase& ret = t.apply_([](const at::Tensor& x) { return x + 1; });
  EXPECT_EQ(&ret, static_cast<td::TensorDictBase*>(&t));
  expect_leafwise(t, before, [](const at::Tensor& x, const td::NestedKey&) {
    return (x + 1).to(x.scalar_type());
  });
  auto keys = ops_test::fixture_leaves();
  for (std::size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(t.get(keys[i]).data_ptr(), ptrs[i]) << keys[i];
  for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
  // A result that cannot be copied back names the leaf.
  OPS_EXPECT_THROW_MSG(t.apply_([](const at::Tensor& x) { return x.flatten(); }), td::ShapeError,
                       "'a'", "[24]", "[4, 3, 2]");
  // A result that broadcasts is copied into every row (torch copy_ rules).
  auto before_bcast = t.clone();
  t.apply_([](const at::Tensor& x) { return x.sum(0); });
  expect_leafwise(t, before_bcast, [](const at::Tensor& x, const td::NestedKey&) {
    return x.sum(0).to(x.scalar_type()).expand_as(x);
  });
}

TEST(TensorDictMath, NamedApplyPassesTheLeafNameByDefault) {
  // Python's named_apply(fn) (nested_keys=False): fn gets "a" for ("nested", "a").
  td::TensorDict t({{"a", torch::zeros({2})}}, {2});
  t.set({"nested", "a"}, torch::zeros({2}));
  t.set({"nested", "b"}, torch::zeros({2}));
  std::vector<td::NestedKey> seen;
  td::TensorDictBase r = t.named_apply([&](const td::NestedKey& k, const at::Tensor& x) {
    seen.push_back(k);
    return k == td::NestedKey("a") ? x + 1 : x;
  });
  EXPECT_EQ(seen, (ops_test::Keys{"a", "a", "b"}));
  EXPECT_TRUE(at::equal(r.get("a"), torch::ones({2})));
  EXPECT_TRUE(at::equal(r.get({"nested", "a"}), torch::ones({2})));
  EXPECT_TRUE(at::equal(r.get({"nested", "b"}), torch::zeros({2})));
}

TEST(TensorDictMath, NamedApplyReceivesFullNestedKeysWhenAsked) {
  auto t = make_fixture();
  std::vector<td::NestedKey> seen;
  td::TensorDictBase r = t.named_apply(
      [&](const td::NestedKey& k, const at::Tensor& x) {
        seen.push_back(k);
        return k.is_nested() ? x : at::Tensor();
      },
      {.nested_keys = true});
  EXPECT_EQ(seen, ops_test::fixture_leaves());
  EXPECT_EQ(
      r.keys(true, true),
      (ops_test::Keys{{"nested", "d"}, {"nested", "deeper", "e"}, {"nested", "deeper", "f"}}));
  EXPECT_TRUE(r.get({"nested", "deeper", "f"}).is_same(t.get({"nested", "deeper", "f"})));
}

// ---- arithmetic -------------------------------------------------------------------------

TEST(TensorDictMath, BinaryOpsWithATensorDict) {
  auto t = numeric_fixture();
  auto o = nonzero_other(t);
  auto check = [&](const td::TensorDictBase& r, auto op, const char* name) {
    SCOPED_TRACE(name);
    expect_fixture_batches(r, {4, 3});
    expect_leafwise(r, t,
                    [&](const at::Tensor& x, const td::NestedKey& k) { return op(x, o.get(k)); });
  };
  auto add = [](const at::Tensor& x, const at::Tensor& y) { return x + y; };
  auto sub = [](const at::Tensor& x, const at::Tensor& y) { return x - y; };
  auto mul = [](const at::Tensor& x, const at::Tensor& y) { return x * y; };
  auto div = [](const at::Tensor& x, const at::Tensor& y) { return x / y; };
  check(t.add(o), add, "add");
  check(t + o, add, "+");
  check(t.sub(o), sub, "sub");
  check(t - o, sub, "-");
  check(t.mul(o), mul, "mul");
  check(t * o, mul, "*");
  check(t.div(o), div, "div");
  check(t / o, div, "/");
  EXPECT_EQ((t / o).get("b").scalar_type(), torch::kFloat);  // true division
  // Bools add and multiply.
  auto full = make_fixture();
  auto fo = nonzero_other(full);
  EXPECT_TRUE(torch::equal((full + fo).get("c"), full.get("c") + fo.get("c")));
  EXPECT_TRUE(torch::equal((full * fo).get("c"), full.get("c") * fo.get("c")));
  // Key sets must match exactly.
  OPS_EXPECT_THROW_MSG(t + o.exclude({"b"}), td::KeyError, "mismatch", "'b'");
  OPS_EXPECT_THROW_MSG(t.exclude({"a"}) * o, td::KeyError, "mismatch", "'a'");
  // A LibTorch failure on one leaf names it.
  OPS_EXPECT_THROW_MSG(full - fo, td::Error, "'c'");
}

TEST(TensorDictMath, BinaryOpsWithABatchShapedTensor) {
  auto t = numeric_fixture();
  auto w = torch::arange(1, 13, torch::kFloat).reshape({4, 3});
  expect_leafwise(t + w, t,
                  [&](const at::Tensor& x, const td::NestedKey&) { return x + batch_view(w, x); });
  expect_leafwise(t.sub(w), t,
                  [&](const at::Tensor& x, const td::NestedKey&) { return x - batch_view(w, x); });
  expect_leafwise(t * w, t,
                  [&](const at::Tensor& x, const td::NestedKey&) { return x * batch_view(w, x); });
  expect_leafwise(t / w, t,
                  [&](const at::Tensor& x, const td::NestedKey&) { return x / batch_view(w, x); });
  // A tensor broadcast on the left to the batch shape first.
  auto row = torch::tensor({1.0, -1.0, 0.5});
  auto r = t * row;
  expect_leafwise(
      r, t, [&](const at::Tensor& x, const td::NestedKey&) { return x * batch_view(row, x); });
  EXPECT_TRUE(torch::equal(r.get({"nested", "deeper", "e"}).index({Slice(), 1}),
                           -t.get({"nested", "deeper", "e"}).index({Slice(), 1})));
  OPS_EXPECT_THROW_MSG(t + torch::ones({4, 3, 2}), td::ShapeError, "[4, 3, 2]", "[4, 3]");
  OPS_EXPECT_THROW_MSG(t + torch::ones({2, 3}), td::Error, "'a'");
}

TEST(TensorDictMath, BinaryOpsWithAScalar) {
  auto t = numeric_fixture();
  expect_leafwise(t + 2, t, [](const at::Tensor& x, const td::NestedKey&) { return x + 2; });
  expect_leafwise(t - 0.5, t, [](const at::Tensor& x, const td::NestedKey&) { return x - 0.5; });
  expect_leafwise(t * 3, t, [](const at::Tensor& x, const td::NestedKey&) { return x * 3; });
  expect_leafwise(t / 4, t, [](const at::Tensor& x, const td::NestedKey&) { return x / 4; });
  expect_leafwise(t.pow(2), t, [](const at::Tensor& x, const td::NestedKey&) { return x.pow(2); });
  expect_leafwise(-t, t, [](const at::Tensor& x, const td::NestedKey&) { return -x; });
  expect_fixture_batches(t * 3, {4, 3});
}

TEST(TensorDictMath, InPlaceOperatorsKeepStorage) {
  auto t = float_fixture();
  auto o = nonzero_other(t);
  Frozen identity = Frozen::of(t);
  auto step = [&](auto op_td, auto op_leaf, const char* name) {
    SCOPED_TRACE(name);
    auto prev = t.clone();
    op_td();
    expect_leafwise(t, prev, op_leaf);
  };
  step([&] { t += o; }, [&](const at::Tensor& x, const td::NestedKey& k) { return x + o.get(k); },
       "+= td");
  step([&] { t -= 1.5; }, [&](const at::Tensor& x, const td::NestedKey&) { return x - 1.5; },
       "-= scalar");
  step([&] { t *= o; }, [&](const at::Tensor& x, const td::NestedKey& k) { return x * o.get(k); },
       "*= td");
  step([&] { t /= 2; }, [&](const at::Tensor& x, const td::NestedKey&) { return x / 2; },
       "/= scalar");
  step([&] { t += 1; }, [&](const at::Tensor& x, const td::NestedKey&) { return x + 1; },
       "+= scalar");
  step([&] { t -= o; }, [&](const at::Tensor& x, const td::NestedKey& k) { return x - o.get(k); },
       "-= td");
  step([&] { t *= 3; }, [&](const at::Tensor& x, const td::NestedKey&) { return x * 3; },
       "*= scalar");
  step([&] { t /= o; }, [&](const at::Tensor& x, const td::NestedKey& k) { return x / o.get(k); },
       "/= td");
  auto w = torch::tensor({2.0, 4.0, 8.0});
  step([&] { t.add_(w); },
       [&](const at::Tensor& x, const td::NestedKey&) { return x + batch_view(w, x); },
       "add_ tensor");
  step([&] { t.sub_(w); },
       [&](const at::Tensor& x, const td::NestedKey&) { return x - batch_view(w, x); },
       "sub_ tensor");
  step([&] { t.mul_(w); },
       [&](const at::Tensor& x, const td::NestedKey&) { return x * batch_view(w, x); },
       "mul_ tensor");
  step([&] { t.div_(w); },
       [&](const at::Tensor& x, const td::NestedKey&) { return x / batch_view(w, x); },
       "div_ tensor");
  for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
  // Locked tensordicts accept in-place arithmetic.
  t.lock_();
  t += 1;
  t.mul_(o);
  OPS_EXPECT_THROW_MSG(t += o.exclude({"a"}), td::KeyError, "mismatch", "'a'");
}

TEST(TensorDictMath, InPlaceFailureOnALeafIsATensorDictError) {
  auto t = numeric_fixture();
  // int64 leaves cannot hold the result of a true division.
  OPS_EXPECT_THROW_MSG(t /= 2, td::Error, "'b'");
  auto u = numeric_fixture();
  OPS_EXPECT_THROW_MSG(u.add_(torch::ones({2, 3})), td::Error, "'a'");
}

TEST(TensorDictMath, UnaryOps) {
  auto t = numeric_fixture();
  auto pos = t.abs() + 1;
  expect_leafwise(t.neg(), t, [](const at::Tensor& x, const td::NestedKey&) { return x.neg(); });
  expect_leafwise(t.abs(), t, [](const at::Tensor& x, const td::NestedKey&) { return x.abs(); });
  expect_leafwise(t.exp(), t, [](const at::Tensor& x, const td::NestedKey&) { return x.exp(); });
  expect_leafwise(pos.log(), pos,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.log(); });
  expect_leafwise(pos.sqrt(), pos,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.sqrt(); });
  expect_leafwise(t.sigmoid(), t,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.sigmoid(); });
  expect_leafwise(t.clamp(-1, 2), t,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.clamp(-1, 2); });
  expect_leafwise(t.clamp(std::nullopt, 0), t,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.clamp_max(0); });
  expect_leafwise(t.clamp(3, std::nullopt), t,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.clamp_min(3); });
  expect_fixture_batches(t.exp(), {4, 3});
  EXPECT_EQ(t.exp().get("b").scalar_type(), torch::kFloat);
  OPS_EXPECT_THROW_MSG(make_fixture().neg(), td::Error, "'c'");
}

// ---- reductions ------------------------------------------------------------------------------

TEST(TensorDictMath, FullReductionsGiveZeroDimTensorDicts) {
  auto t = make_fixture();
  auto f = float_fixture();
  struct Case {
    const char* name;
    td::TensorDict got;
    const td::TensorDictBase& src;
    std::function<at::Tensor(const at::Tensor&)> by_hand;
  };
  std::vector<Case> cases = {
      {"sum", t.sum(), t, [](const at::Tensor& x) { return x.sum(); }},
      {"amax", t.amax(), t, [](const at::Tensor& x) { return x.flatten().amax(0); }},
      {"amin", t.amin(), t, [](const at::Tensor& x) { return x.flatten().amin(0); }},
      {"mean", f.mean(), f, [](const at::Tensor& x) { return x.mean(); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    // Every nested tensordict has batch [] too (its leaves are scalars).
    EXPECT_EQ(batch_of(c.got), Shape{});
    EXPECT_EQ(batch_of(c.got.get_tensordict("nested")), Shape{});
    EXPECT_EQ(batch_of(c.got.get_tensordict({"nested", "deeper"})), Shape{});
    EXPECT_EQ(c.got.get_non_tensor("label"), nlohmann::json("x"));
    expect_leafwise(c.got, c.src,
                    [&](const at::Tensor& x, const td::NestedKey&) { return c.by_hand(x); });
  }
}

TEST(TensorDictMath, ReductionsOverBatchDims) {
  auto t = make_fixture();
  auto f = float_fixture();
  for (bool keepdim : {false, true}) {
    SCOPED_TRACE(keepdim ? "keepdim" : "no keepdim");
    auto s1 = t.sum(std::vector<int64_t>{1}, keepdim);
    expect_fixture_batches(s1, keepdim ? Shape{4, 1} : Shape{4});
    expect_leafwise(s1, t,
                    [&](const at::Tensor& x, const td::NestedKey&) { return x.sum(1, keepdim); });
    auto s0 = t.sum(std::vector<int64_t>{-2}, keepdim);
    expect_fixture_batches(s0, keepdim ? Shape{1, 3} : Shape{3});
    expect_leafwise(s0, t,
                    [&](const at::Tensor& x, const td::NestedKey&) { return x.sum(0, keepdim); });
    auto both = t.sum(std::vector<int64_t>{0, 1}, keepdim);
    expect_fixture_batches(both, keepdim ? Shape{1, 1} : Shape{});
    expect_leafwise(both, t, [&](const at::Tensor& x, const td::NestedKey&) {
      return x.sum(at::IntArrayRef{0, 1}, keepdim);
    });
    auto m = f.mean(std::vector<int64_t>{0}, keepdim);
    EXPECT_EQ(batch_of(m), keepdim ? Shape({1, 3}) : Shape({3}));
    expect_leafwise(m, f,
                    [&](const at::Tensor& x, const td::NestedKey&) { return x.mean(0, keepdim); });
    auto mx = t.amax(std::vector<int64_t>{1}, keepdim);
    expect_leafwise(mx, t,
                    [&](const at::Tensor& x, const td::NestedKey&) { return x.amax(1, keepdim); });
    auto mn = t.amin(std::vector<int64_t>{-1}, keepdim);
    expect_fixture_batches(mn, keepdim ? Shape{4, 1} : Shape{4});
    expect_leafwise(mn, t,
                    [&](const at::Tensor& x, const td::NestedKey&) { return x.amin(1, keepdim); });
  }
  OPS_EXPECT_THROW_MSG(t.sum(std::vector<int64_t>{2}), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.mean(std::vector<int64_t>{-3}), td::IndexError, "-3");
  OPS_EXPECT_THROW_MSG(t.amax(std::vector<int64_t>{0, 5}), td::IndexError, "5");
}

TEST(TensorDictMath, MaxAndMinAlongADimGiveValuesAndIndices) {
  auto t = numeric_fixture();
  for (int64_t dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(std::to_string(dim) + (keepdim ? " keepdim" : ""));
      int64_t d = dim < 0 ? dim + kB : dim;
      Shape target = {4, 3};
      if (keepdim)
        target[d] = 1;
      else
        target.erase(target.begin() + d);
      auto mx = t.max(dim, keepdim);
      expect_leafwise(mx.values, t, [&](const at::Tensor& x, const td::NestedKey&) {
        return std::get<0>(x.max(d, keepdim));
      });
      expect_leafwise(mx.indices, t, [&](const at::Tensor& x, const td::NestedKey&) {
        return std::get<1>(x.max(d, keepdim));
      });
      expect_fixture_batches(mx.values, target);
      expect_fixture_batches(mx.indices, target);
      auto mn = t.min(dim, keepdim);
      expect_leafwise(mn.values, t, [&](const at::Tensor& x, const td::NestedKey&) {
        return std::get<0>(x.min(d, keepdim));
      });
      expect_leafwise(mn.indices, t, [&](const at::Tensor& x, const td::NestedKey&) {
        return std::get<1>(x.min(d, keepdim));
      });
      EXPECT_EQ(mn.indices.get({"nested", "deeper", "f"}).scalar_type(), torch::kLong);
    }
  }
  OPS_EXPECT_THROW_MSG(t.max(2), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.min(-3), td::IndexError, "-3");
}

TEST(TensorDictMath, AllAndAny) {
  auto t = make_fixture();
  EXPECT_FALSE(t.all());  // "a" holds a zero, "c" holds false
  EXPECT_TRUE(t.any());
  auto ones = t.apply([](const at::Tensor& x) { return torch::ones_like(x); });
  EXPECT_TRUE(ones.all());
  EXPECT_TRUE(ones.any());
  // One false value anywhere, even deep, makes all() false.
  ones.get({"nested", "deeper", "f"}).index_put_({3, 2, 1, 2}, 0);
  EXPECT_FALSE(ones.all());
  auto zeros = t.apply([](const at::Tensor& x) { return torch::zeros_like(x); });
  EXPECT_FALSE(zeros.any());
  EXPECT_FALSE(zeros.all());
  zeros.get({"nested", "deeper", "e"}).index_put_({0, 0, 0}, 1e-3);
  EXPECT_TRUE(zeros.any());
  // An empty tensordict: all() is true, any() is false (like Python).
  td::TensorDict empty({}, {2});
  EXPECT_TRUE(empty.all());
  EXPECT_FALSE(empty.any());

  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    int64_t d = dim < 0 ? dim + kB : dim;
    auto al = t.all(dim);
    expect_fixture_batches(al, {d == 0 ? 3 : 4});
    expect_leafwise(al, t, [&](const at::Tensor& x, const td::NestedKey&) { return x.all(d); });
    auto an = t.any(dim);
    expect_leafwise(an, t, [&](const at::Tensor& x, const td::NestedKey&) { return x.any(d); });
    for (const auto& k : ops_test::fixture_leaves())
      EXPECT_EQ(an.get(k).scalar_type(), torch::kBool) << k;
  }
  OPS_EXPECT_THROW_MSG(t.all(2), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.any(-3), td::IndexError, "-3");
}

// ---- comparisons ------------------------------------------------------------------------------

TEST(TensorDictMath, EqualityGivesTensorDictsOfBools) {
  auto t = make_fixture();
  auto same = t.clone();
  auto other = nonzero_other(t);
  other.get("a").index_put_({0, 0, 0}, t.get("a")[0][0][0]);  // one equal element

  td::TensorDictBase e = t == same;
  expect_fixture_batches(e, {4, 3});
  for (const auto& k : ops_test::fixture_leaves()) {
    EXPECT_EQ(e.get(k).scalar_type(), torch::kBool) << k;
    EXPECT_EQ(sizes_of(e.get(k)), sizes_of(t.get(k))) << k;
  }
  EXPECT_TRUE(e.all());
  EXPECT_TRUE((t == same).all());
  EXPECT_FALSE((t != same).any());

  expect_leafwise(t.eq(other), t,
                  [&](const at::Tensor& x, const td::NestedKey& k) { return x.eq(other.get(k)); });
  expect_leafwise(t == other, t,
                  [&](const at::Tensor& x, const td::NestedKey& k) { return x == other.get(k); });
  expect_leafwise(t.ne(other), t,
                  [&](const at::Tensor& x, const td::NestedKey& k) { return x.ne(other.get(k)); });
  expect_leafwise(t != other, t,
                  [&](const at::Tensor& x, const td::NestedKey& k) { return x != other.get(k); });
  EXPECT_TRUE((t == other).any());
  EXPECT_FALSE((t == other).all());

  // Against a scalar and a batch-shaped tensor.
  expect_leafwise(t.eq(0), t, [](const at::Tensor& x, const td::NestedKey&) { return x.eq(0); });
  expect_leafwise(t == 1, t, [](const at::Tensor& x, const td::NestedKey&) { return x == 1; });
  expect_leafwise(t != 1, t, [](const at::Tensor& x, const td::NestedKey&) { return x != 1; });
  auto w = torch::arange(12, torch::kLong).reshape({4, 3}) * 3 - 7;  // equals "b"
  expect_leafwise(t.eq(w), t, [&](const at::Tensor& x, const td::NestedKey&) {
    return x.eq(batch_view(w, x));
  });
  EXPECT_TRUE(t.eq(w).get("b").all().item<bool>());
  expect_leafwise(t.ne(w), t, [&](const at::Tensor& x, const td::NestedKey&) {
    return x.ne(batch_view(w, x));
  });
}

TEST(TensorDictMath, ComparingDifferentKeySetsIsAKeyError) {
  auto t = make_fixture();
  auto fewer = t.exclude({{"nested", "d"}});
  OPS_EXPECT_THROW_MSG(t == fewer, td::KeyError, "mismatch", "('nested', 'd')");
  OPS_EXPECT_THROW_MSG(fewer.eq(t), td::KeyError, "mismatch", "('nested', 'd')");
  OPS_EXPECT_THROW_MSG(t != fewer, td::KeyError, "mismatch");
  auto more = t.clone();
  more.set("extra", torch::zeros({4, 3}));
  OPS_EXPECT_THROW_MSG(t.ne(more), td::KeyError, "mismatch", "'extra'");
}

TEST(TensorDictMath, OrderingComparisonsWithAScalar) {
  auto t = make_fixture();
  expect_leafwise(t.lt(0), t, [](const at::Tensor& x, const td::NestedKey&) { return x.lt(0); });
  expect_leafwise(t.le(0), t, [](const at::Tensor& x, const td::NestedKey&) { return x.le(0); });
  expect_leafwise(t.gt(1.5), t,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.gt(1.5); });
  expect_leafwise(t.ge(-2), t, [](const at::Tensor& x, const td::NestedKey&) { return x.ge(-2); });
  expect_fixture_batches(t.lt(0), {4, 3});
}

TEST(TensorDictMath, AllcloseAndEqual) {
  auto f = float_fixture();
  EXPECT_TRUE(f.allclose(f.clone()));
  EXPECT_TRUE(f.allclose(f * 1.000001));
  EXPECT_FALSE(f.allclose(f + 1e-2));
  EXPECT_TRUE(f.allclose(f + 1e-2, /*rtol=*/0, /*atol=*/0.1));
  EXPECT_FALSE(f.allclose(f.exclude({"a"})));
  auto reshaped = f.clone();
  reshaped.set({"nested", "d"}, torch::zeros({4, 3, 6}));
  EXPECT_FALSE(f.allclose(reshaped));
  auto with_nan = f.clone();
  with_nan.get("a").index_put_({0, 0, 0}, std::nan(""));
  EXPECT_FALSE(with_nan.allclose(with_nan.clone()));
  EXPECT_TRUE(with_nan.allclose(with_nan.clone(), 1e-5, 1e-8, /*equal_nan=*/true));

  auto t = make_fixture();
  EXPECT_TRUE(t.equal(t));
  EXPECT_TRUE(t.equal(t.clone()));
  EXPECT_TRUE(t.equal(make_fixture()));
  auto one_off = t.clone();
  one_off.get({"nested", "deeper", "f"}).index_put_({3, 2, 1, 2}, 1000);
  EXPECT_FALSE(t.equal(one_off));
  EXPECT_FALSE(t.equal(t.to(torch::kDouble)));  // dtypes differ
  auto relabeled = t.clone();
  relabeled.set_non_tensor("label", "y");
  EXPECT_FALSE(t.equal(relabeled));
  EXPECT_FALSE(t.equal(t.exclude({"c"})));
  EXPECT_FALSE(t.equal(t.exclude({"label"})));
  EXPECT_FALSE(t.equal(t.index({Slice(0, 2)})));
  EXPECT_FALSE(t.equal(t.view({12})));
}

// ---- fills, dtypes, devices
// ----------------------------------------------------------------------

TEST(TensorDictMath, ZeroAndFill) {
  auto t = make_fixture();
  Frozen identity = Frozen::of(t);
  t.lock_();
  td::TensorDictBase& ret = t.zero_();
  EXPECT_EQ(&ret, static_cast<td::TensorDictBase*>(&t));
  for (const auto& k : ops_test::fixture_leaves()) {
    EXPECT_TRUE(torch::equal(t.get(k), torch::zeros_like(t.get(k)))) << k;
  }
  for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
  EXPECT_EQ(t.get_non_tensor("label"), nlohmann::json("x"));

  t.fill_(2.5);
  for (const auto& k : ops_test::fixture_leaves()) {
    at::Tensor leaf = t.get(k);
    EXPECT_TRUE(torch::equal(leaf, torch::full_like(leaf, 2.5))) << k;
  }
  EXPECT_EQ(t.get("b")[0][0].item<int64_t>(), 2);
  EXPECT_TRUE(t.get("c").all().item<bool>());

  t.fill_({"nested", "deeper", "e"}, -1);
  EXPECT_TRUE(
      torch::equal(t.get({"nested", "deeper", "e"}), torch::full({4, 3, 2}, -1.0, torch::kDouble)));
  EXPECT_TRUE(
      torch::equal(t.get({"nested", "deeper", "f"}), torch::full({4, 3, 2, 3}, 2, torch::kInt)));
  t.fill_("c", false);
  EXPECT_FALSE(t.get("c").any().item<bool>());
  EXPECT_TRUE(torch::equal(t.get("a"), torch::full({4, 3, 2}, 2.5)));
  for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
  OPS_EXPECT_THROW_MSG(t.fill_("zzz", 1), td::KeyError, "zzz");
  OPS_EXPECT_THROW_MSG(t.fill_({"nested", "zzz"}, 1), td::KeyError, "zzz");
  OPS_EXPECT_THROW_MSG(t.fill_("label", 1), td::TypeError, "label");
}

TEST(TensorDictMath, ToDtypeCastsEveryLeafIntegersIncluded) {
  auto t = make_fixture();
  td::TensorDictBase f = t.to(torch::kFloat);
  expect_fixture_batches(f, {4, 3});
  expect_leafwise(f, t,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.to(torch::kFloat); });
  for (const auto& k : ops_test::fixture_leaves())
    EXPECT_EQ(f.get(k).scalar_type(), torch::kFloat) << k;
  td::TensorDictBase i = t.to(torch::kInt);
  expect_leafwise(i, t,
                  [](const at::Tensor& x, const td::NestedKey&) { return x.to(torch::kInt); });
  EXPECT_FALSE(f.is_locked());
  t.lock_();
  EXPECT_TRUE(t.to(torch::kDouble).is_locked());
}

TEST(TensorDictMath, ToDeviceReturnsSelfWhenAlreadyThere) {
  td::TensorDict on_cpu(
      {{"x", torch::ones({2, 3})}, {"n", td::TensorDict({{"y", torch::zeros({2})}}, {2})}}, {2},
      torch::Device(torch::kCPU));
  EXPECT_TRUE(on_cpu.to(torch::Device(torch::kCPU)).is_same(on_cpu));
  EXPECT_TRUE(on_cpu.cpu().is_same(on_cpu));

  auto t = make_fixture();  // no device
  ASSERT_FALSE(t.device().has_value());
  auto moved = t.to(torch::Device(torch::kCPU));
  EXPECT_FALSE(moved.is_same(t));
  ASSERT_TRUE(moved.device().has_value());
  EXPECT_EQ(*moved.device(), torch::Device(torch::kCPU));
  ASSERT_TRUE(moved.get_tensordict({"nested", "deeper"}).device().has_value());
  expect_fixture_batches(moved, {4, 3});
  // CPU tensors are not copied.
  for (const auto& k : ops_test::fixture_leaves()) EXPECT_TRUE(moved.get(k).is_same(t.get(k))) << k;
  EXPECT_TRUE(moved.to(torch::Device(torch::kCPU)).is_same(moved));
  t.lock_();
  EXPECT_TRUE(t.to(torch::Device(torch::kCPU)).is_locked());
}

TEST(TensorDictMath, ContiguousOfATransposedTensorDict) {
  auto t = make_fixture();
  EXPECT_TRUE(t.is_contiguous());
  auto tr = t.transpose(0, 1);
  EXPECT_FALSE(tr.is_contiguous());
  td::TensorDict c = tr.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  expect_fixture_batches(c, {3, 4});
  expect_leafwise(c, tr, [](const at::Tensor& x, const td::NestedKey&) { return x.contiguous(); });
  for (const auto& k : ops_test::fixture_leaves()) {
    EXPECT_TRUE(c.get(k).is_contiguous()) << k;
    EXPECT_FALSE(c.get(k).is_alias_of(t.get(k))) << k;
  }
  // Leaves already contiguous are shared.
  td::TensorDict same = t.contiguous();
  for (const auto& k : ops_test::fixture_leaves()) EXPECT_TRUE(same.get(k).is_same(t.get(k))) << k;
}

TEST(TensorDictMath, RequiresGradOnlyOnFloatingLeavesAndDetach) {
  auto t = make_fixture();
  t.requires_grad_();
  EXPECT_TRUE(t.get("a").requires_grad());
  EXPECT_TRUE(t.get({"nested", "d"}).requires_grad());
  EXPECT_TRUE(t.get({"nested", "deeper", "e"}).requires_grad());
  EXPECT_FALSE(t.get("b").requires_grad());
  EXPECT_FALSE(t.get("c").requires_grad());
  EXPECT_FALSE(t.get({"nested", "deeper", "f"}).requires_grad());

  td::TensorDictBase d = t.detach();
  expect_fixture_batches(d, {4, 3});
  for (const auto& k : ops_test::fixture_leaves()) {
    EXPECT_FALSE(d.get(k).requires_grad()) << k;
    EXPECT_EQ(d.get(k).data_ptr(), t.get(k).data_ptr()) << k;  // same storage
  }
  EXPECT_TRUE(t.get("a").requires_grad());  // the source is untouched

  // Gradients flow through tensordict arithmetic.
  auto loss = (t * 2).get({"nested", "deeper", "e"}).sum();
  loss.backward();
  EXPECT_TRUE(torch::equal(t.get({"nested", "deeper", "e"}).grad(),
                           torch::full({4, 3, 2}, 2.0, torch::kDouble)));

  t.requires_grad_(false);
  for (const auto& k : ops_test::fixture_leaves()) EXPECT_FALSE(t.get(k).requires_grad()) << k;
  t.requires_grad_();
  t.detach_();
  for (const auto& k : ops_test::fixture_leaves()) EXPECT_FALSE(t.get(k).requires_grad()) << k;
}

// ---- lerp_, add_(alpha), copy_ and the fused (foreach) pass ---------------------------

namespace {

// The fused forms LibTorch 1.13 lacks (math.cpp loops there).
constexpr bool kFusedLerp = TORCH_VERSION_MAJOR >= 2;
constexpr bool kFusedCopy = TORCH_VERSION_MAJOR > 2 ||
                            (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2);

std::map<std::string, int>*& op_counts() {
  thread_local std::map<std::string, int>* counts = nullptr;
  return counts;
}

// How many times each of `names` ran as a LibTorch op during fn (their
// RecordFunction scopes): tells one fused at::_foreach_* call from a loop.
template <class Fn>
std::map<std::string, int> count_ops(const std::vector<std::string>& names, Fn&& fn) {
  std::map<std::string, int> counts;
  for (const auto& n : names) counts[n] = 0;
  auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(
      [](const at::RecordFunction& rf) -> std::unique_ptr<at::ObserverContext> {
        if (auto* c = op_counts()) {
          auto it = c->find(rf.name());
          if (it != c->end()) ++it->second;
        }
        return nullptr;
      }));
  op_counts() = &counts;
  fn();
  op_counts() = nullptr;
  at::removeCallback(handle);
  return counts;
}

}  // namespace

TEST(TensorDictMath, LerpMatchesTorchLerpOnEveryNestedLeafInOneFusedCall) {
  auto t = float_fixture();
  auto end = nonzero_other(t);
  auto prev = t.clone();
  Frozen identity = Frozen::of(t);
  auto ops = count_ops({"aten::_foreach_lerp_", "aten::lerp_"}, [&] { t.lerp_(end, 0.25); });
  expect_leafwise(t, prev, [&](const at::Tensor& x, const td::NestedKey& k) {
    return x.lerp(end.get(k), 0.25);
  });
  for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
  // Three leaves (a, nested.d, nested.deeper.e), two dtypes: one call.
  if (kFusedLerp) {
    EXPECT_EQ(ops["aten::_foreach_lerp_"], 1);
  } else {
    EXPECT_EQ(ops["aten::lerp_"], 3);
  }
}

TEST(TensorDictMath, LerpWithTensorAndTensordictWeights) {
  auto t = float_fixture();
  auto end = nonzero_other(t);
  // A batch-shaped weight, broadcast like every tensor operand, in each
  // leaf's dtype (float and double leaves here).
  auto w = torch::tensor({0.0f, 0.5f, 1.0f});
  auto prev = t.clone();
  t.lerp_(end, w);
  expect_leafwise(t, prev, [&](const at::Tensor& x, const td::NestedKey& k) {
    return x.lerp(end.get(k), batch_view(w, x).to(x.scalar_type()));
  });
  // One weight tensor per leaf.
  auto weights = t.apply([](const at::Tensor& x) { return torch::rand_like(x); });
  prev = t.clone();
  t.lerp_(end, weights);
  expect_leafwise(t, prev, [&](const at::Tensor& x, const td::NestedKey& k) {
    return x.lerp(end.get(k), weights.get(k));
  });
}

TEST(TensorDictMath, LerpMismatchedKeysIsAKeyErrorAndWritesNothing) {
  auto t = float_fixture();
  auto end = nonzero_other(t).exclude({{"nested", "d"}});
  Frozen before = Frozen::of(t);
  OPS_EXPECT_THROW_MSG(t.lerp_(end, 0.5), td::KeyError, "mismatch", "('nested', 'd')");
  before.expect_unchanged(t);
  auto extra = nonzero_other(t);
  extra.set("z", torch::zeros({4, 3}));
  OPS_EXPECT_THROW_MSG(t.lerp_(extra, 0.5), td::KeyError, "mismatch", "'z'");
  before.expect_unchanged(t);
  // A weight tensordict is checked the same way.
  OPS_EXPECT_THROW_MSG(t.lerp_(nonzero_other(t), end), td::KeyError, "mismatch");
  before.expect_unchanged(t);
}

TEST(TensorDictMath, LerpOnALockedTensordictWritesInPlaceAsInPython) {
  // Python's lerp_ (like every in-place op) writes into a locked tensordict:
  // the lock forbids adding or removing entries, not changing values.
  auto t = float_fixture();
  t.lock_();
  auto end = nonzero_other(t);
  auto prev = t.clone();
  t.lerp_(end, 1.0);
  expect_leafwise(t, prev, [&](const at::Tensor&, const td::NestedKey& k) { return end.get(k); });
  EXPECT_TRUE(t.is_locked());
}

TEST(TensorDictMath, LerpKeysInAnotherOrderAndExpandedLeaves) {
  auto t = float_fixture();
  // The same leaves inserted in another order: looked up by key.
  td::TensorDict reordered({}, {4, 3});
  reordered.set({"nested", "deeper", "e"}, torch::zeros({4, 3, 2}, torch::kDouble));
  reordered.set({"nested", "d"}, torch::zeros({4, 3, 5}));
  reordered.set("a", torch::zeros({4, 3, 2}));
  t.lerp_(reordered, 1.0);
  EXPECT_TRUE(torch::equal(t.get("a"), torch::zeros({4, 3, 2})));
  EXPECT_TRUE(
      torch::equal(t.get({"nested", "deeper", "e"}), torch::zeros({4, 3, 2}, torch::kDouble)));
  // An expanded leaf cannot be written in place: refused before any write.
  auto u = float_fixture();
  u.set("a", torch::ones({1, 1, 2}).expand({4, 3, 2}));
  Frozen before = Frozen::of(u);
  OPS_EXPECT_THROW_MSG(u.lerp_(nonzero_other(u), 0.5), td::ValueError, "'a'", "expanded");
  before.expect_unchanged(u);
}

TEST(TensorDictMath, LerpOfParametersNeedsNoGradAsInTorch) {
  auto t = float_fixture();
  t.requires_grad_(true);
  auto end = nonzero_other(t).detach();
  // As torch's lerp_ on a leaf that requires grad: refused, naming the key.
  OPS_EXPECT_THROW_MSG(t.lerp_(end, 0.5), td::Error, "'a'");
  {
    torch::NoGradGuard no_grad;
    auto prev = t.detach().clone();
    t.lerp_(end, 0.5);
    expect_leafwise(t.detach(), prev, [&](const at::Tensor& x, const td::NestedKey& k) {
      return x.lerp(end.get(k), 0.5);
    });
  }
}

TEST(TensorDictMath, LerpOfALazyStackWritesIntoItsMembers) {
  auto m0 = float_fixture()[0].to_tensordict();
  auto m1 = float_fixture()[1].to_tensordict();
  auto stack = td::lazy_stack({m0, m1});
  auto end = nonzero_other(td::stack({m0, m1}));
  auto prev = td::stack({m0, m1}).clone();
  stack.lerp_(end, 0.5);
  expect_leafwise(td::stack({m0, m1}), prev, [&](const at::Tensor& x, const td::NestedKey& k) {
    return x.lerp(end.get(k), 0.5);
  });
}

TEST(TensorDictMath, AddAndSubWithAlpha) {
  auto t = float_fixture();
  auto o = nonzero_other(t);
  auto prev = t.clone();
  auto ops = count_ops({"aten::_foreach_add_"}, [&] { t.add_(o, -0.5); });
  expect_leafwise(
      t, prev, [&](const at::Tensor& x, const td::NestedKey& k) { return x.add(o.get(k), -0.5); });
  EXPECT_EQ(ops["aten::_foreach_add_"], 1);
  prev = t.clone();
  t.sub_(o, 2);
  expect_leafwise(t, prev,
                  [&](const at::Tensor& x, const td::NestedKey& k) { return x.sub(o.get(k), 2); });
  OPS_EXPECT_THROW_MSG(t.add_(o.exclude({"a"}), 2), td::KeyError, "mismatch", "'a'");
}

TEST(TensorDictMath, InPlaceArithmeticAndZeroAreFusedWhereTheLeavesAllow) {
  auto t = float_fixture();
  auto o = nonzero_other(t);
  auto ops = count_ops({"aten::_foreach_mul_", "aten::_foreach_zero_", "aten::_foreach_add_"}, [&] {
    t.mul_(o);
    t.mul_(0.5);
    t += 1;
    t.zero_();
  });
  EXPECT_EQ(ops["aten::_foreach_mul_"], 2);
  EXPECT_EQ(ops["aten::_foreach_add_"], 1);
  EXPECT_EQ(ops["aten::_foreach_zero_"], 1);
  // Integer and bool leaves: zero_ is still one call; the arithmetic keeps
  // the leaf-by-leaf loop, whose errors name the leaf.
  auto all = make_fixture();
  ops = count_ops({"aten::_foreach_zero_", "aten::_foreach_mul_"}, [&] {
    all.zero_();
    all.exclude({"c"}).mul_(3);
  });
  EXPECT_EQ(ops["aten::_foreach_zero_"], 1);
  EXPECT_EQ(ops["aten::_foreach_mul_"], 0);
  for (const auto& k : ops_test::fixture_leaves())
    EXPECT_TRUE(torch::equal(all.get(k), torch::zeros_like(all.get(k)))) << k;
}

TEST(TensorDictMath, InPlaceOpsOnTensordictsWithoutLeaves) {
  // LibTorch's foreach calls refuse an empty list: nothing to do instead.
  td::TensorDict empty({}, {4});
  empty.create_nested("sub");
  empty.lerp_(empty.clone(), 0.5).zero_().mul_(2).add_(empty.clone(), 3).copy_(empty.clone());
  EXPECT_EQ(empty.keys(true), std::vector<td::NestedKey>{"sub"});
}

TEST(TensorDictMath, CopyIsUpdateInPlace) {
  auto t = make_fixture();
  Frozen identity = Frozen::of(t);
  auto src = nonzero_other(t.exclude({"label"}));
  t.lock_();
  auto ops = count_ops({"aten::_foreach_copy_"}, [&] { t.copy_(src); });
  for (const auto& k : ops_test::fixture_leaves())
    EXPECT_TRUE(torch::equal(t.get(k), src.get(k))) << k;
  for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
  EXPECT_EQ(ops["aten::_foreach_copy_"], kFusedCopy ? 1 : 0);
  // A part of the keys, other dtypes, a non-tensor: update_'s rules.
  td::TensorDict part({{"a", torch::full({4, 3, 2}, 7, torch::kDouble)}, {"label", "y"}}, {4, 3});
  t.copy_(part);
  EXPECT_TRUE(torch::equal(t.get("a"), torch::full({4, 3, 2}, 7.0)));
  EXPECT_EQ(t.get("a").scalar_type(), torch::kFloat);
  EXPECT_EQ(t.get_non_tensor("label"), nlohmann::json("y"));
  td::TensorDict unknown({{"zzz", torch::zeros({4, 3})}}, {4, 3});
  OPS_EXPECT_THROW_MSG(t.copy_(unknown), td::KeyError, "zzz");
}
