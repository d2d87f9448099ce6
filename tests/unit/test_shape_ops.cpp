// Shape operations act on batch dims only; every leaf gets the torch op with
// its feature dims appended, nested tensordicts keep their extra batch dims.
#include "pch.h"

#include "support/ops_test_helpers.h"

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

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

constexpr int64_t kB = 2;  // batch dims of the fixture

// `batch` followed by the feature dims of `leaf` (those after the root batch).
std::vector<int64_t> with_features(const Shape& batch, const at::Tensor& leaf, int64_t B = kB) {
  Shape out = batch;
  for (int64_t i = B; i < leaf.dim(); ++i) out.push_back(leaf.size(i));
  return out;
}

// Every nested tensordict of `t` is locked (or unlocked).
void expect_locked_everywhere(const td::TensorDictBase& t, bool locked) {
  EXPECT_EQ(t.is_locked(), locked);
  EXPECT_EQ(t.get_tensordict("nested").is_locked(), locked);
  EXPECT_EQ(t.get_tensordict({"nested", "deeper"}).is_locked(), locked);
}

}  // namespace

// ---- view / reshape ----------------------------------------------------------------

TEST(TensorDictShape, ViewAndReshapeMatchTorchLeafByLeaf) {
  auto t = make_fixture();
  std::vector<std::pair<Shape, Shape>> cases = {
      {{12}, {12}},           {{-1}, {12}},       {{2, 6}, {2, 6}},       {{3, -1}, {3, 4}},
      {{2, 2, 3}, {2, 2, 3}}, {{1, 12}, {1, 12}}, {{-1, 1, 2}, {6, 1, 2}}};
  for (const auto& [shape, target] : cases) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    auto v = t.view(shape);
    expect_fixture_batches(v, target);
    expect_leafwise(v, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
      return leaf.view(with_features(target, leaf));
    });
    for (const auto& k : ops_test::fixture_leaves())
      EXPECT_TRUE(v.get(k).is_alias_of(t.get(k))) << k << " is not a view";
    auto r = t.reshape(shape);
    expect_fixture_batches(r, target);
    expect_leafwise(r, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
      return leaf.reshape(with_features(target, leaf));
    });
  }
}

TEST(TensorDictShape, ViewAndReshapeReturnSelfWhenUnchanged) {
  auto t = make_fixture();
  EXPECT_TRUE(t.view({4, 3}).is_same(t));
  EXPECT_TRUE(t.view({-1, 3}).is_same(t));
  EXPECT_TRUE(t.view({4, -1}).is_same(t));
  EXPECT_TRUE(t.reshape({4, 3}).is_same(t));
  EXPECT_TRUE(t.reshape({-1, 3}).is_same(t));
  EXPECT_FALSE(t.view({12}).is_same(t));
}

TEST(TensorDictShape, BadViewShapesAreShapeErrors) {
  auto t = make_fixture();
  OPS_EXPECT_THROW_MSG(t.view({5, -1}), td::ShapeError, "[5, -1]", "[4, 3]");
  OPS_EXPECT_THROW_MSG(t.view({-1, -1}), td::ShapeError, "one dimension");
  OPS_EXPECT_THROW_MSG(t.view({2, 2}), td::ShapeError, "[2, 2]", "[4, 3]");
  OPS_EXPECT_THROW_MSG(t.view({13}), td::ShapeError, "[13]");
  OPS_EXPECT_THROW_MSG(t.view({-2, -6}), td::ShapeError, "-2");
  OPS_EXPECT_THROW_MSG(t.reshape({0, -1}), td::ShapeError, "[0, -1]");
  OPS_EXPECT_THROW_MSG(t.reshape({7}), td::ShapeError, "[7]");
  // A view of non-contiguous leaves fails naming the leaf; reshape copies.
  auto tr = t.transpose(0, 1);
  OPS_EXPECT_THROW_MSG(tr.view({12}), td::ShapeError, "view");
  auto r = tr.reshape({12});
  expect_fixture_batches(r, {12});
  expect_leafwise(r, tr, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return leaf.reshape(with_features({12}, leaf));
  });
}

