// Indexing and index assignment: td.index({...}), td.index_put_({...}, value),
// get_at / set_at_ / update_at_. The index is translated once per call.
#include "core/internal.h"
#include "core/lazy_dispatch.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include <ATen/core/DimVector.h>

namespace tensordict {
namespace detail {

using at::indexing::Slice;
using at::indexing::TensorIndex;

int64_t wrap_dim(int64_t dim, int64_t n, const char* op) {
  if (dim < -n || dim >= n || n == 0)
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) + " out of range for " +
                     std::to_string(n) + " batch dimension(s)");
  return dim < 0 ? dim + n : dim;
}

// Slice bounds are int64_t in LibTorch 1.x and c10::SymInt in 2.x.
template <class T>
int64_t as_int(const T& v) {
  if constexpr (std::is_integral_v<T>)
    return v;
  else
    return v.expect_int();
}

bool is_full_slice(const TensorIndex& i) {
  if (!i.is_slice()) return false;
  const auto& s = i.slice();
  return as_int(s.start()) == 0 && as_int(s.stop()) == at::indexing::INDEX_MAX &&
         as_int(s.step()) == 1;
}

// Resolves a basic index into per-leaf steps and the new batch size, without
// touching any tensor (the dummy-tensor route costs microseconds).
void resolve_basic(TranslatedIndex& out, at::IntArrayRef batch) {
  using Op = TranslatedIndex::BasicOp;
  std::size_t dim = 0;
  out.ops.reserve(out.items.size());
  for (const auto& i : out.items) {
    if (i.is_integer()) {
      int64_t n = batch[dim];
      int64_t v = as_int(i.integer());
      if (v < -n || v >= n)
        throw IndexError("index " + std::to_string(v) + " is out of bounds for batch dim " +
                         std::to_string(dim) + " of size " + std::to_string(n));
      const int64_t row = v < 0 ? v + n : v;
      out.ops.push_back(Op{Op::Select, row});
      out.ranges.push_back(RowRange{row, row + 1, 1, true});
      ++dim;
    } else if (i.is_slice()) {
      int64_t n = batch[dim];
      const auto& sl = i.slice();
      int64_t step = as_int(sl.step());
      if (step <= 0) throw IndexError("slice step must be positive");
      int64_t start = as_int(sl.start()), stop = as_int(sl.stop());
      if (start < 0) start += n;
      if (stop < 0) stop += n;
      start = std::clamp<int64_t>(start, 0, n);
      stop = std::clamp<int64_t>(stop, start, n);
      out.ops.push_back(Op{Op::Slice, start, stop, step});
      out.ranges.push_back(RowRange{start, stop, step, false});
      out.batch.push_back((stop - start + step - 1) / step);
      ++dim;
    } else if (i.is_none() || (i.is_boolean() && i.boolean())) {
      out.ops.push_back(Op{Op::Unsqueeze});
      out.batch.push_back(1);
    } else if (i.is_boolean()) {
      out.ops.push_back(Op{Op::Empty});
      out.batch.push_back(0);
    }
  }
  out.batch.append(batch.begin() + static_cast<std::ptrdiff_t>(dim), batch.end());
  out.box = out.ranges.size() == out.ops.size();  // no None, no False
}

namespace {

bool is_mask(const at::Tensor& t) {
  return t.scalar_type() == at::kBool || t.scalar_type() == at::kByte;
}

}  // namespace

at::Tensor rows_in_range(const at::Tensor& rows, int64_t n) {
  if (rows.numel() == 0) return rows.contiguous();
  auto [lo_t, hi_t] = at::aminmax(rows);
  const int64_t lo = lo_t.item<int64_t>(), hi = hi_t.item<int64_t>();
  if (lo < -n || hi >= n)
    throw IndexError("index " + std::to_string(lo < -n ? lo : hi) +
                     " is out of bounds for batch dim 0 of size " + std::to_string(n));
  return (lo < 0 ? at::remainder(rows, n) : rows).contiguous();
}

