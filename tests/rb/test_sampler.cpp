// The samplers alone: uniform frequencies, epochs without replacement,
// prioritized frequencies ~ (p + eps)^alpha and importance weights against the
// formula computed by brute force, state round trips, errors.
#include <tensordict/rb/sampler.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

namespace rb = tensordict::rb;

namespace {

at::Generator seeded(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// Pearson's chi-square of observed counts against expected probabilities.
double chi_square(const at::Tensor& rows, const std::vector<double>& p) {
  at::Tensor counts = at::bincount(rows, {}, static_cast<int64_t>(p.size())).to(at::kDouble);
  const double n = static_cast<double>(rows.numel());
  double chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    chi2 += std::pow(counts[static_cast<int64_t>(i)].item<double>() - e, 2) / e;
  }
  return chi2;
}

}  // namespace

TEST(RandomSampler, UniformOverFilledRows) {
  rb::RandomSampler s;
  at::Generator g = seeded(1);
  at::Tensor rows = s.sample(10, 50000, &g).index;
  EXPECT_EQ(rows.scalar_type(), at::kLong);
  EXPECT_GE(rows.min().item<int64_t>(), 0);
  EXPECT_LT(rows.max().item<int64_t>(), 10);
  EXPECT_LT(chi_square(rows, std::vector<double>(10, 0.1)), 27.9);  // 9 dof, p = 0.001
  EXPECT_FALSE(s.sample(10, 4, &g).weight.defined());
  EXPECT_THROW(s.sample(0, 4, &g), tensordict::ValueError);
  EXPECT_THROW(s.sample(10, 0, &g), tensordict::ValueError);
}

TEST(RandomSampler, SameSeedSameRows) {
  rb::RandomSampler s;
  at::Generator a = seeded(5), b = seeded(5);
  EXPECT_TRUE(torch::equal(s.sample(100, 64, &a).index, s.sample(100, 64, &b).index));
}

TEST(SamplerWithoutReplacement, EveryRowOncePerEpoch) {
  rb::SamplerWithoutReplacement s;
  at::Generator g = seeded(2);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> seen;
    std::vector<int64_t> sizes;
    for (int b = 0; b < 4; ++b) {  // 10 rows in batches of 3: 3, 3, 3, 1
      at::Tensor rows = s.sample(10, 3, &g).index;
      sizes.push_back(rows.numel());
      for (int64_t i = 0; i < rows.numel(); ++i) seen.insert(rows[i].item<int64_t>());
      EXPECT_EQ(s.ran_out(), b == 3);
    }
    EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3, 1}));
    std::multiset<int64_t> all;
    for (int64_t i = 0; i < 10; ++i) all.insert(i);
    EXPECT_EQ(seen, all) << "epoch " << epoch;
  }
}

// Each epoch's order is a fresh uniform shuffle (the order of the last epoch
// is reshuffled in place): over 3 rows, the 6 orders come out equally often.
TEST(SamplerWithoutReplacement, EpochOrdersAreUniform) {
  rb::SamplerWithoutReplacement s;
  at::Generator g = seeded(12);
  const int64_t epochs = 12000;
  at::Tensor code = at::empty({epochs}, at::kLong);
  for (int64_t e = 0; e < epochs; ++e) {
    const at::Tensor rows = s.sample(3, 3, &g).index;
    ASSERT_TRUE(s.ran_out());
    // The order (a, b, c) as one of 6 codes: 2 * a + (b > c).
    const int64_t a = rows[0].item<int64_t>(), b = rows[1].item<int64_t>(),
                  c = rows[2].item<int64_t>();
    ASSERT_EQ(a + b + c, 3) << "not a permutation of 0, 1, 2";
    code[e] = 2 * a + (b > c ? 1 : 0);
  }
  EXPECT_LT(chi_square(code, std::vector<double>(6, 1.0 / 6)), 20.5);  // 5 dof, p = 0.001
}