TEST(TensorDictShape, FlattenAndUnflatten) {
  auto t = make_fixture();
  auto f = t.flatten();
  expect_fixture_batches(f, {12});
  expect_leafwise(f, t,
                  [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.flatten(0, 1); });
  EXPECT_TRUE(t.flatten(0, 1).get("a").is_alias_of(t.get("a")));
  EXPECT_TRUE(t.flatten(1, 1).is_same(t));
  EXPECT_TRUE(t.flatten(-1, -1).is_same(t));

  auto u3 = t.unflatten(0, {2, 2});
  expect_fixture_batches(u3, {2, 2, 3});
  expect_leafwise(u3, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return leaf.view(with_features({2, 2, 3}, leaf));
  });
  auto back = u3.flatten(0, 1);
  expect_fixture_batches(back, {4, 3});
  EXPECT_TRUE(back.equal(t));
  // flatten of a middle range on a 3-D batch.
  auto mid = u3.flatten(1, 2);
  expect_fixture_batches(mid, {2, 6});
  expect_leafwise(mid, u3,
                  [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.flatten(1, 2); });

  auto u = t.unflatten(-1, {3, 1});
  expect_fixture_batches(u, {4, 3, 1});
  auto w = t.unflatten(1, {-1, 1});
  expect_fixture_batches(w, {4, 3, 1});
  EXPECT_EQ(sizes_of(w.get({"nested", "deeper", "f"})), (Shape{4, 3, 1, 2, 3}));

  OPS_EXPECT_THROW_MSG(t.unflatten(1, {2, 2}), td::ShapeError, "[2, 2]");
  OPS_EXPECT_THROW_MSG(t.unflatten(2, {1, 3}), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.flatten(0, 2), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.flatten(1, 0), td::IndexError, "start_dim");
  td::TensorDict z({{"x", torch::ones({2})}}, {});
  OPS_EXPECT_THROW_MSG(z.flatten(), td::IndexError, "batch");
}

// ---- squeeze / unsqueeze --------------------------------------------------------------

TEST(TensorDictShape, UnsqueezeAtEveryPositionIncludingNegative) {
  auto t = make_fixture();
  for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
    SCOPED_TRACE(dim);
    int64_t d = dim < 0 ? dim + kB + 1 : dim;
    Shape target = {4, 3};
    target.insert(target.begin() + d, 1);
    auto u = t.unsqueeze(dim);
    expect_fixture_batches(u, target);
    expect_leafwise(
        u, t, [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.unsqueeze(d); });
    EXPECT_TRUE(u.get({"nested", "deeper", "e"}).is_alias_of(t.get({"nested", "deeper", "e"})));
  }
  OPS_EXPECT_THROW_MSG(t.unsqueeze(3), td::IndexError, "3");
  OPS_EXPECT_THROW_MSG(t.unsqueeze(-4), td::IndexError, "-4");
}

TEST(TensorDictShape, SqueezeOneDimOrAll) {
  auto t = make_fixture();
  auto u = t.unsqueeze(0).unsqueeze(2);  // [1, 4, 1, 3]
  expect_fixture_batches(u, {1, 4, 1, 3});
  auto s2 = u.squeeze(2);
  expect_fixture_batches(s2, {1, 4, 3});
  expect_leafwise(s2, u,
                  [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.squeeze(2); });
  auto sneg = u.squeeze(-2);
  expect_fixture_batches(sneg, {1, 4, 3});
  EXPECT_TRUE(sneg.equal(s2));
  // A dim that is not 1: no-op, the same object.
  EXPECT_TRUE(u.squeeze(1).is_same(u));
  EXPECT_TRUE(t.squeeze(0).is_same(t));
  // All singleton batch dims, feature dims of size 1 untouched ("c" is [.., 1]).
  auto all = u.squeeze();
  expect_fixture_batches(all, {4, 3});
  EXPECT_TRUE(all.equal(t));
  EXPECT_EQ(sizes_of(all.get("c")), (Shape{4, 3, 1}));
  EXPECT_TRUE(t.squeeze().is_same(t));
  OPS_EXPECT_THROW_MSG(u.squeeze(4), td::IndexError, "4");
  OPS_EXPECT_THROW_MSG(t.squeeze(-3), td::IndexError, "-3");
}