TranslatedIndex translate_index(IndexList index, at::IntArrayRef batch, bool check_bounds) {
  const int64_t B = static_cast<int64_t>(batch.size());
  TranslatedIndex out;
  int64_t consumed = 0;
  int ellipses = 0;
  for (const auto& i : index) {
    if (i.is_integer() || i.is_slice()) {
      consumed += 1;
    } else if (i.is_tensor()) {
      const auto& t = i.tensor();
      consumed += is_mask(t) ? t.dim() : 1;
    } else if (i.is_ellipsis()) {
      ++ellipses;
    }
  }
  if (ellipses > 1) throw IndexError("an index can only have a single ellipsis");
  if (consumed > B)
    throw IndexError("too many indices for a tensordict of batch size " + format_shape(batch) +
                     ": the index consumes " + std::to_string(consumed) + " dimension(s)");
  out.items.reserve(index.size() + static_cast<std::size_t>(B));
  int64_t dim = 0;  // batch dim the next item applies to
  int masks_expanded = 0;
  for (const auto& i : index) {
    if (i.is_ellipsis()) {
      for (int64_t k = 0; k < B - consumed; ++k) out.items.emplace_back(Slice());
      dim += B - consumed;
    } else if (i.is_tensor()) {
      out.basic = false;
      const auto& t = i.tensor();
      if (is_mask(t) && t.dim() > 0) {
        // A mask becomes long indices once, not once per leaf.
        auto expected =
            batch.slice(static_cast<std::size_t>(dim), static_cast<std::size_t>(t.dim()));
        if (t.sizes() != expected)
          throw IndexError("the mask of shape " + format_shape(t.sizes()) +
                           " does not match the batch dims " + format_shape(expected) +
                           " it indexes");
        auto nz = t.to(at::kBool).nonzero();
        for (auto& col : nz.unbind(1)) out.items.emplace_back(col);
        dim += t.dim();
        ++masks_expanded;
        if (t.dim() > 1) masks_expanded = 2;
      } else {
        out.items.push_back(i);
        dim += is_mask(t) ? 0 : 1;
      }
    } else {
      out.items.push_back(i);
      if (i.is_integer() || i.is_slice()) dim += 1;
    }
  }
  if (out.basic) {
    resolve_basic(out, batch);
    return out;
  }
  // One long index on dim 0 and full slices after it: index_select.
  if (!out.items.empty() && out.items[0].is_tensor() &&
      out.items[0].tensor().scalar_type() == at::kLong && masks_expanded < 2) {
    bool rest_full = std::all_of(out.items.begin() + 1, out.items.end(),
                                 [](const TensorIndex& i) { return is_full_slice(i); });
    if (rest_full) {
      out.first_dim_long = out.items[0].tensor();
      if (check_bounds && B > 0 && out.first_dim_long.numel() > 0) {
        // Writes check the bounds once up front so that a bad index fails
        // before any leaf is touched; reads let index_select check.
        // A storage's RowSelection then reuses the checked rows.
        out.first_dim_long = rows_in_range(out.first_dim_long, batch[0]);
        out.rows_in_range = out.first_dim_long;
      }
      out.batch.assign(out.first_dim_long.sizes().begin(), out.first_dim_long.sizes().end());
      out.batch.append(batch.begin() + 1, batch.end());
      out.items[0] = TensorIndex(out.first_dim_long);
      return out;
    }
  }
  try {
    at::Tensor dummy = at::zeros({1}, at::kByte).expand(batch);
    // Keep the indexed tensor alive while its sizes are read (sizes() of a
    // temporary would dangle: AddressSanitizer's heap-use-after-free).
    const at::Tensor indexed = dummy.index(out.items);
    out.batch.assign(indexed.sizes().begin(), indexed.sizes().end());
  } catch (const c10::Error& e) {
    throw IndexError("invalid index for a tensordict of batch size " + format_shape(batch) + ": " +
                     e.what_without_backtrace());
  }
  return out;
}

at::Tensor apply_index(const at::Tensor& leaf, const TranslatedIndex& index) {
  if (index.basic) {
    using Op = TranslatedIndex::BasicOp;
    int64_t dim = 0;
    auto step = [&dim](const at::Tensor& x, const Op& op) -> at::Tensor {
      switch (op.kind) {
        case Op::Select:
          return x.select(dim, op.start);
        case Op::Slice:
          return x.slice(dim++, op.start, op.stop, op.step);
        case Op::Unsqueeze:
          return x.unsqueeze(dim++);
        case Op::Empty:
          break;
      }
      // Op::Empty (a false bool): a new dim of size 0.
      at::Tensor r = x.unsqueeze(dim).slice(dim, 0, 0);
      ++dim;
      return r;
    };
    if (index.ops.empty()) return leaf;
    // The first step reads the leaf itself (no copy of the handle: td[i] is
    // one select per leaf, as in the floor).
    at::Tensor r = step(leaf, index.ops[0]);
    for (std::size_t k = 1; k < index.ops.size(); ++k) r = step(r, index.ops[k]);
    return r;
  }
  if (index.first_dim_long.defined()) {
    const auto& idx = index.first_dim_long;
    if (idx.dim() == 1) {
      try {
        return leaf.index_select(0, idx);
      } catch (const c10::Error&) {
        // Negative indices (valid in torch indexing) or out of range: the
        // generic path handles the former and reports the latter.
        return leaf.index(index.items);
      }
    }
    auto out_shape = idx.sizes().vec();
    out_shape.insert(out_shape.end(), leaf.sizes().begin() + 1, leaf.sizes().end());
    try {
      return leaf.index_select(0, idx.reshape({-1})).view(out_shape);
    } catch (const c10::Error&) {
      return leaf.index(index.items);
    }
  }
  return leaf.index(index.items);
}

