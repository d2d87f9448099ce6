#include <tensordict/errors.h>
#include <tensordict/rb/segment_tree.h>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "rb/tensor_args.h"

namespace tensordict::rb {

namespace detail {

SegmentTreeBase::SegmentTreeBase(const char* name, int64_t capacity, double neutral)
    : name_(name), capacity_(capacity), leaf_count_(1), neutral_(neutral) {
  if (capacity <= 0)
    throw ValueError(std::string(name) + ": the capacity must be positive, got " +
                     std::to_string(capacity));
  while (leaf_count_ < capacity) leaf_count_ <<= 1;
  nodes_.assign(static_cast<size_t>(2 * leaf_count_), neutral);
}

at::Tensor SegmentTreeBase::get(const at::Tensor& index) const {
  const at::Tensor rows =
      checked_rows(index, capacity_, [this] { return std::string(name_) + "::get"; });
  at::Tensor out = at::empty({rows.numel()}, at::kDouble);
  const int64_t* r = rows.data_ptr<int64_t>();
  double* o = out.data_ptr<double>();
  for (int64_t k = 0; k < rows.numel(); ++k) o[k] = nodes_[leaf_count_ + r[k]];
  return out;
}

at::Tensor SegmentTreeBase::leaves() const {
  at::Tensor out = at::empty({capacity_}, at::kDouble);
  std::copy_n(nodes_.begin() + leaf_count_, capacity_, out.data_ptr<double>());
  return out;
}

namespace {

// NaN is never a weight; +inf only where allowed (a MinTree's unset leaf);
// a SumTree's weights are also non-negative.
// `name` and `call` make the error's prefix ("SumTree" "::set").
void check_weights(const char* name, const char* call, const double* v, int64_t n, bool min_tree) {
  for (int64_t k = 0; k < n; ++k) {
    const double x = v[k];
    const bool ok = min_tree ? !std::isnan(x) : (x >= 0.0 && std::isfinite(x));
    if (!ok)
      throw ValueError(std::string(name) + call + ": value " + std::to_string(x) + " at position " +
                       std::to_string(k) +
                       (min_tree ? " is NaN" : " is not a finite non-negative weight"));
  }
}

// Recomputes the ancestors of the leaves at node[k] (node indices, each
// walked up in place), `recompute(p)` setting node p from its children.
// Paths are walked one level at a time for all leaves (the loads of a level
// are independent, so their cache misses overlap). Once a level has no more
// nodes than there are paths, that level and every one above are recomputed
// whole, in order: fewer operations than walking the paths (the top of the
// tree is shared by all of them), and sequential.
template <class Recompute>
void recompute_ancestors(std::vector<int64_t>& node, int64_t leaf_count, Recompute recompute) {
  const auto paths = static_cast<int64_t>(node.size());
  for (int64_t parents = leaf_count / 2; parents >= 1; parents /= 2) {
    if (parents <= paths) {
      for (int64_t p = 2 * parents - 1; p >= 1; --p) recompute(p);
      return;
    }
    for (int64_t& at : node) {
      at >>= 1;
      recompute(at);
    }
  }
}

struct Sum {
  double operator()(double a, double b) const noexcept { return a + b; }
};
struct Min {
  double operator()(double a, double b) const noexcept { return std::min(a, b); }
};

}  // namespace

template <class Combine>
void SegmentTreeBase::set_impl(const at::Tensor& index, const at::Tensor& value, bool allow_inf,
                               Combine combine) {
  const auto where = [this] { return std::string(name_) + "::set"; };
  const at::Tensor rows = checked_rows(index, capacity_, where);
  const at::Tensor values = checked_values(value, rows.numel(), where);
  const double* v = values.data_ptr<double>();
  const bool broadcast = values.numel() == 1;
  check_weights(name_, "::set", v, values.numel(), allow_inf);
  const int64_t* r = rows.data_ptr<int64_t>();
  const int64_t n = rows.numel();
  // Leaves first, in order (the last of a repeated index wins), then the
  // ancestors recomputed from their children. Recomputing (rather than
  // adding deltas) accumulates no rounding error.
  double* nodes = nodes_.data();
  std::vector<int64_t> node(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    node[k] = leaf_count_ + r[k];
    nodes[node[k]] = v[broadcast ? 0 : k];
  }
  recompute_ancestors(node, leaf_count_, [nodes, combine](int64_t p) {
    nodes[p] = combine(nodes[2 * p], nodes[2 * p + 1]);
  });
}

template <class Combine>
void SegmentTreeBase::set_one_impl(int64_t index, double value, bool allow_inf, Combine combine) {
  if (index < 0 || index >= capacity_)
    throw IndexError(std::string(name_) + "::set: index " + std::to_string(index) +
                     " is out of range [0, " + std::to_string(capacity_) + ")");
  check_weights(name_, "::set", &value, 1, allow_inf);
  double* nodes = nodes_.data();
  int64_t node = leaf_count_ + index;
  nodes[node] = value;
  for (node >>= 1; node >= 1; node >>= 1)
    nodes[node] = combine(nodes[2 * node], nodes[2 * node + 1]);
}

template <class Combine>
void SegmentTreeBase::load_impl(const at::Tensor& leaves, bool allow_inf, Combine combine) {
  const std::string where = std::string(name_) + "::load_leaves";
  if (!leaves.defined() || leaves.dim() != 1 || leaves.size(0) != capacity_)
    throw ShapeError(where + ": expected float64 leaves of shape [" + std::to_string(capacity_) +
                     "], got " + (leaves.defined() ? c10::str(leaves.sizes()) : "undefined"));
  if (leaves.scalar_type() != at::kDouble)
    throw TypeError(where + ": expected float64 leaves, got " +
                    std::string(c10::toString(leaves.scalar_type())));
  const at::Tensor values = leaves.cpu().contiguous();
  const double* v = values.data_ptr<double>();
  check_weights(name_, "::load_leaves", v, capacity_, allow_inf);
  std::copy_n(v, capacity_, nodes_.begin() + leaf_count_);
  std::fill(nodes_.begin() + leaf_count_ + capacity_, nodes_.end(), neutral_);
  for (int64_t node = leaf_count_ - 1; node >= 1; --node)
    nodes_[node] = combine(nodes_[2 * node], nodes_[2 * node + 1]);
}

void set_sum_and_min(SumTree& sums, MinTree& mins, const int64_t* rows, const double* weights,
                     int64_t n) {
  if (sums.capacity_ != mins.capacity_)
    throw ValueError("set_sum_and_min: a sum tree of " + std::to_string(sums.capacity_) +
                     " leaves and a min tree of " + std::to_string(mins.capacity_));
  check_weights("PrioritizedSampler", "::update_priority", weights, n, /*min_tree=*/false);
  const int64_t leaf_count = sums.leaf_count_;
  double* sum = sums.nodes_.data();
  double* min = mins.nodes_.data();
  std::vector<int64_t> node(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    node[k] = leaf_count + rows[k];
    sum[node[k]] = weights[k];
    min[node[k]] = weights[k];
  }
  recompute_ancestors(node, leaf_count, [sum, min](int64_t p) {
    sum[p] = sum[2 * p] + sum[2 * p + 1];
    min[p] = std::min(min[2 * p], min[2 * p + 1]);
  });
}

}  // namespace detail

SumTree::SumTree(int64_t capacity) : SegmentTreeBase("SumTree", capacity, 0.0) {}

void SumTree::set(const at::Tensor& index, const at::Tensor& value) {
  set_impl(index, value, false, detail::Sum{});
}

void SumTree::set(int64_t index, double value) { set_one_impl(index, value, false, detail::Sum{}); }

void SumTree::load_leaves(const at::Tensor& leaves) { load_impl(leaves, false, detail::Sum{}); }

at::Tensor SumTree::find_prefix_sum(const at::Tensor& mass) const {
  const at::Tensor masses = detail::checked_values(mass, -1, "SumTree::find_prefix_sum");
  const double total = nodes_[1];
  if (!(total > 0.0))
    throw ValueError("SumTree::find_prefix_sum: the tree is empty (total weight " +
                     std::to_string(total) + ")");
  const double* m = masses.data_ptr<double>();
  const int64_t n = masses.numel();
  for (int64_t k = 0; k < n; ++k) {
    if (!(m[k] >= 0.0))
      throw ValueError("SumTree::find_prefix_sum: mass " + std::to_string(m[k]) + " at position " +
                       std::to_string(k) + " is negative or NaN");
  }
  at::Tensor out = at::empty({n}, at::kLong);
  int64_t* node = out.data_ptr<int64_t>();
  const double* nodes = nodes_.data();
  std::vector<double> rest(m, m + n);
  std::fill_n(node, n, int64_t{1});
  // All masses descend one level at a time: the loads of one level are
  // independent, so the CPU overlaps their cache misses (a tree of 100,000
  // leaves is larger than L2), where one mass after another would wait for
  // each miss in turn. The step has no branch: left or right is a coin toss
  // the CPU cannot predict, and a mispredicted branch at every level cost
  // 5x the whole descent (docs/replay_buffer_library.md, Speed).
  for (int64_t width = 1; width < leaf_count_; width <<= 1) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = 2 * node[k];
      const double left = nodes[at];
      // Right only when the mass passes the left subtree and the right one
      // has weight: a zero leaf is never chosen, even at mass >= total.
      const int64_t right =
          static_cast<int64_t>(!(rest[k] < left)) & static_cast<int64_t>(nodes[at + 1] > 0.0);
      rest[k] -= left * static_cast<double>(right);
      node[k] = at + right;
    }
  }
  for (int64_t k = 0; k < n; ++k) node[k] -= leaf_count_;
  return out;
}

MinTree::MinTree(int64_t capacity)
    : SegmentTreeBase("MinTree", capacity, std::numeric_limits<double>::infinity()) {}

void MinTree::set(const at::Tensor& index, const at::Tensor& value) {
  set_impl(index, value, true, detail::Min{});
}

void MinTree::set(int64_t index, double value) { set_one_impl(index, value, true, detail::Min{}); }

void MinTree::load_leaves(const at::Tensor& leaves) { load_impl(leaves, true, detail::Min{}); }

}  // namespace tensordict::rb
