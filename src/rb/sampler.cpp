#include <tensordict/errors.h>
#include <tensordict/rb/sampler.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "rb/random_draws.h"
#include "rb/tensor_args.h"

namespace tensordict::rb {

namespace {

void check_sample_args(const Sampler& sampler, int64_t size, int64_t batch_size) {
  if (batch_size <= 0)
    throw ValueError(sampler.name() + "::sample: the batch size must be positive, got " +
                     std::to_string(batch_size));
  if (size <= 0)
    throw ValueError(sampler.name() + "::sample: nothing to sample, the buffer is empty");
}

}  // namespace

void Sampler::on_write_row(int64_t row) { on_write(at::full({1}, row, at::kLong)); }

// ---- RandomSampler -----------------------------------------------------------------

SampleInfo RandomSampler::sample(int64_t size, int64_t batch_size, at::Generator* generator) {
  check_sample_args(*this, size, batch_size);
  at::Tensor index = at::empty({batch_size}, at::kLong);
  detail::CpuDraws(generator).integers(size, index.data_ptr<int64_t>(), batch_size);
  return {index, at::Tensor(), {}};
}

// ---- SamplerWithoutReplacement ------------------------------------------------------

void SamplerWithoutReplacement::start_epoch(int64_t size, at::Generator* generator) {
  // Every epoch shuffles 0, 1, ..., size - 1, so that the order depends on
  // the generator alone (a buffer loaded from a checkpoint, which holds only
  // the rest of an epoch, goes on drawing as the saved one). The tensor of
  // the last epoch is reused when it has the size: samples hold copies.
  if (!order_.defined() || order_.numel() != size) order_ = at::empty({size}, at::kLong);
  int64_t* order = order_.data_ptr<int64_t>();
  std::iota(order, order + size, int64_t{0});
  if (shuffle_) detail::CpuDraws(generator).shuffle(order, size);
  epoch_size_ = size;
  next_ = 0;
}

SampleInfo SamplerWithoutReplacement::sample(int64_t size, int64_t batch_size,
                                             at::Generator* generator) {
  check_sample_args(*this, size, batch_size);
  if (drop_last_ && batch_size > size)
    throw ValueError("SamplerWithoutReplacement::sample: with drop_last, a batch of " +
                     std::to_string(batch_size) + " cannot be drawn without repetition from " +
                     std::to_string(size) + " rows");
  if (!order_.defined() || epoch_size_ != size) start_epoch(size, generator);
  const int64_t take = std::min(batch_size, order_.numel() - next_);
  at::Tensor index = at::empty({take}, at::kLong);
  std::copy_n(order_.data_ptr<int64_t>() + next_, take, index.data_ptr<int64_t>());
  next_ += take;
  const int64_t left = order_.numel() - next_;
  ran_out_ = left == 0 || (drop_last_ && left < batch_size);
  if (ran_out_) start_epoch(size, generator);
  return {index, at::Tensor(), {}};
}

void SamplerWithoutReplacement::on_empty() {
  order_ = at::Tensor();
  epoch_size_ = 0;
  next_ = 0;
  ran_out_ = false;
}

// ---- PrioritizedSampler -------------------------------------------------------------

namespace {

void check_exponents(const char* where, double alpha, double beta, double eps) {
  if (!(alpha >= 0.0) || !std::isfinite(alpha) || !(beta >= 0.0) || !std::isfinite(beta) ||
      !(eps >= 0.0) || !std::isfinite(eps))
    throw ValueError(
        std::string(where) + ": alpha, beta and eps must be finite and non-negative, got alpha " +
        std::to_string(alpha) + ", beta " + std::to_string(beta) + ", eps " + std::to_string(eps));
}

}  // namespace

PrioritizedSampler::PrioritizedSampler(int64_t capacity, double alpha, double beta, double eps)
    : sum_tree_(capacity),
      min_tree_(capacity),
      alpha_(alpha),
      beta_(beta),
      eps_(eps),
      max_priority_(std::numeric_limits<double>::quiet_NaN()) {
  check_exponents("PrioritizedSampler", alpha, beta, eps);
}

void PrioritizedSampler::set_beta(double beta) {
  check_exponents("PrioritizedSampler::set_beta", alpha_, beta, eps_);
  beta_ = beta;
}

SampleInfo PrioritizedSampler::sample(int64_t size, int64_t batch_size, at::Generator* generator) {
  check_sample_args(*this, size, batch_size);
  const double total = sum_tree_.total();
  const double smallest = min_tree_.min();
  if (!(total > 0.0) || !(smallest > 0.0) || !std::isfinite(smallest))
    throw ValueError("PrioritizedSampler::sample: the rows have no positive weight (sum " +
                     std::to_string(total) + ", min " + std::to_string(smallest) +
                     "); write rows or give positive priorities (or eps > 0)");
  at::Tensor mass = at::empty({batch_size}, at::kDouble);
  double* m = mass.data_ptr<double>();
  detail::CpuDraws(generator).unit_doubles(m, batch_size);
  for (int64_t b = 0; b < batch_size; ++b) m[b] *= total;
  at::Tensor index = sum_tree_.find_prefix_sum(mass);
  at::Tensor weight = at::empty({batch_size}, at::kFloat);
  int64_t* idx = index.data_ptr<int64_t>();
  float* w = weight.data_ptr<float>();
  const double* leaves = sum_tree_.leaf_data();
  const auto exponent = static_cast<float>(-beta_);
  for (int64_t b = 0; b < batch_size; ++b) {
    int64_t i = std::min(idx[b], size - 1);
    // Rows past `size` are never drawn (they have no weight unless a state
    // was loaded over a smaller buffer): step back to a row with weight.
    while (i > 0 && leaves[i] <= 0.0) --i;
    idx[b] = i;
    // In float, the weight's type: powf takes half the time of pow.
    w[b] = std::pow(static_cast<float>(leaves[i] / smallest), exponent);
  }
  return {index, weight, {}};
}

void PrioritizedSampler::on_write(const at::Tensor& rows) {
  if (rows.numel() == 0) return;
  const double priority = std::isnan(max_priority_) ? 1.0 : max_priority_;
  update_priority(rows, at::full({1}, priority, at::kDouble));
}

void PrioritizedSampler::on_write_row(int64_t row) {
  const double priority = std::isnan(max_priority_) ? 1.0 : max_priority_;
  const double weight = std::pow(priority + eps_, alpha_);
  sum_tree_.set(row, weight);  // IndexError (nothing changed) when out of range
  min_tree_.set(row, weight);
  if (std::isnan(max_priority_)) max_priority_slot_ = row;
  max_priority_ = priority;
}

void PrioritizedSampler::on_empty() {
  sum_tree_ = SumTree(capacity());
  min_tree_ = MinTree(capacity());
  max_priority_ = std::numeric_limits<double>::quiet_NaN();
  max_priority_slot_ = -1;
}

void PrioritizedSampler::update_priority(const at::Tensor& index, const at::Tensor& priority) {
  const char* where = "PrioritizedSampler::update_priority";
  const at::Tensor rows = detail::checked_rows(index, capacity(), where);
  const at::Tensor values = detail::checked_values(priority, rows.numel(), where);
  const int64_t n = rows.numel();
  if (n == 0) return;
  const double* p = values.data_ptr<double>();
  double largest = -1.0;
  int64_t largest_at = 0;
  for (int64_t k = 0; k < values.numel(); ++k) {
    if (!(p[k] >= 0.0) || !std::isfinite(p[k]))
      throw ValueError(std::string(where) + ": priority " + std::to_string(p[k]) + " at position " +
                       std::to_string(k) + " is not finite and non-negative");
    if (p[k] > largest) {
      largest = p[k];
      largest_at = k;
    }
  }
  // One weight broadcast over the rows (a write's max priority) or one each.
  std::vector<double> weights(static_cast<size_t>(n));
  if (values.numel() == 1)
    std::fill(weights.begin(), weights.end(), std::pow(p[0] + eps_, alpha_));
  else
    for (int64_t k = 0; k < n; ++k) weights[k] = std::pow(p[k] + eps_, alpha_);
  detail::set_sum_and_min(sum_tree_, min_tree_, rows.data_ptr<int64_t>(), weights.data(), n);
  // The row holding the largest priority is kept for the checkpoints
  // (TorchRL's _max_priority is the pair).
  if (std::isnan(max_priority_) || largest > max_priority_) {
    max_priority_ = largest;
    max_priority_slot_ = rows.data_ptr<int64_t>()[largest_at];
  }
}

PrioritizedSamplerState PrioritizedSampler::state() const {
  return {alpha_,
          beta_,
          eps_,
          max_priority_,
          max_priority_slot_,
          capacity(),
          sum_tree_.leaves(),
          min_tree_.leaves()};
}

void PrioritizedSampler::load_state(const PrioritizedSamplerState& state) {
  const char* where = "PrioritizedSampler::load_state";
  if (state.max_capacity != capacity())
    throw ValueError(std::string(where) + ": the state is for " +
                     std::to_string(state.max_capacity) + " rows, this sampler holds " +
                     std::to_string(capacity()));
  check_exponents(where, state.alpha, state.beta, state.eps);
  if (!std::isnan(state.max_priority) &&
      (!(state.max_priority >= 0.0) || !std::isfinite(state.max_priority)))
    throw ValueError(std::string(where) + ": max_priority " + std::to_string(state.max_priority) +
                     " is not NaN (none yet) nor finite and non-negative");
  if (state.max_priority_slot < -1 || state.max_priority_slot >= capacity())
    throw ValueError(std::string(where) + ": max_priority_slot " +
                     std::to_string(state.max_priority_slot) +
                     " is not -1 (none) nor a row below " + std::to_string(capacity()));
  // Loaded into copies first: a bad leaf tensor leaves this sampler as it was.
  SumTree sums(capacity());
  MinTree mins(capacity());
  sums.load_leaves(state.sum_leaves);
  mins.load_leaves(state.min_leaves);
  sum_tree_ = std::move(sums);
  min_tree_ = std::move(mins);
  alpha_ = state.alpha;
  beta_ = state.beta;
  eps_ = state.eps;
  max_priority_ = state.max_priority;
  max_priority_slot_ = std::isnan(state.max_priority) ? -1 : state.max_priority_slot;
}

}  // namespace tensordict::rb
