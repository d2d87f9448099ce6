#pragma once
/// @file rb/segment_tree.h
/// SumTree and MinTree: fixed-capacity segment trees over float64 leaves,
/// the index structures of prioritized sampling (TorchRL's SumSegmentTree and
/// MinSegmentTree). They are usable on their own, without a replay buffer.
///
/// Layout: one flat array of 2 * L doubles, L the capacity rounded up to a
/// power of two; node 1 is the root, node n has children 2n and 2n + 1, and
/// leaf i is node L + i. Leaves past the capacity hold the neutral value
/// (0 for sums, +inf for minima) and are never visible.
///
/// Cost: set() of k leaves O(k log L); total() / min() O(1); get() of k
/// leaves O(k); find_prefix_sum() of k masses O(k log L); leaves() and
/// load_leaves() O(L). Every batched call is one loop in C++ over the raw
/// values (no tensor operation per element).
///
/// Thread safety: as a standard container (const calls may run together; a
/// set() needs exclusive access).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tensordict::rb {

class SumTree;
class MinTree;

namespace detail {

/// Sets leaves rows[k] of both trees (one capacity) to weights[k] in one pass
/// over the shared paths: PrioritizedSampler's update, which would otherwise
/// walk every path twice. Rows must be in [0, capacity) (the caller checked
/// them); ValueError for a weight that is negative, NaN or infinite, and then
/// neither tree changes.
void set_sum_and_min(SumTree& sums, MinTree& mins, const int64_t* rows, const double* weights,
                     int64_t n);

/// The flat array and the checks SumTree and MinTree share; they differ in
/// the inner nodes' operation (sum or min) and its neutral value.
class SegmentTreeBase {
 public:
  int64_t capacity() const noexcept { return capacity_; }
  /// The leaves at `index` (int64 [k]) as float64 [k]. IndexError when an
  /// index is outside [0, capacity).
  at::Tensor get(const at::Tensor& index) const;
  /// All leaves, a float64 [capacity] copy.
  at::Tensor leaves() const;
  /// The capacity leaves in place, without a copy (hot loops that read many
  /// leaves); valid until the next set() or load_leaves().
  const double* leaf_data() const noexcept { return nodes_.data() + leaf_count_; }

 protected:
  SegmentTreeBase(const char* name, int64_t capacity, double neutral);
  // Sets the leaves then recomputes their ancestors; `combine` is the
  // inner-node operation. In a repeated index the last value wins.
  template <class Combine>
  void set_impl(const at::Tensor& index, const at::Tensor& value, bool allow_inf, Combine combine);
  template <class Combine>
  void set_one_impl(int64_t index, double value, bool allow_inf, Combine combine);
  template <class Combine>
  void load_impl(const at::Tensor& leaves, bool allow_inf, Combine combine);

  friend void set_sum_and_min(SumTree&, MinTree&, const int64_t*, const double*, int64_t);

  const char* name_;
  int64_t capacity_;
  int64_t leaf_count_;  // capacity rounded up to a power of two
  double neutral_;
  std::vector<double> nodes_;  // [2 * leaf_count_]; nodes_[0] unused
};

}  // namespace detail

/// A sum tree: leaves are non-negative finite weights; total() is their sum
/// and find_prefix_sum() draws rows in proportion to them.
///
/// @code
///   tensordict::rb::SumTree tree(1000);
///   tree.set(at::arange(10), at::ones({10}, at::kDouble));
///   at::Tensor rows = tree.find_prefix_sum(at::rand({32}, at::kDouble) * tree.total());
/// @endcode
class SumTree : public detail::SegmentTreeBase {
 public:
  /// A tree of `capacity` zero leaves; ValueError unless capacity > 0.
  explicit SumTree(int64_t capacity);
  /// Sets leaf index[j] to value[j] (int64 index, values convertible to
  /// float64; one value is broadcast). Everything is checked first: IndexError
  /// for an index outside [0, capacity), ValueError for a negative, NaN or
  /// infinite value, ShapeError for a length mismatch; then nothing changes.
  /// With a repeated index the last value wins.
  void set(const at::Tensor& index, const at::Tensor& value);
  /// One leaf, without tensors (the same checks).
  void set(int64_t index, double value);
  /// The sum of all leaves.
  double total() const noexcept { return nodes_[1]; }
  /// For each mass m (float64-convertible, [k]), the first leaf i whose
  /// running sum w_0 + ... + w_i exceeds m: with m uniform in [0, total()),
  /// leaf i comes out with probability w_i / total(). Leaves of weight 0 are
  /// never returned; a mass >= total() gives the last positive leaf.
  /// ValueError when the total is 0 or a mass is negative or NaN.
  at::Tensor find_prefix_sum(const at::Tensor& mass) const;
  /// Rebuilds the tree from float64 [capacity] leaves (ShapeError / TypeError
  /// / ValueError as set(); nothing changes on error).
  void load_leaves(const at::Tensor& leaves);
};

/// A min tree: min() is the smallest leaf. Unset leaves are +inf (TorchRL's
/// MinSegmentTree does the same), so min() covers the leaves set so far.
class MinTree : public detail::SegmentTreeBase {
 public:
  /// A tree of `capacity` leaves at +inf; ValueError unless capacity > 0.
  explicit MinTree(int64_t capacity);
  /// As SumTree::set; +inf is accepted (an unset leaf), NaN is not.
  void set(const at::Tensor& index, const at::Tensor& value);
  /// One leaf, without tensors (the same checks).
  void set(int64_t index, double value);
  /// The smallest leaf (+inf when none is set).
  double min() const noexcept { return nodes_[1]; }
  /// Rebuilds the tree from float64 [capacity] leaves.
  void load_leaves(const at::Tensor& leaves);
};

}  // namespace tensordict::rb
