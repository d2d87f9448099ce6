// Shape operations on batch dims: every leaf gets the torch op with its
// feature dims appended.
#include "core/internal.h"
#include "core/lazy_dispatch.h"

#include <ATen/ATen.h>

#include <numeric>

namespace tensordict {
namespace detail {

namespace {

std::vector<int64_t> concat(at::IntArrayRef a, at::IntArrayRef b) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

TensorDict map_rec(const TensorDictBase& src, std::size_t root_dims, at::IntArrayRef new_batch,
                   const MapFn& fn, const char* op, std::optional<at::Device> device,
                   const NestedKey& path, const LazyChildFn* on_lazy, StackPolicy stacks) {
  const Node& n = src.node();
  auto b = n.batch_size();
  TensorDict out =
      make_tensordict(concat(new_batch, b.slice(std::min(root_dims, b.size()))), device);
  auto& dst = static_cast<MemoryNode&>(out.node());
  dst.reserve(n.size());
  auto one = [&](const std::string& k, const Value& v) {
    NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
    switch (v.kind()) {
      case EntryKind::Tensor: {
        at::Tensor r;
        try {
          r = fn(std::get<0>(v.variant()), key);
        } catch (const Error&) {
          throw;
        } catch (const c10::Error& e) {
          throw ShapeError(std::string(op) + " failed on entry " + key.repr() + " of shape " +
                           format_shape(v.tensor().sizes()) + ": " + e.what_without_backtrace());
        }
        if (r.defined()) dst.write(k, std::move(r));
        break;
      }
      case EntryKind::TensorDict: {
        const auto& child = std::get<1>(v.variant());
        if (on_lazy && child.node().is_lazy_stack()) {
          dst.write(k, (*on_lazy)(child));
          break;
        }
        dst.write(k, map_rec(child, root_dims, new_batch, fn, op, device, key, on_lazy, stacks));
        break;
      }
      case EntryKind::NonTensorStack: {
        const auto& s = std::get<3>(v.variant());
        auto sb = s.batch_size();
        auto nb = concat(new_batch, sb.slice(std::min(root_dims, sb.size())));
        Value r = s;
        if (stacks == StackPolicy::Drop) break;
        if (stacks == StackPolicy::MoveElements) {
          r = map_non_tensor_stack(
              s, [&](const at::Tensor& p) { return fn(p, key); }, op, key);
        } else if (!sb.equals(nb)) {
          // Values cannot be reduced: equal ones collapse to one NonTensorData.
          if (!s.all_equal() || s.numel() == 0)
            throw ShapeError(std::string(op) +
                             " cannot map the per-element non-tensor "
                             "values of the NonTensorStack " +
                             key.repr() +
                             " from batch "
                             "size " +
                             format_shape(sb) + " to " + format_shape(nb) + "; exclude it first");
          r = NonTensorData(s.values().front(), nb, s.device());
        }
        if (r.is_non_tensor())
          r.non_tensor().set_device(device);
        else
          r.non_tensor_stack().set_device(device);
        dst.write(k, std::move(r));
        break;
      }
      case EntryKind::NonTensor: {
        NonTensorData d = v.non_tensor();
        auto nb = d.batch_size();
        d.set_batch_size(concat(new_batch, nb.slice(std::min(root_dims, nb.size()))));
        d.set_device(device);
        dst.write(k, d);
        break;
      }
    }
  };
  if (n.is_memory_node()) {
    for (const auto& [k, v] : static_cast<const MemoryNode&>(n).entries()) one(k, v);
  } else {
    for (const auto& k : n.keys()) one(k, *n.find(k));
  }
  return out;
}

}  // namespace

TensorDict map_leaves(const TensorDictBase& src, std::size_t root_dims, at::IntArrayRef new_batch,
                      const MapFn& fn, const char* op,
                      std::optional<std::optional<at::Device>> device, const LazyChildFn* on_lazy,
                      StackPolicy stacks) {
  return map_rec(src, root_dims, new_batch, fn, op, device ? *device : src.device(), NestedKey(),
                 on_lazy, stacks);
}

namespace {
void for_each_leaf_rec(const TensorDictBase& src, const NestedKey& path,
                       const std::function<void(const at::Tensor&, const NestedKey&)>& fn) {
  const Node& n = src.node();
  // The members hold the data: in-place functions must see their leaves,
  // not a stacked copy.
  if (lazy_dispatch(n, [&](const LazyStackNode& ls) {
        for (const auto& m : ls.members()) for_each_leaf_rec(m, path, fn);
      }))
    return;
  auto one = [&](const std::string& k, const Value& v) {
    if (v.is_tensor())
      fn(v.tensor(), path.empty() ? NestedKey(k) : path.child(k));
    else if (v.is_tensordict())
      for_each_leaf_rec(v.tensordict(), path.empty() ? NestedKey(k) : path.child(k), fn);
  };
  if (n.holds_values()) {
    for (const auto& k : n.keys()) one(k, *n.peek(k));
  } else {
    for (const auto& k : n.keys()) {
      auto kind = n.kind(k);
      if (kind == EntryKind::Tensor || kind == EntryKind::TensorDict) one(k, *n.find(k));
    }
  }
}
}  // namespace

void for_each_leaf(const TensorDictBase& src,
                   const std::function<void(const at::Tensor&, const NestedKey&)>& fn) {
  for_each_leaf_rec(src, NestedKey(), fn);
}

}  // namespace detail

using detail::format_shape;
using detail::map_leaves;
using detail::wrap_dim;

namespace {

std::vector<int64_t> with_features(at::IntArrayRef batch_part, const at::Tensor& leaf,
                                   std::size_t B) {
  std::vector<int64_t> out(batch_part.begin(), batch_part.end());
  out.insert(out.end(), leaf.sizes().begin() + static_cast<std::ptrdiff_t>(B), leaf.sizes().end());
  return out;
}

// Resolves -1 in `shape` for `numel` elements (ShapeError when impossible).
std::vector<int64_t> infer_shape(at::IntArrayRef shape, int64_t numel, at::IntArrayRef from) {
  std::vector<int64_t> out(shape.begin(), shape.end());
  int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) throw ShapeError("only one dimension can be inferred");
      infer = static_cast<int>(i);
    } else if (out[i] < 0) {
      throw ShapeError("invalid shape dimension " + std::to_string(out[i]));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw ShapeError("shape " + format_shape(shape) + " is invalid for a batch of size " +
                       format_shape(from));
    out[infer] = numel / known;
  } else if (known != numel) {
    throw ShapeError("shape " + format_shape(shape) + " is invalid for a batch of size " +
                     format_shape(from));
  }
  return out;
}