// ---- permute / transpose ------------------------------------------------------------------

TEST(TensorDictShape, PermuteAndTranspose) {
  auto t = make_fixture();
  auto p = t.permute({1, 0});
  expect_fixture_batches(p, {3, 4});
  expect_leafwise(
      p, t, [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.transpose(0, 1); });
  EXPECT_TRUE(p.get("a").is_alias_of(t.get("a")));
  auto pn = t.permute({-1, 0});
  EXPECT_TRUE(pn.equal(p));
  EXPECT_TRUE(t.permute({0, 1}).is_same(t));
  EXPECT_TRUE(t.permute({-2, -1}).is_same(t));

  auto tr = t.transpose(0, 1);
  expect_fixture_batches(tr, {3, 4});
  EXPECT_TRUE(tr.equal(p));
  EXPECT_TRUE(t.transpose(-1, -2).equal(p));
  EXPECT_TRUE(t.transpose(1, 1).is_same(t));

  auto u = t.unflatten(0, {2, 2});  // [2, 2, 3]
  auto p3 = u.permute({2, 0, 1});
  expect_fixture_batches(p3, {3, 2, 2});
  expect_leafwise(p3, u, [&](const at::Tensor& leaf, const td::NestedKey&) {
    std::vector<int64_t> dims = {2, 0, 1};
    for (int64_t i = 3; i < leaf.dim(); ++i) dims.push_back(i);
    return leaf.permute(dims);
  });

  OPS_EXPECT_THROW_MSG(t.permute({0}), td::IndexError, "1 dims", "2 batch");
  OPS_EXPECT_THROW_MSG(t.permute({0, 1, 2}), td::IndexError, "3 dims");
  OPS_EXPECT_THROW_MSG(t.permute({0, 0}), td::IndexError, "repeated");
  OPS_EXPECT_THROW_MSG(t.permute({0, 2}), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.transpose(0, 2), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.transpose(-3, 0), td::IndexError, "-3");
}

// ---- expand --------------------------------------------------------------------------------

TEST(TensorDictShape, ExpandWithNewLeadingDims) {
  auto t = make_fixture();
  auto e = t.expand({5, 4, 3});
  expect_fixture_batches(e, {5, 4, 3});
  expect_leafwise(e, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return leaf.expand(with_features({5, 4, 3}, leaf));
  });
  EXPECT_TRUE(e.get({"nested", "deeper", "f"}).is_alias_of(t.get({"nested", "deeper", "f"})));
  auto e2 = t.expand({2, -1, -1});
  expect_fixture_batches(e2, {2, 4, 3});
  EXPECT_TRUE(t.expand({4, 3}).is_same(t));
  EXPECT_TRUE(t.expand({-1, -1}).is_same(t));

  // Size-1 dims grow.
  auto col = t.index({Slice(), Slice(0, 1)});  // [4, 1]
  auto grown = col.expand({4, 5});
  expect_fixture_batches(grown, {4, 5});
  expect_leafwise(grown, col, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return leaf.expand(with_features({4, 5}, leaf));
  });

  OPS_EXPECT_THROW_MSG(t.expand({4, 4}), td::ShapeError, "[4, 3]", "[4, 4]");
  OPS_EXPECT_THROW_MSG(t.expand({3}), td::ShapeError, "[3]", "fewer dims");
  OPS_EXPECT_THROW_MSG(t.expand({2, 5, 3}), td::ShapeError, "[2, 5, 3]");
}

// ---- unbind / split / chunk / narrow ---------------------------------------------------------

