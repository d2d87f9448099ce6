// SumTree and MinTree against brute force over random data: many sizes
// (powers of two and not), zero weights, repeated indices in one set.
#include <tensordict/rb/segment_tree.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace rb = tensordict::rb;

namespace {

at::Tensor longs(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); }
at::Tensor doubles(const std::vector<double>& v) { return torch::tensor(v, torch::kDouble); }

// The reference: the leaf where the running sum first exceeds the mass.
int64_t brute_prefix(const std::vector<double>& w, double mass) {
  double run = 0;
  int64_t last_positive = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    run += w[i];
    if (w[i] > 0) last_positive = static_cast<int64_t>(i);
    if (mass < run && w[i] > 0) return static_cast<int64_t>(i);
  }
  return last_positive;
}

}  // namespace

TEST(SegmentTree, RandomUpdatesMatchBruteForce) {
  std::mt19937_64 rng(7);
  for (int64_t capacity : {1, 2, 3, 5, 8, 17, 64, 100, 1000, 4097}) {
    rb::SumTree sum(capacity);
    rb::MinTree min(capacity);
    std::vector<double> w(static_cast<size_t>(capacity), 0.0);
    std::vector<double> m(static_cast<size_t>(capacity), std::numeric_limits<double>::infinity());
    std::uniform_int_distribution<int64_t> row(0, capacity - 1);
    std::uniform_real_distribution<double> value(0.0, 10.0);
    for (int round = 0; round < 20; ++round) {
      const int64_t k = 1 + row(rng) % 40;
      std::vector<int64_t> idx;
      std::vector<double> val;
      for (int64_t j = 0; j < k; ++j) {
        idx.push_back(row(rng));
        val.push_back(j % 5 == 0 ? 0.0 : value(rng));  // zero weights too
      }
      sum.set(longs(idx), doubles(val));
      min.set(longs(idx), doubles(val));
      for (size_t j = 0; j < idx.size(); ++j) w[idx[j]] = m[idx[j]] = val[j];  // last wins
      double total = 0;
      for (double x : w) total += x;
      ASSERT_NEAR(sum.total(), total, 1e-9 * std::max(1.0, total)) << "capacity " << capacity;
      ASSERT_EQ(min.min(), *std::min_element(m.begin(), m.end())) << "capacity " << capacity;
      ASSERT_TRUE(torch::equal(sum.leaves(), doubles(w)));
      ASSERT_TRUE(torch::equal(min.leaves(), doubles(m)));
      ASSERT_TRUE(torch::equal(sum.get(longs(idx)), doubles([&] {
                                 std::vector<double> g;
                                 for (int64_t i : idx) g.push_back(w[i]);
                                 return g;
                               }())));
      if (total <= 0) continue;
      std::vector<double> masses;
      for (int j = 0; j < 200; ++j)
        masses.push_back(std::uniform_real_distribution<>(0, total)(rng));
      at::Tensor found = sum.find_prefix_sum(doubles(masses));
      ASSERT_EQ(found.scalar_type(), at::kLong);
      for (size_t j = 0; j < masses.size(); ++j) {
        const int64_t got = found[j].item<int64_t>();
        const int64_t want = brute_prefix(w, masses[j]);
        if (got != want) {
          // Only a rounding tie at a boundary may differ: both prefix sums
          // must then straddle the mass within rounding.
          double before = 0;
          for (int64_t i = 0; i < got; ++i) before += w[i];
          ASSERT_NEAR(before, masses[j], 1e-9 * total) << "capacity " << capacity;
        }
        ASSERT_GT(w[got], 0.0) << "a zero-weight leaf was chosen";
      }
    }
  }
}

TEST(SegmentTree, RepeatedIndexLastWins) {
  rb::SumTree sum(10);
  rb::MinTree min(10);
  sum.set(longs({3, 3, 3}), doubles({1, 5, 2}));
  min.set(longs({3, 3, 3}), doubles({1, 5, 2}));
  EXPECT_EQ(sum.total(), 2.0);
  EXPECT_EQ(min.min(), 2.0);
  EXPECT_EQ(sum.get(longs({3})).item<double>(), 2.0);
}

TEST(SegmentTree, BroadcastsOneValue) {
  rb::SumTree sum(6);
  sum.set(longs({0, 2, 4}), doubles({1.5}));
  EXPECT_EQ(sum.total(), 4.5);
}

TEST(SegmentTree, PrefixSumFrequenciesFollowWeights) {
  rb::SumTree sum(5);
  sum.set(longs({0, 1, 2, 3, 4}), doubles({1, 0, 2, 3, 4}));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const int64_t draws = 100000;
  at::Tensor rows = sum.find_prefix_sum(at::rand({draws}, gen, at::kDouble) * sum.total());
  at::Tensor counts = at::bincount(rows, {}, 5).to(at::kDouble);
  const double expected[] = {0.1, 0.0, 0.2, 0.3, 0.4};
  double chi2 = 0;
  for (int i = 0; i < 5; ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i].item<double>(), 0.0);
      continue;
    }
    const double e = expected[i] * draws;
    chi2 += std::pow(counts[i].item<double>() - e, 2) / e;
  }
  EXPECT_LT(chi2, 16.3);  // chi-square, 3 degrees of freedom, p = 0.001
}