namespace {

// leaf[i] = value or leaf[a:b] = value where both are contiguous CPU tensors
// of one dtype and the value has exactly the rows' shape: the rows are one
// block of bytes, so one memmove does it. select().copy_() goes through the
// dispatcher and TensorIterator, about 3 us per leaf, which made writing one
// replay-buffer transition (5 leaves, 41 KiB) 5x its memcpy floor.
bool put_rows_by_memmove(at::Tensor& leaf, const TranslatedIndex& index, const at::Tensor& value) {
  using Op = TranslatedIndex::BasicOp;
  if (index.ops.size() != 1 || leaf.dim() == 0) return false;
  const Op& op = index.ops[0];
  int64_t first = op.start, count = 1;
  if (op.kind == Op::Slice) {
    if (op.step != 1) return false;
    count = op.stop - op.start;
  } else if (op.kind != Op::Select) {
    return false;
  }
  if (count <= 0 || leaf.device().type() != at::kCPU || value.device().type() != at::kCPU ||
      leaf.scalar_type() != value.scalar_type() || leaf.layout() != at::kStrided ||
      value.layout() != at::kStrided || leaf.requires_grad() || value.requires_grad() ||
      value.is_conj() || value.is_neg() || leaf.is_conj() || leaf.is_neg() ||
      !leaf.is_contiguous() || !value.is_contiguous())
    return false;
  at::IntArrayRef row_shape = leaf.sizes().slice(1);
  if (op.kind == Op::Select) {
    if (value.sizes() != row_shape) return false;
  } else if (value.dim() != leaf.dim() || value.size(0) != count ||
             value.sizes().slice(1) != row_shape) {
    return false;
  }
  // Not stride(0): a contiguous tensor's size-1 dims may have any stride.
  const auto row_bytes =
      static_cast<size_t>(c10::multiply_integers(row_shape)) * leaf.element_size();
  std::memmove(static_cast<char*>(leaf.data_ptr()) + static_cast<size_t>(first) * row_bytes,
               value.data_ptr(), static_cast<size_t>(count) * row_bytes);
  leaf.unsafeGetTensorImpl()->bump_version();  // what copy_ does for autograd's checks
  return true;
}

}  // namespace

void put_index(at::Tensor& leaf, const TranslatedIndex& index, const at::Tensor& value) {
  if (index.basic) {
    if (put_rows_by_memmove(leaf, index, value)) return;
    apply_index(leaf, index).copy_(value);
    return;
  }
  if (index.first_dim_long.defined()) {
    const auto& idx = index.first_dim_long;
    auto target = idx.sizes().vec();
    target.insert(target.end(), leaf.sizes().begin() + 1, leaf.sizes().end());
    auto src = value.expand(target);
    if (idx.dim() != 1) {
      auto flat = leaf.sizes().vec();
      flat[0] = idx.numel();
      src = src.reshape(flat);
      leaf.index_copy_(0, idx.reshape({-1}), src);
    } else {
      leaf.index_copy_(0, idx, src);
    }
    return;
  }
  leaf.index_put_(index.items, value);
}

}  // namespace detail

// ---- RowSelection -----------------------------------------------------------------

RowSelection RowSelection::all(at::IntArrayRef batch) noexcept {
  RowSelection r;
  r.kind_ = Kind::All;
  r.source_batch_ = batch;
  return r;
}

RowSelection RowSelection::of(const detail::TranslatedIndex& t, at::IntArrayRef batch) {
  RowSelection r;
  r.source_batch_ = batch;
  r.t_ = &t;
  if (t.basic && t.box) {
    r.kind_ = Kind::Box;
    r.ranges_ = at::ArrayRef<RowRange>(t.ranges.data(), t.ranges.size());
  } else if (t.first_dim_long.defined() && !batch.empty()) {
    r.kind_ = Kind::Rows;
    if (!t.rows_in_range.defined()) {
      // Storages get row numbers they can use as they are: in [0, n).
      t.rows_in_range = detail::rows_in_range(t.first_dim_long, batch[0]);
    }
  } else {
    r.kind_ = Kind::General;
  }
  return r;
}

const at::Tensor& RowSelection::rows() const noexcept {
  static const at::Tensor undefined;
  return kind_ == Kind::Rows ? t_->rows_in_range : undefined;
}

bool RowSelection::rows_sorted() const {
  if (kind_ != Kind::Rows) return false;
  if (t_->rows_sorted < 0) {
    const at::Tensor flat = t_->rows_in_range.reshape({-1});
    t_->rows_sorted =
        flat.numel() < 2 || (flat.slice(0, 1) >= flat.slice(0, 0, -1)).all().item<bool>();
  }
  return t_->rows_sorted > 0;
}

bool RowSelection::rows_unique() const {
  if (kind_ != Kind::Rows) return false;
  if (t_->rows_unique < 0) {
    const at::Tensor flat = t_->rows_in_range.reshape({-1});
    t_->rows_unique = flat.numel() < 2 || std::get<0>(at::_unique(flat)).numel() == flat.numel();
  }
  return t_->rows_unique > 0;
}

IndexList RowSelection::items() const noexcept {
  if (!t_) return {};
  return IndexList(t_->items.data(), t_->items.size());
}

at::IntArrayRef RowSelection::batch() const noexcept {
  return t_ ? at::IntArrayRef(t_->batch.data(), t_->batch.size()) : source_batch_;
}

int64_t RowSelection::numel() const noexcept {
  int64_t n = 1;
  for (auto d : batch()) n *= d;
  return n;
}

std::vector<int64_t> RowSelection::selected_shape(at::IntArrayRef leaf_shape) const {
  auto b = batch();
  std::vector<int64_t> out(b.begin(), b.end());
  const std::size_t skip = std::min(source_batch_.size(), leaf_shape.size());
  out.insert(out.end(), leaf_shape.begin() + static_cast<std::ptrdiff_t>(skip), leaf_shape.end());
  return out;
}

at::Tensor RowSelection::apply(const at::Tensor& leaf) const {
  return t_ ? detail::apply_index(leaf, *t_) : leaf;
}

void RowSelection::put(at::Tensor& leaf, const at::Tensor& value) const {
  if (!t_) {
    leaf.copy_(value);
    return;
  }
  detail::put_index(leaf, *t_, value);
}

using detail::format_shape;
using detail::TranslatedIndex;