TEST(TensorDictShape, UnbindAlongEachDim) {
  auto t = make_fixture();
  for (int64_t dim : {0, 1, -1, -2}) {
    SCOPED_TRACE(dim);
    int64_t d = dim < 0 ? dim + kB : dim;
    auto parts = t.unbind(dim);
    ASSERT_EQ(static_cast<int64_t>(parts.size()), t.size(d));
    for (int64_t i = 0; i < static_cast<int64_t>(parts.size()); ++i) {
      SCOPED_TRACE(i);
      expect_fixture_batches(parts[i], {d == 0 ? 3 : 4});
      expect_leafwise(parts[i], t, [&](const at::Tensor& leaf, const td::NestedKey&) {
        return leaf.select(d, i);
      });
      EXPECT_TRUE(parts[i].get({"nested", "d"}).is_alias_of(t.get({"nested", "d"})));
      EXPECT_FALSE(parts[i].is_locked());
    }
  }
  OPS_EXPECT_THROW_MSG(t.unbind(2), td::IndexError, "2");
}

TEST(TensorDictShape, SplitBySizeAndBySizes) {
  auto t = make_fixture();
  struct Case {
    std::string name;
    std::function<std::vector<td::TensorDictBase>()> run;
    std::function<std::vector<at::Tensor>(const at::Tensor&)> by_hand;
    int64_t dim;
    std::vector<Shape> batches;
  };
  std::vector<Case> cases = {
      {"split(2)",
       [&] { return t.split(2); },
       [](const at::Tensor& x) { return x.split(2, 0); },
       0,
       {{2, 3}, {2, 3}}},
      {"split(3)",
       [&] { return t.split(3); },
       [](const at::Tensor& x) { return x.split(3, 0); },
       0,
       {{3, 3}, {1, 3}}},
      {"split(2, 1)",
       [&] { return t.split(2, 1); },
       [](const at::Tensor& x) { return x.split(2, 1); },
       1,
       {{4, 2}, {4, 1}}},
      {"split(2, -1)",
       [&] { return t.split(2, -1); },
       [](const at::Tensor& x) { return x.split(2, 1); },
       1,
       {{4, 2}, {4, 1}}},
      {"split({1, 3})",
       [&] {
         return t.split(at::IntArrayRef{1, 3});
       },
       [](const at::Tensor& x) {
         return x.split_with_sizes({1, 3}, 0);
       },
       0,
       {{1, 3}, {3, 3}}},
      {"split({1, 0, 2}, 1)",
       [&] {
         return t.split(at::IntArrayRef{1, 0, 2}, 1);
       },
       [](const at::Tensor& x) {
         return x.split_with_sizes({1, 0, 2}, 1);
       },
       1,
       {{4, 1}, {4, 0}, {4, 2}}},
      {"chunk(2)",
       [&] { return t.chunk(2); },
       [](const at::Tensor& x) { return x.chunk(2, 0); },
       0,
       {{2, 3}, {2, 3}}},
      {"chunk(3)",
       [&] { return t.chunk(3); },
       [](const at::Tensor& x) { return x.chunk(3, 0); },
       0,
       {{2, 3}, {2, 3}}},
      {"chunk(3, 1)",
       [&] { return t.chunk(3, 1); },
       [](const at::Tensor& x) { return x.chunk(3, 1); },
       1,
       {{4, 1}, {4, 1}, {4, 1}}},
      {"chunk(5, 1)",
       [&] { return t.chunk(5, 1); },
       [](const at::Tensor& x) { return x.chunk(5, 1); },
       1,
       {{4, 1}, {4, 1}, {4, 1}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto parts = c.run();
    ASSERT_EQ(parts.size(), c.batches.size());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      SCOPED_TRACE(i);
      expect_fixture_batches(parts[i], c.batches[i]);
      expect_leafwise(parts[i], t, [&](const at::Tensor& leaf, const td::NestedKey&) {
        auto pieces = c.by_hand(leaf);
        return pieces.at(i);
      });
      if (parts[i].numel() > 0) EXPECT_TRUE(parts[i].get("a").is_alias_of(t.get("a")));
    }
  }
  OPS_EXPECT_THROW_MSG(t.split(at::IntArrayRef{1, 2}), td::ShapeError, "[1, 2]", "4");
  OPS_EXPECT_THROW_MSG(t.split(at::IntArrayRef{2, 2}, 1), td::ShapeError, "[2, 2]", "3");
  OPS_EXPECT_THROW_MSG(t.split(0), td::ValueError, "positive");
  OPS_EXPECT_THROW_MSG(t.split(2, 2), td::IndexError, "2");
  OPS_EXPECT_THROW_MSG(t.chunk(0), td::ValueError, "positive");
}

TEST(TensorDictShape, NarrowIsAView) {
  auto t = make_fixture();
  auto n = t.narrow(1, 1, 2);
  expect_fixture_batches(n, {4, 2});
  expect_leafwise(
      n, t, [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.narrow(1, 1, 2); });
  n.get({"nested", "deeper", "e"}).fill_(0.0);
  EXPECT_EQ(
      t.get({"nested", "deeper", "e"}).index({Slice(), Slice(1, 3)}).abs().sum().item<double>(),
      0.0);
  auto n0 = t.narrow(0, -2, 2);
  expect_fixture_batches(n0, {2, 3});
  expect_leafwise(
      n0, t, [&](const at::Tensor& leaf, const td::NestedKey&) { return leaf.narrow(0, 2, 2); });
  OPS_EXPECT_THROW_MSG(t.narrow(0, 3, 2), td::IndexError, "[3, 5)", "size 4");
  OPS_EXPECT_THROW_MSG(t.narrow(2, 0, 1), td::IndexError, "2");
}

// ---- gather / masked ops / where ---------------------------------------------------------------

TEST(TensorDictShape, GatherExpandsTheIndexToTheRight) {
  auto t = make_fixture();
  auto idx = torch::tensor({{2, 0}, {1, 1}, {0, 2}, {2, 2}}, torch::kLong);  // [4, 2]
  td::TensorDict g = t.gather(1, idx);
  expect_fixture_batches(g, {4, 2});
  expect_leafwise(g, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
    Shape view_shape = {4, 2};
    view_shape.resize(leaf.dim(), 1);
    return leaf.gather(1, idx.view(view_shape).expand(with_features({4, 2}, leaf)));
  });
  // By hand for one leaf with an extra nested batch dim.
  auto e = t.get({"nested", "deeper", "e"});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      EXPECT_TRUE(
          torch::equal(g.get({"nested", "deeper", "e"})[i][j], e[i][idx[i][j].item<int64_t>()]));

  auto idx0 = torch::tensor({{3, 0, 1}, {0, 0, 0}}, torch::kLong);  // [2, 3] along dim 0
  td::TensorDict g0 = t.gather(0, idx0);
  expect_fixture_batches(g0, {2, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_TRUE(torch::equal(g0.get("a")[i][j], t.get("a")[idx0[i][j].item<int64_t>()][j]));

  OPS_EXPECT_THROW_MSG(t.gather(1, torch::zeros({4}, torch::kLong)), td::ShapeError, "[4]");
  OPS_EXPECT_THROW_MSG(t.gather(2, idx), td::IndexError, "2");
}

TEST(TensorDictShape, MaskedFillAndMaskedFillInPlace) {
  auto t = make_fixture();
  auto mask = torch::tensor(
      {{true, false, true}, {false, false, false}, {true, true, false}, {false, true, true}});
  auto expand_right = [](const at::Tensor& m, const at::Tensor& leaf) {
    Shape s = sizes_of(m);
    s.resize(leaf.dim(), 1);
    return m.view(s).expand_as(leaf);
  };
  td::TensorDict f = t.masked_fill(mask, 0.5);
  expect_fixture_batches(f, {4, 3});
  expect_leafwise(f, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return leaf.masked_fill(expand_right(mask, leaf), 0.5);
  });
  EXPECT_EQ(f.get("b")[0][0].item<int64_t>(), 0);  // 0.5 cast to int64
  EXPECT_TRUE(f.get("c")[2][1].item<bool>());

  auto rows = torch::tensor({false, true, false, true});
  td::TensorDict f1 = t.masked_fill(rows, -3);
  expect_leafwise(f1, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return leaf.masked_fill(expand_right(rows, leaf), -3);
  });

  OPS_EXPECT_THROW_MSG(t.masked_fill(torch::ones({3, 4}, torch::kBool), 0), td::ShapeError,
                       "[3, 4]", "[4, 3]");
  OPS_EXPECT_THROW_MSG(t.masked_fill(torch::ones({4, 3, 2}, torch::kBool), 0), td::ShapeError,
                       "[4, 3, 2]");

  // In place, on a locked tensordict too.
  auto before = t.clone();
  Frozen identity = Frozen::of(t);
  t.lock_();
  td::TensorDictBase& ret = t.masked_fill_(mask, 7);
  EXPECT_EQ(&ret, static_cast<td::TensorDictBase*>(&t));
  expect_leafwise(t, before, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return leaf.masked_fill(expand_right(mask, leaf), 7);
  });
  for (const auto& [k, pair] : identity.leaves) EXPECT_TRUE(t.get(k).is_same(pair.first)) << k;
  OPS_EXPECT_THROW_MSG(t.masked_fill_(torch::ones({4, 2}, torch::kBool), 0), td::ShapeError,
                       "[4, 2]");
}