TensorDictBase locked_like(const TensorDictBase& src, TensorDictBase out) {
  detail::propagate_lock(src, out);
  return out;
}

// A result whose leaves are views of a memory-mapped or shared tensordict's
// leaves is memory-mapped or shared too, and locked, as in Python (and as
// index(), unbind() and split() results already are).
TensorDictBase view_like(const TensorDictBase& src, TensorDictBase out) {
  detail::propagate_lock(src, out);
  const FileBacking* files = detail::file_backing(src.node());
  if (files == nullptr || (!files->memmap && !files->shared)) return out;
  out.lock_();
  detail::copy_mapped_status(*files, out.node());
  return out;
}

// True when every tensor leaf of `out` shares its storage with the leaf of
// the same key in `src` (reshape gives views only when strides allow).
bool leaves_are_views(const TensorDictBase& src, const TensorDictBase& out) {
  bool views = true;
  detail::for_each_leaf(out, [&](const at::Tensor& t, const NestedKey& k) {
    views = views && t.is_alias_of(src.get(k));
  });
  return views;
}

}  // namespace

namespace detail {
void refuse_outside_storage(const TensorDictBase& td, std::string_view op, std::string_view why) {
  if (!td.node().keeps_data_outside()) return;
  throw UnsupportedError(std::string(op) + ": a " + td.node().type_name() +
                         " keeps its data outside the process, " + std::string(why) +
                         "; call to_tensordict() first for an in-memory copy");
}
}  // namespace detail

namespace {
constexpr std::string_view kNoViews = "so it has no views";
}  // namespace

TensorDictBase TensorDictBase::view(at::IntArrayRef shape) const {
  detail::refuse_outside_storage(*this, "view", kNoViews);
  auto b = batch_size();
  auto target = infer_shape(shape, numel(), b);
  if (b.equals(target)) return *this;
  const std::size_t B = b.size();
  return view_like(*this, map_leaves(
                              *this, B, target,
                              [&](const at::Tensor& t, const NestedKey&) {
                                return t.view(with_features(target, t, B));
                              },
                              "view", std::nullopt, nullptr, detail::StackPolicy::MoveElements));
}