namespace {

bool all_full_slices(IndexList index) {
  for (const auto& i : index) {
    if (i.is_ellipsis()) continue;
    if (!i.is_slice()) return false;
    if (!detail::is_full_slice(i)) return false;
  }
  return true;
}

// A small vector: this runs per leaf on the row-write path, and shapes
// rarely have more than 5 dims (no allocation then).
at::DimVector concat_shape(at::IntArrayRef a, at::IntArrayRef b) {
  at::DimVector out(a.begin(), a.end());
  out.append(b.begin(), b.end());
  return out;
}

// The batch size of an indexed (nested) tensordict or non-tensor of batch
// size `b`: the indexed root batch, then its own dims beyond the root's B.
c10::SmallVector<int64_t, 5> indexed_batch(const TranslatedIndex& t, at::IntArrayRef b,
                                           std::size_t B) {
  c10::SmallVector<int64_t, 5> out(t.batch.begin(), t.batch.end());
  auto own = b.slice(std::min(B, b.size()));
  out.append(own.begin(), own.end());
  return out;
}

// The key of the entry being indexed, as a chain of parts that lives on the
// stack of the walk: the NestedKey is built only for an error message.
struct KeyChain {
  const KeyChain* parent;
  std::string_view part;
  NestedKey key() const { return parent ? parent->key().child(part) : NestedKey(part); }
};

[[noreturn]] void throw_entry_error(const KeyChain& key, const c10::Error& e) {
  throw IndexError("indexing entry " + key.key().repr() + " failed: " + e.what_without_backtrace());
}

// The walk of one td[index]: the translated index, the root's batch dims,
// and the leaves of storages that do not hold values, read at the end with
// one read_leaves call per storage.
struct IndexWalk {
  const TranslatedIndex& t;
  std::size_t B;
  detail::BatchedReads reads;
};

std::shared_ptr<detail::MemoryNode> index_node(const Node& n, IndexWalk& walk, const KeyChain* path,
                                               const Node* storage);

// One entry of a tensordict (batch dims of the root: B), indexed.
Value index_entry(const Value& v, IndexWalk& walk, const KeyChain& key) {
  const TranslatedIndex& t = walk.t;
  try {
    if (const auto* leaf = std::get_if<at::Tensor>(&v.variant()))
      return detail::apply_index(*leaf, t);
    if (const auto* td = std::get_if<TensorDictBase>(&v.variant())) {
      if (td->node().is_lazy_stack()) return td->index(t.items);  // keeps it lazy
      return TensorDictBase(index_node(td->node(), walk, &key, nullptr));
    }
    if (v.is_non_tensor_stack())  // the selected elements (one element: a NonTensorData)
      return detail::index_non_tensor_stack(v.non_tensor_stack(), t);
    NonTensorData d = v.non_tensor();
    auto b = indexed_batch(t, d.batch_size(), walk.B);
    d.set_batch_size(std::vector<int64_t>(b.begin(), b.end()));
    return d;
  } catch (const c10::Error& e) {
    throw_entry_error(key, e);
  }
}

// Indexes the tensordict stored in `n` (batch dims of the root: B) into a new
// in-memory node of batch t.batch + n.batch[B:]. `storage` is the topmost
// node of n's storage in this walk (null when n is where it starts).
std::shared_ptr<detail::MemoryNode> index_node(const Node& n, IndexWalk& walk, const KeyChain* path,
                                               const Node* storage) {
  const TranslatedIndex& t = walk.t;
  const auto batch = indexed_batch(t, n.batch_size(), walk.B);
  if (n.is_memory_node()) {
    // Same keys in the same order: the result shares the source's key index.
    const auto& src = static_cast<const detail::MemoryNode&>(n);
    detail::MemoryNode::Entries entries;
    entries.reserve(src.entries().size());
    for (const auto& [k, v] : src.entries()) {
      const KeyChain key{path, k};
      if (const auto* leaf = std::get_if<at::Tensor>(&v.variant())) {
        // The common case, without a Value temporary.
        try {
          entries.emplace_back(k, detail::apply_index(*leaf, t));
        } catch (const c10::Error& e) {
          throw_entry_error(key, e);
        }
        continue;
      }
      entries.emplace_back(k, index_entry(v, walk, key));
    }
    return std::make_shared<detail::MemoryNode>(batch, n.device(), std::move(entries), src);
  }
  auto dst = std::make_shared<detail::MemoryNode>(batch, n.device());
  const std::vector<std::string> keys = n.keys();
  dst->reserve(keys.size());
  if (!n.holds_values() && !storage) storage = &n;
  for (const std::string& k : keys) {
    const KeyChain key{path, k};
    std::optional<Value> holder;
    const Value* v = n.holds_values() ? n.peek(k) : nullptr;
    if (!v) {
      auto kind = n.kind(k);
      if (kind == EntryKind::Tensor) {
        // A storage reads only the rows asked for, all leaves in one call.
        dst->write(k, at::Tensor());
        walk.reads.add(storage, n.shared_from_this(), key.key(), dst.get());
        continue;
      }
      holder = n.find(k);
      if (!holder) continue;  // gone since keys(): nothing to index
      if (kind == EntryKind::TensorDict && !holder->tensordict().node().is_lazy_stack() &&
          !holder->tensordict().node().holds_values()) {
        // A level of a storage: its leaves join the same read_leaves call.
        dst->write(k, TensorDictBase(index_node(holder->tensordict().node(), walk, &key, storage)));
        continue;
      }
      v = &*holder;
    }
    dst->write(k, index_entry(*v, walk, key));
  }
  return dst;
}

void check_zero_dim_index(const TensorDictBase& td, IndexList index) {
  if (td.batch_dims() != 0) return;
  for (const auto& i : index)
    if (!(i.is_none() || i.is_ellipsis() || (i.is_boolean() && i.boolean())))
      throw IndexError(
          "indexing a tensordict with batch_dims==0 is not permitted (only "
          "None, Ellipsis or True may index it)");
}

// self[index] for a tensordict that is not a lazy stack, once the trivial
// indices (nothing, full slices) have been handled.
TensorDict index_tree(const TensorDictBase& self, IndexList index) {
  const Node& n = self.node();
  TranslatedIndex t = detail::translate_index(index, n.batch_size(), false);
  IndexWalk walk{t, n.batch_size().size(), {}};
  TensorDict out(index_node(n, walk, nullptr, nullptr));
  if (!walk.reads.empty()) walk.reads.run(RowSelection::of(t, n.batch_size()));
  // Python: indexing a memmap/shared tensordict keeps that status (and the
  // lock) when the result starts at the same data pointer: ints, None,
  // Ellipsis and slices starting at 0.
  const FileBacking* files = detail::file_backing(n);
  if (files != nullptr && (files->memmap || files->shared) && t.basic) {
    bool same_start = true;
    for (const auto& op : t.ops)
      if (op.kind == TranslatedIndex::BasicOp::Slice && op.start != 0) same_start = false;
    if (same_start) {
      out.lock_();
      detail::copy_mapped_status(*files, out.node());
    }
  }
  return out;
}

}  // namespace