TEST(TensorDictShape, WhereWithATensorDictOrAScalar) {
  auto t = make_fixture();
  auto other = t.apply([](const at::Tensor& x) {
    return x.scalar_type() == torch::kBool ? x.logical_not() : x * 100 + 1;
  });
  auto cond = torch::tensor(
      {{true, false, true}, {false, false, false}, {true, true, false}, {false, true, true}});
  auto expand_right = [](const at::Tensor& m, const at::Tensor& leaf) {
    Shape s = sizes_of(m);
    s.resize(leaf.dim(), 1);
    return m.view(s).expand_as(leaf);
  };
  td::TensorDict w = t.where(cond, other);
  expect_fixture_batches(w, {4, 3});
  expect_leafwise(w, t, [&](const at::Tensor& leaf, const td::NestedKey& k) {
    return torch::where(expand_right(cond, leaf), leaf, other.get(k));
  });
  td::TensorDict ws = t.where(cond, 2.0);
  expect_fixture_batches(ws, {4, 3});
  expect_leafwise(ws, t, [&](const at::Tensor& leaf, const td::NestedKey&) {
    return torch::where(expand_right(cond, leaf), leaf, torch::scalar_tensor(2.0, leaf.options()));
  });
  EXPECT_EQ(ws.get("b")[1][1].item<int64_t>(), 2);
  // A row condition.
  auto rows = torch::tensor({true, false, false, true});
  td::TensorDict wr = t.where(rows, other);
  EXPECT_TRUE(
      torch::equal(wr.get({"nested", "deeper", "f"})[1], other.get({"nested", "deeper", "f"})[1]));
  EXPECT_TRUE(
      torch::equal(wr.get({"nested", "deeper", "f"})[0], t.get({"nested", "deeper", "f"})[0]));

  OPS_EXPECT_THROW_MSG(t.where(torch::ones({4, 2}, torch::kBool), other), td::ShapeError, "[4, 2]");
  OPS_EXPECT_THROW_MSG(t.where(cond, other.exclude({"b"})), td::KeyError, "'b'");
}

