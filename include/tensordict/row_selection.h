#pragma once
/// @file row_selection.h
/// RowSelection: which rows of the leading batch dims one operation reads or
/// writes, resolved once by the core and handed to storages.
///
/// The core turns a LibTorch index list (ints, slices, Ellipsis, None, bool
/// masks, long tensors) into one RowSelection per user operation: slice bounds
/// are clamped, negative ints and rows wrapped, masks turned into row numbers,
/// and the forms a storage can serve directly are told apart:
///
/// | kind      | what is selected                                   | e.g.                 |
/// | --------- | -------------------------------------------------- | -------------------- |
/// | `All`     | every row (whole leaves)                           | `update_`, `to_tensordict` |
/// | `Box`     | one start/stop/step range per leading batch dim    | `td[3]`, `td[2:10:2, 1]` |
/// | `Rows`    | a long tensor of row numbers on batch dim 0        | `td[idx]`, `td[mask]`  |
/// | `General` | anything else, as LibTorch indexing would          | `td[None, idx]`, 2-D masks |
///
/// A storage maps Box to an HDF5 hyperslab or to byte ranges, Rows to a point
/// selection or one byte range per row, and General to its fallback (apply()
/// on a leaf it read whole). items() is LibTorch's form of every kind.
///
/// A RowSelection refers to the core's data for the operation: it is valid
/// during the storage call it is passed to, and must not be kept.

#include <ATen/TensorIndexing.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <vector>

namespace tensordict {

/// A list of LibTorch indices, as taken by at::Tensor::index.
using IndexList = at::ArrayRef<at::indexing::TensorIndex>;

namespace detail {
struct TranslatedIndex;
}  // namespace detail

/// The rows of one batch dim in a Box selection: start, start + step, ...
/// below stop, with 0 <= start <= stop <= the dim's size and step > 0.
struct RowRange {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  /// The range came from an integer index: exactly one row, and the dim is
  /// removed from the result.
  bool drop = false;
  /// Number of rows selected.
  int64_t count() const noexcept { return stop <= start ? 0 : (stop - start + step - 1) / step; }
};

class RowSelection {
 public:
  enum class Kind : std::uint8_t { All, Box, Rows, General };

  /// Every row of a tensordict of batch size `batch` (the array must outlive
  /// the selection).
  static RowSelection all(at::IntArrayRef batch) noexcept;
  /// The selection of the translated index `t` over a tensordict of batch
  /// size `batch` (used by the core; `t` must outlive the selection).
  static RowSelection of(const detail::TranslatedIndex& t, at::IntArrayRef batch);

  Kind kind() const noexcept { return kind_; }
  bool is_all() const noexcept { return kind_ == Kind::All; }

  /// Box: one range per leading batch dim, in order (dims after them are
  /// whole). Empty for the other kinds.
  at::ArrayRef<RowRange> ranges() const noexcept { return ranges_; }
  /// Rows: int64 row numbers of batch dim 0, each in [0, size), of any shape
  /// (the result's leading dims are rows().sizes()); later dims are whole.
  /// Undefined for the other kinds.
  const at::Tensor& rows() const noexcept;
  /// Rows: true when the row numbers are in increasing order (computed on
  /// first call).
  bool rows_sorted() const;
  /// Rows: true when no row number repeats (computed on first call).
  bool rows_unique() const;

  /// LibTorch's form of the selection, valid for every kind (empty for All):
  /// leaf.index(items()) selects what apply() selects.
  IndexList items() const noexcept;
  /// The batch size the selection applies to (the indexed tensordict's).
  at::IntArrayRef source_batch() const noexcept { return source_batch_; }
  /// The leading dims of a selected leaf: a leaf of shape
  /// [*source_batch, *feature] gives [*batch(), *feature].
  at::IntArrayRef batch() const noexcept;
  /// Number of selected elements of the leading dims (product of batch()).
  int64_t numel() const noexcept;
  /// The shape of the selection of a leaf of shape `leaf_shape`.
  std::vector<int64_t> selected_shape(at::IntArrayRef leaf_shape) const;

  /// leaf[selection] (a view where LibTorch gives one, the leaf itself for All).
  at::Tensor apply(const at::Tensor& leaf) const;
  /// leaf[selection] = value in place; `value` has the leaf's dtype and device
  /// and is broadcastable to the selected shape.
  void put(at::Tensor& leaf, const at::Tensor& value) const;

 private:
  RowSelection() = default;
  Kind kind_ = Kind::All;
  at::IntArrayRef source_batch_;
  at::ArrayRef<RowRange> ranges_;
  const detail::TranslatedIndex* t_ = nullptr;  // null for All
};

}  // namespace tensordict