TensorDictBase TensorDictBase::index(IndexList index) const {
  if (index.empty() || all_full_slices(index)) return *this;
  check_zero_dim_index(*this, index);
  if (auto lazy = detail::lazy_dispatch(*this, detail::lazy_index, *this, index))
    return std::move(*lazy);
  return index_tree(*this, index);
}

TensorDictBase TensorDictBase::operator[](int64_t i) const {
  return index({at::indexing::TensorIndex(i)});
}

// A TensorDict is never a lazy stack: the result is always a TensorDict,
// returned without converting it from a TensorDictBase (a check per call).
TensorDict TensorDict::index(IndexList index) const {
  if (index.empty() || all_full_slices(index)) return *this;
  check_zero_dim_index(*this, index);
  return index_tree(*this, index);
}

TensorDict TensorDict::operator[](int64_t i) const { return index({at::indexing::TensorIndex(i)}); }

TensorDict TensorDictBase::masked_select(const at::Tensor& mask) const {
  if (mask.scalar_type() != at::kBool)
    throw TypeError("masked_select: the mask must be a bool tensor, got " +
                    detail::torch_dtype_repr(mask.scalar_type()));
  return TensorDict(index({at::indexing::TensorIndex(mask)}).node_ptr());
}

// ---- index assignment ---------------------------------------------------------