TensorDictBase TensorDictBase::reshape(at::IntArrayRef shape) const {
  auto b = batch_size();
  auto target = infer_shape(shape, numel(), b);
  if (b.equals(target)) return *this;
  const std::size_t B = b.size();
  TensorDictBase out = map_leaves(
      *this, B, target,
      [&](const at::Tensor& t, const NestedKey&) { return t.reshape(with_features(target, t, B)); },
      "reshape", std::nullopt, nullptr, detail::StackPolicy::MoveElements);
  const bool mapped = detail::is_mapped(node());
  return mapped && leaves_are_views(*this, out) ? view_like(*this, out) : locked_like(*this, out);
}

TensorDictBase TensorDictBase::flatten(int64_t start_dim, int64_t end_dim) const {
  const int64_t B = batch_dims();
  if (B == 0) throw IndexError("flatten: the tensordict has no batch dimension");
  int64_t s = wrap_dim(start_dim, B, "flatten");
  int64_t e = wrap_dim(end_dim, B, "flatten");
  if (s > e) throw IndexError("flatten: start_dim cannot come after end_dim");
  if (s == e) return *this;
  auto b = batch_size();
  std::vector<int64_t> target(b.begin(), b.begin() + s);
  int64_t prod = 1;
  for (int64_t i = s; i <= e; ++i) prod *= b[i];
  target.push_back(prod);
  target.insert(target.end(), b.begin() + e + 1, b.end());
  return reshape(target);
}

TensorDictBase TensorDictBase::unflatten(int64_t dim, at::IntArrayRef sizes) const {
  detail::refuse_outside_storage(*this, "unflatten", kNoViews);
  const int64_t B = batch_dims();
  int64_t d = wrap_dim(dim, B, "unflatten");
  auto b = batch_size();
  auto inner = infer_shape(sizes, b[d], b.slice(d, 1));
  std::vector<int64_t> target(b.begin(), b.begin() + d);
  target.insert(target.end(), inner.begin(), inner.end());
  target.insert(target.end(), b.begin() + d + 1, b.end());
  return view(target);
}

TensorDictBase TensorDictBase::squeeze(int64_t dim) const {
  detail::refuse_outside_storage(*this, "squeeze", kNoViews);
  const int64_t B = batch_dims();
  int64_t d = wrap_dim(dim, B, "squeeze");
  auto b = batch_size();
  if (b[d] != 1) return *this;
  if (auto lazy = detail::lazy_dispatch(*this, detail::lazy_squeeze, d)) return std::move(*lazy);
  std::vector<int64_t> target = b.vec();
  target.erase(target.begin() + d);
  return view_like(*this, map_leaves(
                              *this, b.size(), target,
                              [&](const at::Tensor& t, const NestedKey&) { return t.squeeze(d); },
                              "squeeze", std::nullopt, nullptr, detail::StackPolicy::MoveElements));
}

TensorDictBase TensorDictBase::squeeze() const {
  detail::refuse_outside_storage(*this, "squeeze", kNoViews);
  auto b = batch_size();
  if (auto lazy = detail::lazy_dispatch(*this, detail::lazy_squeeze_all, *this))
    return std::move(*lazy);
  std::vector<int64_t> target;
  for (auto s : b)
    if (s != 1) target.push_back(s);
  if (target.size() == b.size()) return *this;
  return view(target);
}

TensorDictBase TensorDictBase::unsqueeze(int64_t dim) const {
  detail::refuse_outside_storage(*this, "unsqueeze", kNoViews);
  const int64_t B = batch_dims();
  int64_t d = wrap_dim(dim, B + 1, "unsqueeze");
  if (auto lazy = detail::lazy_dispatch(*this, detail::lazy_unsqueeze, d)) return std::move(*lazy);
  auto target = batch_size().vec();
  target.insert(target.begin() + d, 1);
  return view_like(
      *this,
      map_leaves(
          *this, B, target, [&](const at::Tensor& t, const NestedKey&) { return t.unsqueeze(d); },
          "unsqueeze", std::nullopt, nullptr, detail::StackPolicy::MoveElements));
}