// Rows past 2^32 are drawn too (a 64-bit draw), still below the size.
TEST(RandomSampler, DrawsBeyondThirtyTwoBits) {
  rb::RandomSampler s;
  at::Generator g = seeded(13);
  const int64_t size = (int64_t{1} << 34) + 5;
  const at::Tensor rows = s.sample(size, 4000, &g).index;
  EXPECT_GE(rows.min().item<int64_t>(), 0);
  EXPECT_LT(rows.max().item<int64_t>(), size);
  // Three quarters of the draws are past 2^32 (4,000 draws: 2,850 to 3,150 almost surely).
  const int64_t high = rows.ge(int64_t{1} << 32).sum().item<int64_t>();
  EXPECT_GT(high, 2850);
  EXPECT_LT(high, 3150);
}

TEST(SamplerWithoutReplacement, DropLastSkipsTheRemainder) {
  rb::SamplerWithoutReplacement s(/*drop_last=*/true);
  at::Generator g = seeded(3);
  std::set<int64_t> seen;
  for (int b = 0; b < 3; ++b) {
    at::Tensor rows = s.sample(10, 3, &g).index;
    ASSERT_EQ(rows.numel(), 3);
    for (int64_t i = 0; i < 3; ++i) seen.insert(rows[i].item<int64_t>());
  }
  EXPECT_EQ(seen.size(), 9u);  // distinct within the epoch
  EXPECT_TRUE(s.ran_out());
  EXPECT_EQ(s.remaining(), 10);  // a fresh epoch
  EXPECT_THROW(s.sample(2, 3, &g), tensordict::ValueError);
}