namespace {

// What the checking walk found for one entry of the value, kept for the
// writing walk: both walks visit the entries in the same order, so the
// destination (a storage's metadata) is asked once per leaf, not twice.
struct PutLookup {
  Value vv;
  std::optional<Value> dv;
  std::optional<TensorMeta> meta;
};

struct PutPlan {
  const TranslatedIndex* t;
  std::size_t B;
  // Rows of storages that do not hold values, written after the walk with one
  // write_leaves_ call per storage.
  detail::BatchedWrites* writes;
  // Filled by the checking walk (a deque: references stay valid while the
  // walk recurses), read in order by the writing walk.
  std::deque<PutLookup>* lookups;
  std::size_t* next;
};

PutLookup look_up(const std::shared_ptr<Node>& dest, const Node& vn, const std::string& k) {
  PutLookup l{*vn.find(k), std::nullopt, std::nullopt};
  if (!dest) return l;
  if (dest->holds_values()) {
    if (const Value* p = dest->peek(k)) l.dv = *p;
  } else {
    // Storages are asked for metadata only, never for a whole tensor leaf;
    // tensor_meta first, as most entries of a row are tensors (one lookup).
    if ((l.meta = dest->tensor_meta(k))) {
      l.dv = Value(at::Tensor());  // placeholder: a tensor lives here
    } else if (dest->kind(k)) {
      l.dv = dest->find(k);
    }
  }
  if (l.dv && l.dv->is_tensor() && !l.meta) {
    const auto& t = l.dv->tensor();
    l.meta = TensorMeta{t.sizes().vec(), t.scalar_type(), t.device()};
  }
  return l;
}

// Walks `value` against `dest`. With dry_run, only checks (dest may be null
// for a nested tensordict that will be created); otherwise writes.
// `storage` is the topmost node of dest's storage in this walk (null when
// dest is where it starts or holds values).
void put_rec(const std::shared_ptr<Node>& dest, const TensorDictBase& value, const PutPlan& plan,
             bool dry_run, bool allow_create, const NestedKey& path, Node* storage = nullptr) {
  const Node& vn = value.node();
  if (dest && !dest->holds_values() && !storage) storage = dest.get();
  for (const auto& k : vn.keys()) {
    NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
    // A destination created by the writing walk (dest null when checking) is
    // new and empty, so what the checking walk found holds for it too.
    PutLookup& found = dry_run ? plan.lookups->emplace_back(look_up(dest, vn, k))
                               : (*plan.lookups)[(*plan.next)++];
    const Value& vv = found.vv;
    const std::optional<Value>& dv = found.dv;
    const std::optional<TensorMeta>& meta = found.meta;
    auto refuse_new = [&]() {
      if (!allow_create)
        throw KeyError("update_at_(): key " + key.repr() + " not found in the destination");
      if (dest && dest->locked())
        detail::throw_locked(key, "index_put_ (pre-allocating a new key)");
    };
    switch (vv.kind()) {
      case EntryKind::Tensor: {
        const at::Tensor& src = vv.tensor();
        if (dv && !dv->is_tensor())
          throw TypeError("index_put_: " + key.repr() + " is a " + to_string(dv->kind()) +
                          " here and a Tensor in the value");
        if (dv) {
          auto target = concat_shape(plan.t->batch, at::IntArrayRef(meta->shape).slice(plan.B));
          // Checked by the checking walk; not again when writing.
          if (dry_run && !at::is_expandable_to(src.sizes(), target))
            throw ShapeError("index_put_: cannot write a value of shape " +
                             format_shape(src.sizes()) + " into " + key.repr() +
                             " at an index of shape " + format_shape(target));
          if (dry_run && dest->holds_values())
            detail::check_writable_leaf(dv->tensor(), key, "index_put_");
          if (dry_run) break;
          // Tensor::to() is a dispatcher call even when it has nothing to do.
          at::Tensor cast = src.scalar_type() == meta->dtype && src.device() == meta->device
                                ? src
                                : src.to(meta->device, meta->dtype);
          if (dest->holds_values()) {
            at::Tensor leaf = dv->tensor();
            detail::put_index(leaf, *plan.t, cast);
          } else {
            // expand() is a dispatcher call too: skipped when the shape is already right.
            plan.writes->add(storage, dest, std::move(key),
                             cast.sizes().equals(target) ? cast : cast.expand(target));
          }
        } else {
          refuse_new();
          if (dry_run) break;
          // Lazy pre-allocation: zeros of [*batch, *feature], then the row.
          auto feature = src.sizes().slice(std::min(plan.t->batch.size(), src.sizes().size()));
          // `feature` already holds the extra batch dims of nested levels, so
          // only the root's batch dims of `dest` go in front.
          auto shape = concat_shape(dest->batch_size().slice(0, plan.B), feature);
          auto device = dest->device().value_or(at::Device(at::kCPU));
          dest->create_leaf(k, shape, src.options().device(device));
          if (dest->holds_values()) {
            at::Tensor leaf = dest->peek(k)->tensor();
            detail::put_index(leaf, *plan.t, src.to(device));
          } else {
            auto target = concat_shape(plan.t->batch, feature);
            plan.writes->add(storage, dest, key, src.to(device).expand(target));
          }
        }
        break;
      }
      case EntryKind::TensorDict: {
        if (dv && !dv->is_tensordict())
          throw TypeError("index_put_: " + key.repr() + " is a " + to_string(dv->kind()) +
                          " here and a TensorDict in the value");
        std::shared_ptr<Node> sub;
        if (dv) {
          sub = dv->tensordict().node_ptr();
        } else {
          refuse_new();
          if (!dry_run) {
            auto vb = vv.tensordict().batch_size();
            auto extra = vb.slice(std::min(plan.t->batch.size(), vb.size()));
            // As for leaves: `extra` includes the parent's own extra dims.
            sub = dest->create_nested(k, concat_shape(dest->batch_size().slice(0, plan.B), extra),
                                      dest->device())
                      .node_ptr();
          }
        }
        // A nested lazy stack splits the rows between its members itself,
        // checked by the checking walk like any other entry.
        if (sub && detail::lazy_dispatch(*sub, detail::lazy_index_put, plan.t->items,
                                         vv.tensordict(), !allow_create, /*check_only=*/dry_run))
          break;
        put_rec(sub, vv.tensordict(), plan, dry_run, allow_create, key,
                dest && !dest->holds_values() ? storage : nullptr);
        break;
      }
      case EntryKind::NonTensor:
      case EntryKind::NonTensorStack: {
        if (dv && !dv->is_non_tensor_or_stack())
          throw TypeError("index_put_: " + key.repr() + " is a " + to_string(dv->kind()) +
                          " here and a " + to_string(vv.kind()) + " in the value");
        if (dv) {
          // Computed in the dry run too (non-tensors are small), so that a
          // shape error is reported before anything is written.
          auto updated = detail::put_non_tensor(*dv, *plan.t, vv, key);
          if (!updated) break;
          if (dv->is_non_tensor() && updated->is_non_tensor_stack() && detail::backs_files(*dest))
            throw LockedError("index_put_: writing a different non-tensor value into part of " +
                              key.repr() +
                              " would turn its NonTensorData into a NonTensorStack, "
                              "which a memory-mapped or shared tensordict cannot do (its storage "
                              "is fixed); store a NonTensorStack there before memmapping");
          if (dry_run) break;
          // Replacing the entry is how a non-tensor is written in place; like
          // Python, this is allowed on a locked tensordict. Behind files, the
          // rows are put into the value on disk (other processes' rows kept).
          updated = detail::persist_non_tensor_rows(*dest, k, *dv, [&](const Value& current) {
            return detail::put_non_tensor(current, *plan.t, vv, key);
          });
          if (updated) dest->write(k, *updated);
          break;
        }
        refuse_new();
        if (dry_run) break;
        if (vv.is_non_tensor()) {
          // The first write stores one value spanning the whole batch (Python).
          dest->write(
              k, NonTensorData(vv.non_tensor().data(), dest->batch_size().vec(), dest->device()));
          break;
        }
        // A NonTensorStack: one value per element of [*batch, *extra dims],
        // every element first holding the value's first one (as a
        // NonTensorData written first spans the batch), then the rows.
        const NonTensorStack& src = vv.non_tensor_stack();
        if (src.numel() == 0) break;  // nothing selected: nothing to store
        auto extra =
            src.batch_size().slice(std::min(plan.t->batch.size(), src.batch_size().size()));
        auto shape = concat_shape(dest->batch_size().slice(0, plan.B), extra);
        Value fresh = NonTensorData(
            src.values().front(), std::vector<int64_t>(shape.begin(), shape.end()), dest->device());
        if (!shape.empty()) fresh = NonTensorStack::from_non_tensor(fresh.non_tensor());
        auto updated = detail::put_non_tensor(fresh, *plan.t, vv, key);
        dest->write(k, updated ? *updated : fresh);
        break;
      }
    }
  }
}

TensorDictBase broadcast_value(const TensorDictBase& value, at::IntArrayRef target) {
  auto vb = value.batch_size();
  if (vb.equals(target)) return value;
  // Python: value.shape == indexed_bs[-len(value.shape):], and for batch []
  // that slice is the whole indexed_bs, so a batch-[] value is never expanded
  // but has its batch size reset (its leaves may already fit the rows).
  bool suffix = !vb.empty() && vb.size() <= target.size() &&
                std::equal(vb.begin(), vb.end(), target.end() - vb.size());
  if (suffix) {
    try {
      return value.expand(target);
    } catch (const Error&) {
    }
  }
  TensorDictBase copy = value.copy();
  try {
    copy.set_batch_size(target);
  } catch (const ShapeError&) {
    throw ShapeError("indexed destination TensorDict batch size is " + format_shape(target) +
                     " which differs from the source batch size " + format_shape(vb));
  }
  return copy;
}

}  // namespace