TensorDictBase TensorDictBase::permute(at::IntArrayRef dims) const {
  detail::refuse_outside_storage(*this, "permute", kNoViews);
  const int64_t B = batch_dims();
  if (static_cast<int64_t>(dims.size()) != B)
    throw IndexError("permute: got " + std::to_string(dims.size()) +
                     " dims for a tensordict with " + std::to_string(B) + " batch dimension(s)");
  std::vector<int64_t> perm;
  std::vector<bool> seen(static_cast<std::size_t>(B), false);
  for (auto d : dims) {
    int64_t w = wrap_dim(d, B, "permute");
    if (seen[w]) throw IndexError("permute: repeated dim " + std::to_string(d));
    seen[w] = true;
    perm.push_back(w);
  }
  bool identity = true;
  for (int64_t i = 0; i < B; ++i) identity &= perm[i] == i;
  if (identity) return *this;
  if (auto lazy = detail::lazy_dispatch(*this, detail::lazy_permute, perm)) return std::move(*lazy);
  auto b = batch_size();
  std::vector<int64_t> target;
  target.reserve(perm.size());
  for (auto p : perm) target.push_back(b[p]);
  return view_like(*this, map_leaves(
                              *this, B, target,
                              [&](const at::Tensor& t, const NestedKey&) {
                                std::vector<int64_t> full = perm;
                                for (int64_t i = B; i < t.dim(); ++i) full.push_back(i);
                                return t.permute(full);
                              },
                              "permute", std::nullopt, nullptr, detail::StackPolicy::MoveElements));
}

TensorDictBase TensorDictBase::transpose(int64_t dim0, int64_t dim1) const {
  detail::refuse_outside_storage(*this, "transpose", kNoViews);
  const int64_t B = batch_dims();
  int64_t a = wrap_dim(dim0, B, "transpose");
  int64_t c = wrap_dim(dim1, B, "transpose");
  if (a == c) return *this;
  if (auto lazy = detail::lazy_dispatch(*this, detail::lazy_transpose, a, c))
    return std::move(*lazy);
  auto target = batch_size().vec();
  std::swap(target[a], target[c]);
  return view_like(*this,
                   map_leaves(
                       *this, B, target,
                       [&](const at::Tensor& t, const NestedKey&) { return t.transpose(a, c); },
                       "transpose", std::nullopt, nullptr, detail::StackPolicy::MoveElements));
}

TensorDictBase TensorDictBase::expand(at::IntArrayRef shape) const {
  auto b = batch_size();
  const std::size_t B = b.size();
  if (shape.size() < B)
    throw ShapeError("expand: the new shape " + format_shape(shape) +
                     " has fewer dims than the batch size " + format_shape(b));
  std::vector<int64_t> target(shape.begin(), shape.end());
  const std::size_t lead = shape.size() - B;
  for (std::size_t i = 0; i < B; ++i) {
    int64_t& s = target[lead + i];
    if (s == -1) s = b[i];
    if (b[i] != 1 && s != b[i])
      throw ShapeError("expand: cannot expand batch size " + format_shape(b) + " to " +
                       format_shape(shape));
  }
  if (b.equals(target)) return *this;
  return locked_like(*this,
                     map_leaves(
                         *this, B, target,
                         [&](const at::Tensor& t, const NestedKey&) {
                           return t.expand(with_features(target, t, B));
                         },
                         "expand", std::nullopt, nullptr, detail::StackPolicy::MoveElements));
}

std::vector<TensorDictBase> TensorDictBase::unbind(int64_t dim) const {
  const int64_t B = batch_dims();
  int64_t d = wrap_dim(dim, B, "unbind");
  auto b = batch_size();
  std::vector<TensorDictBase> out;
  out.reserve(static_cast<std::size_t>(b[d]));
  for (int64_t i = 0; i < b[d]; ++i) {
    std::vector<at::indexing::TensorIndex> idx(static_cast<std::size_t>(d), at::indexing::Slice());
    idx.emplace_back(i);
    TensorDictBase r = index(idx);
    if (is_locked()) r.lock_();
    out.push_back(r);
  }
  return out;
}

std::vector<TensorDictBase> TensorDictBase::split(at::IntArrayRef split_sizes, int64_t dim) const {
  const int64_t B = batch_dims();
  int64_t d = wrap_dim(dim, B, "split");
  int64_t total = 0;
  for (auto s : split_sizes) total += s;
  if (total != batch_size()[d])
    throw ShapeError("split: the sizes " + format_shape(split_sizes) + " do not sum to batch dim " +
                     std::to_string(d) + " of size " + std::to_string(batch_size()[d]));
  std::vector<TensorDictBase> out;
  int64_t start = 0;
  for (auto s : split_sizes) {
    std::vector<at::indexing::TensorIndex> idx(static_cast<std::size_t>(d), at::indexing::Slice());
    idx.emplace_back(at::indexing::Slice(start, start + s));
    TensorDictBase r = index(idx);
    if (is_locked()) r.lock_();
    out.push_back(r);
    start += s;
  }
  return out;
}

std::vector<TensorDictBase> TensorDictBase::split(int64_t split_size, int64_t dim) const {
  if (split_size <= 0) throw ValueError("split: split_size must be positive");
  int64_t d = wrap_dim(dim, batch_dims(), "split");
  int64_t n = batch_size()[d];
  std::vector<int64_t> sizes;
  for (int64_t s = 0; s < n; s += split_size) sizes.push_back(std::min(split_size, n - s));
  return split(sizes, d);
}