TEST(SamplerWithoutReplacement, NoShuffleKeepsOrderAndNewRowsRestart) {
  rb::SamplerWithoutReplacement s(false, /*shuffle=*/false);
  at::Generator g = seeded(4);
  EXPECT_TRUE(torch::equal(s.sample(5, 2, &g).index, torch::tensor({0, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(s.sample(5, 2, &g).index, torch::tensor({2, 3}, torch::kLong)));
  // More rows filled: a new epoch over all 7, as TorchRL.
  EXPECT_TRUE(torch::equal(s.sample(7, 3, &g).index, torch::tensor({0, 1, 2}, torch::kLong)));
  s.on_empty();
  EXPECT_EQ(s.remaining(), 0);
}

TEST(PrioritizedSampler, FrequenciesFollowPriorityToAlpha) {
  const double alpha = 0.7, eps = 1e-8;
  rb::PrioritizedSampler s(8, alpha, 0.5, eps);
  s.on_write(at::arange(6, at::kLong));
  const std::vector<double> p = {0.5, 2.0, 1.0, 4.0, 0.0, 3.0};
  s.update_priority(at::arange(6, at::kLong), torch::tensor(p, torch::kDouble));
  std::vector<double> w;
  double total = 0;
  for (double x : p) total += std::pow(x + eps, alpha);
  for (double x : p) w.push_back(std::pow(x + eps, alpha) / total);
  at::Generator g = seeded(5);
  at::Tensor rows = s.sample(6, 200000, &g).index;
  // Row 4 has weight eps^alpha ~ 2.5e-6 of the total: excluded from the test
  // by merging it with row 0 (expected count ~0.5).
  rows = at::where(rows == 4, at::zeros_like(rows), rows);
  std::vector<double> merged = w;
  merged[0] += merged[4];
  merged.erase(merged.begin() + 4);
  at::Tensor shifted = at::where(rows == 5, at::full_like(rows, 4), rows);
  EXPECT_LT(chi_square(shifted, merged), 18.5);  // 4 dof, p = 0.001
}

TEST(PrioritizedSampler, WeightsMatchTheFormula) {
  const double alpha = 0.6, beta = 0.4, eps = 1e-6;
  rb::PrioritizedSampler s(10, alpha, beta, eps);
  s.on_write(at::arange(5, at::kLong));
  const std::vector<double> p = {0.1, 1.0, 2.0, 0.5, 3.0};
  s.update_priority(at::arange(5, at::kLong), torch::tensor(p, torch::kDouble));
  double smallest = std::numeric_limits<double>::infinity();
  for (double x : p) smallest = std::min(smallest, std::pow(x + eps, alpha));
  at::Generator g = seeded(6);
  rb::SampleInfo info = s.sample(5, 1000, &g);
  ASSERT_EQ(info.weight.scalar_type(), at::kFloat);
  for (int64_t b = 0; b < 1000; ++b) {
    const int64_t i = info.index[b].item<int64_t>();
    const double expected = std::pow(std::pow(p[i] + eps, alpha) / smallest, -beta);
    ASSERT_NEAR(info.weight[b].item<float>(), expected, 1e-6 * expected);
  }
  // The rarest row has weight 1, the others less.
  EXPECT_LE(info.weight.max().item<float>(), 1.0f + 1e-6f);
}

TEST(PrioritizedSampler, WrittenRowsGetTheLargestPriority) {
  rb::PrioritizedSampler s(6, 0.5, 0.4, 0.01);
  EXPECT_TRUE(std::isnan(s.max_priority()));
  s.on_write(torch::tensor({0, 1}, torch::kLong));
  EXPECT_EQ(s.max_priority(), 1.0);  // TorchRL's default priority
  EXPECT_NEAR(s.sum_tree().get(torch::tensor({0}, torch::kLong)).item<double>(),
              std::pow(1.0 + 0.01, 0.5), 1e-12);
  s.update_priority(torch::tensor({1}, torch::kLong), torch::tensor({9.0}));
  s.on_write(torch::tensor({2}, torch::kLong));
  EXPECT_EQ(s.max_priority(), 9.0);
  EXPECT_NEAR(s.sum_tree().get(torch::tensor({2}, torch::kLong)).item<double>(),
              std::pow(9.0 + 0.01, 0.5), 1e-12);
  s.on_empty();
  EXPECT_TRUE(std::isnan(s.max_priority()));
  EXPECT_EQ(s.sum_tree().total(), 0.0);
}

TEST(PrioritizedSampler, BadUpdatesChangeNothing) {
  rb::PrioritizedSampler s(4, 0.6, 0.4);
  s.on_write(at::arange(4, at::kLong));
  const at::Tensor before = s.sum_tree().leaves();
  const at::Tensor idx = torch::tensor({0, 1}, torch::kLong);
  EXPECT_THROW(s.update_priority(torch::tensor({0, 4}, torch::kLong), torch::tensor({1.0, 2.0})),
               tensordict::IndexError);
  EXPECT_THROW(s.update_priority(torch::tensor({-1, 0}, torch::kLong), torch::tensor({1.0, 2.0})),
               tensordict::IndexError);
  EXPECT_THROW(s.update_priority(idx, torch::tensor({1.0, std::nan("")})), tensordict::ValueError);
  EXPECT_THROW(
      s.update_priority(idx, torch::tensor({1.0, std::numeric_limits<double>::infinity()})),
      tensordict::ValueError);
  EXPECT_THROW(s.update_priority(idx, torch::tensor({1.0, -2.0})), tensordict::ValueError);
  EXPECT_THROW(s.update_priority(idx, torch::tensor({1.0, 2.0, 3.0})), tensordict::ShapeError);
  EXPECT_TRUE(torch::equal(s.sum_tree().leaves(), before));
  EXPECT_EQ(s.max_priority(), 1.0);
  EXPECT_THROW(rb::PrioritizedSampler(4, -1, 0.4), tensordict::ValueError);
  EXPECT_THROW(rb::PrioritizedSampler(4, 0.6, -0.1), tensordict::ValueError);
  EXPECT_THROW(rb::PrioritizedSampler(0, 0.6, 0.4), tensordict::ValueError);
  rb::PrioritizedSampler unwritten(4, 0.6, 0.4);
  at::Generator g = seeded(1);
  EXPECT_THROW(unwritten.sample(4, 2, &g), tensordict::ValueError);
}

// update_priority sets both trees in one pass over their shared paths: the
// trees must equal those of separate SumTree and MinTree sets of the same
// weights, for few rows and for more than a tree level holds.
TEST(PrioritizedSampler, UpdatesSetBothTreesAsSeparateSetsWould) {
  const int64_t capacity = 5000;
  const double alpha = 0.7, eps = 1e-6;
  rb::PrioritizedSampler s(capacity, alpha, 0.4, eps);
  rb::SumTree sum(capacity);
  rb::MinTree min(capacity);
  at::Generator g = seeded(4);
  for (int64_t k : {3, 256, 4000, 1}) {
    const at::Tensor idx = at::randint(capacity, {k}, g, at::kLong);  // repeats too
    const at::Tensor p = at::rand({k}, g, at::kDouble) * 5;
    s.update_priority(idx, p);
    const at::Tensor w = at::empty({k}, at::kDouble);
    for (int64_t j = 0; j < k; ++j)
      w.data_ptr<double>()[j] = std::pow(p.data_ptr<double>()[j] + eps, alpha);
    sum.set(idx, w);
    min.set(idx, w);
    ASSERT_TRUE(torch::equal(s.sum_tree().leaves(), sum.leaves())) << k << " rows";
    ASSERT_TRUE(torch::equal(s.min_tree().leaves(), min.leaves())) << k << " rows";
    ASSERT_EQ(s.sum_tree().total(), sum.total()) << k << " rows";
    ASSERT_EQ(s.min_tree().min(), min.min()) << k << " rows";
  }
  // A priority whose weight overflows to +inf is refused; neither tree changes.
  rb::PrioritizedSampler squared(4, 2.0, 0.4);
  squared.on_write(at::arange(4, at::kLong));
  const at::Tensor sums = squared.sum_tree().leaves(), mins = squared.min_tree().leaves();
  EXPECT_THROW(squared.update_priority(torch::tensor({0, 1}, torch::kLong),
                                       torch::tensor({1.0, 1e200}, torch::kDouble)),
               tensordict::ValueError);
  EXPECT_TRUE(torch::equal(squared.sum_tree().leaves(), sums));
  EXPECT_TRUE(torch::equal(squared.min_tree().leaves(), mins));
}

TEST(PrioritizedSampler, StateRoundTrip) {
  rb::PrioritizedSampler a(16, 0.7, 0.5, 1e-4);
  a.on_write(at::arange(10, at::kLong));
  a.update_priority(at::arange(10, at::kLong), at::rand({10}, at::kDouble) * 5);
  rb::PrioritizedSamplerState st = a.state();
  EXPECT_EQ(st.max_capacity, 16);
  EXPECT_EQ(st.alpha, 0.7);
  EXPECT_EQ(st.min_leaves[12].item<double>(), std::numeric_limits<double>::infinity());
  rb::PrioritizedSampler b(16, 0.1, 0.1);
  b.load_state(st);
  EXPECT_EQ(b.alpha(), 0.7);
  EXPECT_EQ(b.eps(), 1e-4);
  EXPECT_EQ(b.max_priority(), a.max_priority());
  at::Generator ga = seeded(9), gb = seeded(9);
  rb::SampleInfo x = a.sample(10, 64, &ga), y = b.sample(10, 64, &gb);
  EXPECT_TRUE(torch::equal(x.index, y.index));
  EXPECT_TRUE(torch::equal(x.weight, y.weight));
  rb::PrioritizedSampler small(8, 0.7, 0.5);
  EXPECT_THROW(small.load_state(st), tensordict::ValueError);
  rb::PrioritizedSamplerState bad = st;
  bad.sum_leaves = at::ones({15}, at::kDouble);
  EXPECT_THROW(b.load_state(bad), tensordict::ShapeError);
  EXPECT_TRUE(torch::equal(b.sum_tree().leaves(), st.sum_leaves));
}
