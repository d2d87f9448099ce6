#include <tensordict/errors.h>
#include <tensordict/rb/segment_tree.h>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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
  const at::Tensor rows = checked_rows(index, capacity_, std::string(name_) + "::get");
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
void check_weights(const char* name, const double* v, int64_t n, bool min_tree) {
  for (int64_t k = 0; k < n; ++k) {
    const double x = v[k];
    const bool ok = min_tree ? !std::isnan(x) : (x >= 0.0 && std::isfinite(x));
    if (!ok)
      throw ValueError(std::string(name) + ": value " + std::to_string(x) + " at position " +
                       std::to_string(k) +
                       (min_tree ? " is NaN" : " is not a finite non-negative weight"));
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
  const std::string where = std::string(name_) + "::set";
  const at::Tensor rows = checked_rows(index, capacity_, where);
  const at::Tensor values = checked_values(value, rows.numel(), where);
  const double* v = values.data_ptr<double>();
  const bool broadcast = values.numel() == 1;
  check_weights(where.c_str(), v, values.numel(), allow_inf);
  const int64_t* r = rows.data_ptr<int64_t>();
  const int64_t n = rows.numel();
  // Leaves first, in order (the last of a repeated index wins), then the
  // ancestors recomputed from their children, one level at a time for all
  // leaves: the loads of a level are independent, so their cache misses
  // overlap. Recomputing (rather than adding deltas) accumulates no rounding
  // error.
  double* nodes = nodes_.data();
  std::vector<int64_t> node(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    node[k] = leaf_count_ + r[k];
    nodes[node[k]] = v[broadcast ? 0 : k];
  }
  for (int64_t width = 1; width < leaf_count_; width <<= 1) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t parent = node[k] >> 1;
      nodes[parent] = combine(nodes[2 * parent], nodes[2 * parent + 1]);
      node[k] = parent;
    }
  }
}

template <class Combine>
void SegmentTreeBase::set_one_impl(int64_t index, double value, bool allow_inf, Combine combine) {
  const std::string where = std::string(name_) + "::set";
  if (index < 0 || index >= capacity_)
    throw IndexError(where + ": index " + std::to_string(index) + " is out of range [0, " +
                     std::to_string(capacity_) + ")");
  check_weights(where.c_str(), &value, 1, allow_inf);
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
  check_weights(where.c_str(), v, capacity_, allow_inf);
  std::copy_n(v, capacity_, nodes_.begin() + leaf_count_);
  std::fill(nodes_.begin() + leaf_count_ + capacity_, nodes_.end(), neutral_);
  for (int64_t node = leaf_count_ - 1; node >= 1; --node)
    nodes_[node] = combine(nodes_[2 * node], nodes_[2 * node + 1]);
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
  // each miss in turn.
  for (int64_t width = 1; width < leaf_count_; width <<= 1) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = 2 * node[k];
      const double left = nodes[at];
      // Right only when the mass passes the left subtree and the right one
      // has weight: a zero leaf is never chosen, even at mass >= total.
      const bool right = !(rest[k] < left) && nodes[at + 1] > 0.0;
      rest[k] -= right ? left : 0.0;
      node[k] = at + (right ? 1 : 0);
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