std::vector<TensorDictBase> TensorDictBase::chunk(int64_t chunks, int64_t dim) const {
  if (chunks <= 0) throw ValueError("chunk: chunks must be positive");
  int64_t d = wrap_dim(dim, batch_dims(), "chunk");
  int64_t n = batch_size()[d];
  int64_t size = (n + chunks - 1) / chunks;
  return split(std::max<int64_t>(size, 1), d);
}

TensorDictBase TensorDictBase::narrow(int64_t dim, int64_t start, int64_t length) const {
  int64_t d = wrap_dim(dim, batch_dims(), "narrow");
  int64_t n = batch_size()[d];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    throw IndexError("narrow: [" + std::to_string(start) + ", " + std::to_string(start + length) +
                     ") is out of range for " + "batch dim " + std::to_string(d) + " of size " +
                     std::to_string(n));
  std::vector<at::indexing::TensorIndex> idx(static_cast<std::size_t>(d), at::indexing::Slice());
  idx.emplace_back(at::indexing::Slice(start, start + length));
  return index(idx);
}

TensorDict TensorDictBase::gather(int64_t dim, const at::Tensor& index) const {
  const int64_t B = batch_dims();
  int64_t d = wrap_dim(dim, B, "gather");
  if (index.dim() != B)
    throw ShapeError("gather: the index must have " + std::to_string(B) +
                     " dims (the batch dims), got shape " + format_shape(index.sizes()));
  auto target = index.sizes().vec();
  return map_leaves(
      *this, B, target,
      [&](const at::Tensor& t, const NestedKey&) {
        std::vector<int64_t> view_shape = index.sizes().vec();
        view_shape.resize(t.dim(), 1);
        auto idx = index.view(view_shape).expand(with_features(target, t, B));
        return t.gather(d, idx);
      },
      "gather", std::nullopt, nullptr, detail::StackPolicy::MoveElements);
}

namespace {

// A batch-shaped (prefix) mask expanded to the right over a leaf.
at::Tensor expand_right(const at::Tensor& mask, const at::Tensor& leaf) {
  std::vector<int64_t> shape = mask.sizes().vec();
  shape.resize(leaf.dim(), 1);
  return mask.view(shape).expand(leaf.sizes());
}

void check_batch_mask(const TensorDictBase& td, const at::Tensor& mask, const char* op) {
  auto b = td.batch_size();
  auto m = mask.sizes();
  if (m.size() > b.size() || !std::equal(m.begin(), m.end(), b.begin()))
    throw ShapeError(std::string(op) + ": the mask of shape " + format_shape(m) +
                     " must match the leading batch dims " + format_shape(b));
}

}  // namespace

TensorDict TensorDictBase::masked_fill(const at::Tensor& mask, const at::Scalar& value) const {
  check_batch_mask(*this, mask, "masked_fill");
  return map_leaves(
      *this, batch_size().size(), batch_size(),
      [&](const at::Tensor& t, const NestedKey&) {
        return t.masked_fill(expand_right(mask, t), value);
      },
      "masked_fill");
}

TensorDictBase& TensorDictBase::masked_fill_(const at::Tensor& mask, const at::Scalar& value) {
  check_batch_mask(*this, mask, "masked_fill_");
  if (detail::lazy_dispatch(*this, detail::lazy_masked_fill_, mask, value)) return *this;
  detail::for_each_leaf(*this, [&](const at::Tensor& t, const NestedKey&) {
    t.masked_fill_(expand_right(mask, t), value);  // in place: the tensor handle is const
  });
  return *this;
}

TensorDict TensorDictBase::where(const at::Tensor& condition, const TensorDictBase& other) const {
  check_batch_mask(*this, condition, "where");
  return map_leaves(
      *this, batch_size().size(), batch_size(),
      [&](const at::Tensor& t, const NestedKey& key) {
        at::Tensor o = other.get(key);
        return at::where(expand_right(condition, t), t, o);
      },
      "where");
}

TensorDict TensorDictBase::where(const at::Tensor& condition, const at::Scalar& other) const {
  check_batch_mask(*this, condition, "where");
  return map_leaves(
      *this, batch_size().size(), batch_size(),
      [&](const at::Tensor& t, const NestedKey&) {
        return at::where(expand_right(condition, t), t, at::scalar_tensor(other, t.options()));
      },
      "where");
}

}  // namespace tensordict