// ---- lock propagation ------------------------------------------------------------------------

TEST(TensorDictShape, ViewsOfAMemmapOrSharedTensorDictKeepTheirStorageStatus) {
  // Python: shape ops of a memory-mapped (shared) tensordict are memory-mapped
  // (shared) and locked, as unbind and split results are.
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("td-shape-memmap-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  td::TensorDict src({{"a", torch::arange(24, torch::kFloat).reshape({4, 3, 2})}}, {4, 3});
  src.set({"nested", "d"}, torch::zeros({4, 3}));
  td::TensorDictBase m = src.memmap(dir.string());
  td::TensorDictBase shared = src.clone();
  shared.share_memory_();
  for (const auto* t : {&m, &shared}) {
    const bool is_memmap = t->is_memmap();
    SCOPED_TRACE(is_memmap ? "memmap" : "shared");
    const std::vector<std::pair<const char*, td::TensorDictBase>> views = {
        {"view", t->view({12})},
        {"reshape", t->reshape({2, 6})},
        {"permute", t->permute({1, 0})},
        {"transpose", t->transpose(0, 1)},
        {"unsqueeze", t->unsqueeze(1)},
        {"squeeze", t->unsqueeze(0).squeeze(0)},
        {"squeeze()", t->unsqueeze(2).squeeze()},
        {"flatten", t->flatten()},
        {"unflatten", t->unflatten(0, {2, 2})},
    };
    for (const auto& [name, v] : views) {
      SCOPED_TRACE(name);
      EXPECT_EQ(v.is_memmap(), is_memmap);
      EXPECT_EQ(v.is_shared(), !is_memmap);
      EXPECT_TRUE(v.is_locked());
    }
    // A reshape that has to copy is not a view of the files: locked only.
    auto copied = t->permute({1, 0}).reshape({12});
    EXPECT_FALSE(copied.get("a").is_alias_of(t->get("a")));
    EXPECT_FALSE(copied.is_memmap());
    EXPECT_FALSE(copied.is_shared());
    EXPECT_TRUE(copied.is_locked());
    // Writes through a view reach the storage.
    t->view({12}).get("a").fill_(is_memmap ? 5.0 : 6.0);
    EXPECT_TRUE(at::equal(t->get("a"), torch::full({4, 3, 2}, is_memmap ? 5.0f : 6.0f)));
  }
  EXPECT_TRUE(at::equal(td::load_memmap(dir.string()).get("a"), torch::full({4, 3, 2}, 5.0f)));
  td::unlink_shared(shared.shared_name());
  fs::remove_all(dir);
}

TEST(TensorDictShape, ShapeOpsOfALockedTensorDictAreLocked) {
  auto t = make_fixture();
  // Unlocked source: unlocked results.
  expect_locked_everywhere(t.view({12}), false);
  expect_locked_everywhere(t.permute({1, 0}), false);
  t.lock_();
  SCOPED_TRACE("locked source");
  expect_locked_everywhere(t.view({12}), true);
  expect_locked_everywhere(t.view({2, 6}), true);
  expect_locked_everywhere(t.reshape({-1}), true);
  expect_locked_everywhere(t.flatten(), true);
  expect_locked_everywhere(t.unflatten(0, {2, 2}), true);
  expect_locked_everywhere(t.unsqueeze(-1), true);
  expect_locked_everywhere(t.unsqueeze(0).squeeze(0), true);
  expect_locked_everywhere(t.unsqueeze(0).squeeze(), true);
  expect_locked_everywhere(t.permute({1, 0}), true);
  expect_locked_everywhere(t.transpose(0, 1), true);
  expect_locked_everywhere(t.expand({2, 4, 3}), true);
  for (const auto& part : t.unbind(0)) expect_locked_everywhere(part, true);
  for (const auto& part : t.unbind(1)) expect_locked_everywhere(part, true);
  for (const auto& part : t.split(2)) expect_locked_everywhere(part, true);
  for (const auto& part : t.split(at::IntArrayRef{1, 2}, 1)) expect_locked_everywhere(part, true);
  for (const auto& part : t.chunk(2)) expect_locked_everywhere(part, true);
  // A locked view still refuses new keys.
  auto v = t.view({12});
  OPS_EXPECT_THROW_MSG(v.set("new", torch::zeros({12})), td::LockedError, "new");
}