void detail::check_index_put(const TensorDictBase& target, IndexList index,
                             const TensorDictBase& value, bool allow_create) {
  check_zero_dim_index(target, index);
  if (detail::lazy_dispatch(target, detail::lazy_index_put, index, value, !allow_create,
                            /*check_only=*/true))
    return;
  TranslatedIndex t = detail::translate_index(index, target.batch_size(), true);
  TensorDictBase v = broadcast_value(value, t.batch);
  std::deque<PutLookup> lookups;
  std::size_t next = 0;
  PutPlan plan{&t, target.batch_size().size(), nullptr, &lookups, &next};
  put_rec(target.node_ptr(), v, plan, /*dry_run=*/true, allow_create, NestedKey());
}

TensorDictBase& TensorDictBase::index_put_(IndexList index, const TensorDictBase& value) {
  check_zero_dim_index(*this, index);
  if (detail::lazy_dispatch(*this, detail::lazy_index_put, index, value, /*existing_only=*/false,
                            /*check_only=*/false))
    return *this;
  TranslatedIndex t = detail::translate_index(index, batch_size(), true);
  TensorDictBase v = broadcast_value(value, t.batch);
  detail::BatchedWrites writes;
  std::deque<PutLookup> lookups;
  std::size_t next = 0;
  PutPlan plan{&t, batch_size().size(), &writes, &lookups, &next};
  put_rec(node_, v, plan, /*dry_run=*/true, true, NestedKey());
  put_rec(node_, v, plan, /*dry_run=*/false, true, NestedKey());
  if (!writes.empty()) writes.run(RowSelection::of(t, batch_size()));
  return *this;
}

TensorDictBase& TensorDictBase::update_at_(const TensorDictBase& other, IndexList index,
                                           const std::vector<NestedKey>& keys_to_update) {
  check_zero_dim_index(*this, index);
  if (detail::lazy_dispatch(*this, detail::lazy_update_at_, other, index, keys_to_update))
    return *this;
  TranslatedIndex t = detail::translate_index(index, batch_size(), true);
  TensorDictBase src =
      keys_to_update.empty() ? other : TensorDictBase(other.select(keys_to_update));
  TensorDictBase v = broadcast_value(src, t.batch);
  detail::BatchedWrites writes;
  std::deque<PutLookup> lookups;
  std::size_t next = 0;
  PutPlan plan{&t, batch_size().size(), &writes, &lookups, &next};
  put_rec(node_, v, plan, true, false, NestedKey());
  put_rec(node_, v, plan, false, false, NestedKey());
  if (!writes.empty()) writes.run(RowSelection::of(t, batch_size()));
  return *this;
}

namespace {

// fn(node, key, meta, full_key, storage) for every tensor leaf, without
// reading data from storages; `storage` is the topmost node of the leaf's
// storage in the walk (null for storages that hold values).
template <class Fn>
void for_each_leaf_node(const std::shared_ptr<Node>& n, const NestedKey& path, const Fn& fn,
                        Node* storage = nullptr) {
  if (n->holds_values())
    storage = nullptr;
  else if (!storage)
    storage = n.get();
  for (const auto& k : n->keys()) {
    NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
    auto kind = n->kind(k);
    if (kind == EntryKind::Tensor) {
      fn(n, k, *n->tensor_meta(k), key, storage);
    } else if (kind == EntryKind::TensorDict) {
      for_each_leaf_node(n->find(k)->tensordict().node_ptr(), key, fn, storage);
    }
  }
}

}  // namespace