TEST(SegmentTree, MassAtOrPastTotalGivesLastPositiveLeaf) {
  rb::SumTree sum(8);
  sum.set(longs({1, 5}), doubles({1, 1}));
  at::Tensor rows = sum.find_prefix_sum(doubles({0.0, 1.0, 2.0, 50.0}));
  EXPECT_TRUE(torch::equal(rows, longs({1, 5, 5, 5})));
}

TEST(SegmentTree, LoadLeavesRebuilds) {
  rb::SumTree a(37), b(37);
  rb::MinTree ma(37), mb(37);
  at::Tensor idx = at::arange(0, 37, 3, at::kLong);
  at::Tensor val = at::rand({idx.numel()}, at::kDouble);
  a.set(idx, val);
  ma.set(idx, val);
  b.load_leaves(a.leaves());
  mb.load_leaves(ma.leaves());
  EXPECT_DOUBLE_EQ(b.total(), a.total());
  EXPECT_EQ(mb.min(), ma.min());
  at::Tensor masses = at::rand({100}, at::kDouble) * a.total();
  EXPECT_TRUE(torch::equal(a.find_prefix_sum(masses), b.find_prefix_sum(masses)));
}

// Sets of more leaves than a level has nodes recompute the top of the tree
// whole rather than path by path: every node must still be what a rebuild
// from the leaves gives, to the bit (a stale node would show in the total or
// send a mass to another leaf).
TEST(SegmentTree, LargeBatchedSetsEqualARebuild) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (int64_t capacity : {1, 6, 1000, 100000}) {
    rb::SumTree sum(capacity);
    rb::MinTree min(capacity);
    for (int64_t k : {1, 7, 300, 5000, 1}) {
      const at::Tensor idx = at::randint(capacity, {k}, gen, at::kLong);
      const at::Tensor val = at::rand({k}, gen, at::kDouble) * 10;
      sum.set(idx, val);
      min.set(idx, val);
      rb::SumTree rebuilt(capacity);
      rb::MinTree rebuilt_min(capacity);
      rebuilt.load_leaves(sum.leaves());
      rebuilt_min.load_leaves(min.leaves());
      ASSERT_EQ(sum.total(), rebuilt.total()) << "capacity " << capacity << ", " << k << " leaves";
      ASSERT_EQ(min.min(), rebuilt_min.min()) << "capacity " << capacity << ", " << k << " leaves";
      const at::Tensor masses = at::rand({2000}, gen, at::kDouble) * sum.total();
      ASSERT_TRUE(torch::equal(sum.find_prefix_sum(masses), rebuilt.find_prefix_sum(masses)))
          << "capacity " << capacity << ", " << k << " leaves";
    }
  }
}

TEST(SegmentTree, BadInputChangesNothing) {
  rb::SumTree sum(4);
  rb::MinTree min(4);
  sum.set(longs({0, 1}), doubles({1, 2}));
  min.set(longs({0, 1}), doubles({1, 2}));
  EXPECT_THROW(sum.set(longs({0, 4}), doubles({5, 5})), tensordict::IndexError);
  EXPECT_THROW(sum.set(longs({0, -1}), doubles({5, 5})), tensordict::IndexError);
  EXPECT_THROW(sum.set(longs({0, 2}), doubles({5, -1})), tensordict::ValueError);
  EXPECT_THROW(sum.set(longs({0, 2}), doubles({5, NAN})), tensordict::ValueError);
  EXPECT_THROW(sum.set(longs({0, 2}), doubles({5, INFINITY})), tensordict::ValueError);
  EXPECT_THROW(min.set(longs({0, 2}), doubles({5, NAN})), tensordict::ValueError);
  EXPECT_THROW(sum.set(longs({0, 2}), doubles({5, 6, 7})), tensordict::ShapeError);
  EXPECT_THROW(sum.set(doubles({0.0}), doubles({5})), tensordict::TypeError);
  EXPECT_THROW(sum.load_leaves(doubles({1, 1, 1})), tensordict::ShapeError);
  EXPECT_THROW(sum.load_leaves(torch::ones({4}, torch::kFloat)), tensordict::TypeError);
  EXPECT_THROW(sum.load_leaves(doubles({1, 1, -1, 1})), tensordict::ValueError);
  EXPECT_TRUE(torch::equal(sum.leaves(), doubles({1, 2, 0, 0})));
  EXPECT_EQ(sum.total(), 3.0);
  EXPECT_EQ(min.min(), 1.0);
  EXPECT_THROW(sum.find_prefix_sum(doubles({-1})), tensordict::ValueError);
  EXPECT_THROW(rb::SumTree(0), tensordict::ValueError);
  rb::SumTree empty(3);
  EXPECT_THROW(empty.find_prefix_sum(doubles({0})), tensordict::ValueError);
  // MinTree accepts +inf: the value of an unset leaf.
  min.set(longs({0}), doubles({INFINITY}));
  EXPECT_EQ(min.min(), 2.0);
}