TensorDictBase& TensorDictBase::index_put_(IndexList index, const at::Tensor& value) {
  check_zero_dim_index(*this, index);
  if (detail::lazy_dispatch(*this, detail::lazy_index_put_tensor, index, value)) return *this;
  TranslatedIndex t = detail::translate_index(index, batch_size(), true);
  const std::size_t B = batch_size().size();
  // Check every leaf first.
  for_each_leaf_node(
      node_, NestedKey(),
      [&](auto&, const std::string&, const TensorMeta& leaf, const NestedKey& key, Node*) {
        auto target = concat_shape(t.batch, at::IntArrayRef(leaf.shape).slice(B));
        if (!at::is_expandable_to(value.sizes(), target))
          throw ShapeError("index_put_: cannot write a tensor of shape " +
                           format_shape(value.sizes()) + " into " + key.repr() +
                           " at an index of shape " + format_shape(target));
      });
  detail::BatchedWrites writes;
  for_each_leaf_node(
      node_, NestedKey(),
      [&](const std::shared_ptr<Node>& n, const std::string& k, const TensorMeta& leaf,
          const NestedKey& key, Node* storage) {
        at::Tensor cast = value.to(leaf.device, leaf.dtype);
        if (n->holds_values()) {
          at::Tensor stored = n->peek(k)->tensor();
          detail::put_index(stored, t, cast);
        } else {
          writes.add(storage, n, key,
                     cast.expand(concat_shape(t.batch, at::IntArrayRef(leaf.shape).slice(B))));
        }
      });
  if (!writes.empty()) writes.run(RowSelection::of(t, batch_size()));
  return *this;
}

TensorDictBase& TensorDictBase::index_put_(IndexList index, const at::Scalar& value) {
  auto dtype = value.isBoolean()         ? at::kBool
               : value.isIntegral(false) ? at::kLong
               : value.isComplex()       ? at::kComplexDouble
                                         : at::kDouble;
  return index_put_(index, at::scalar_tensor(value, at::TensorOptions(dtype)));
}

at::Tensor TensorDictBase::get_at(const NestedKey& key, IndexList index) const {
  check_zero_dim_index(*this, index);
  TranslatedIndex t = detail::translate_index(index, batch_size(), false);
  (void)node();                   // a null handle is a ValueError
  std::shared_ptr<Node> storage;  // where the batched call goes (topmost storage level)
  std::shared_ptr<Node> n = detail::walk_parent(node_, key, false, "get_at", &storage);
  auto kind = n->kind(key.back());
  if (!kind) detail::throw_missing(key, key.size() - 1, *n);
  if (*kind != EntryKind::Tensor)
    throw TypeError("get_at: entry " + key.repr() + " is a " + tensordict::to_string(*kind) +
                    ", not a Tensor");
  if (!n->holds_values()) {
    // Through the batched read, so that a storage sees one call either way.
    LeafRead leaf{n.get(), key, at::Tensor()};
    try {
      storage->read_leaves(RowSelection::of(t, batch_size()), std::span<LeafRead>(&leaf, 1));
    } catch (const StorageError&) {
      detail::rethrow_storage_error(key, "get_at");
    } catch (const c10::Error& e) {
      throw IndexError("get_at " + key.repr() + ": " + e.what_without_backtrace());
    }
    return leaf.out;
  }
  try {
    return detail::apply_index(n->peek(key.back())->tensor(), t);
  } catch (const c10::Error& e) {
    throw IndexError("get_at " + key.repr() + ": " + e.what_without_backtrace());
  }
}

TensorDictBase& TensorDictBase::set_at_(const NestedKey& key, const at::Tensor& value,
                                        IndexList index) {
  check_zero_dim_index(*this, index);
  TranslatedIndex t = detail::translate_index(index, batch_size(), true);
  (void)node();  // a null handle is a ValueError
  std::shared_ptr<Node> storage;
  std::shared_ptr<Node> n = detail::walk_parent(node_, key, false, "set_at_", &storage);
  auto kind = n->kind(key.back());
  if (!kind)
    throw KeyError("set_at_(): key " + key.repr() +
                   " not found (set_at_ writes existing entries only)");
  if (*kind != EntryKind::Tensor)
    throw TypeError("set_at_: entry " + key.repr() + " is a " + tensordict::to_string(*kind) +
                    ", not a Tensor");
  TensorMeta meta = *n->tensor_meta(key.back());
  auto target = concat_shape(t.batch, at::IntArrayRef(meta.shape).slice(batch_size().size()));
  if (!at::is_expandable_to(value.sizes(), target))
    throw ShapeError("set_at_: cannot write a value of shape " + format_shape(value.sizes()) +
                     " into " + key.repr() + " at an index of shape " + format_shape(target));
  at::Tensor cast = value.to(meta.device, meta.dtype);
  if (n->holds_values()) {
    at::Tensor leaf = n->peek(key.back())->tensor();
    detail::put_index(leaf, t, cast);
  } else {
    detail::BatchedWrites writes;
    writes.add(storage.get(), n, key, cast.expand(target));
    writes.run(RowSelection::of(t, batch_size()));
  }
  return *this;
}

}  // namespace tensordict
