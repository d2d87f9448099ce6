// apply, arithmetic, reductions, comparisons, fills, devices and dtypes.
#include "core/internal.h"

#include <ATen/ATen.h>

#include <limits>
#include <set>

namespace tensordict {

using detail::format_shape;
using detail::map_leaves;

namespace {

std::size_t B_of(const TensorDictBase& td) { return td.batch_size().size(); }

// The tensor leaf at `key` of `other`, with an error naming the key.
at::Tensor other_leaf(const TensorDictBase& other, const NestedKey& key, const char* op) {
  auto v = other.find(key);
  if (!v)
    throw KeyError(std::string(op) + ": key " + key.repr() +
                   " is missing from the other tensordict");
  if (!v->is_tensor())
    throw TypeError(std::string(op) + ": entry " + key.repr() + " of the other tensordict is a " +
                    to_string(v->kind()));
  return std::move(*v).tensor();
}

// Both tensordicts must have exactly the same tensor leaves.
void check_same_keys(const TensorDictBase& a, const TensorDictBase& b, const char* op) {
  auto ka = a.keys(true, true);
  auto kb = b.keys(true, true);
  std::set<NestedKey> sa(ka.begin(), ka.end()), sb(kb.begin(), kb.end());
  if (sa == sb) return;
  std::string only_a, only_b;
  for (const auto& k : sa)
    if (!sb.count(k)) only_a += (only_a.empty() ? "" : ", ") + k.repr();
  for (const auto& k : sb)
    if (!sa.count(k)) only_b += (only_b.empty() ? "" : ", ") + k.repr();
  throw KeyError(std::string(op) +
                 ": keys in tensordicts mismatch (only in the "
                 "first: [" +
                 only_a + "]; only in the second: [" + only_b + "])");
}

// A tensor operand broadcast left to the batch shape, then right per leaf.
at::Tensor batch_operand(const at::Tensor& t, const TensorDictBase& td, const at::Tensor& leaf) {
  auto b = td.batch_size();
  if (t.dim() > static_cast<int64_t>(b.size()))
    throw ShapeError("a tensor operand of shape " + format_shape(t.sizes()) +
                     " has more dims than the batch size " + format_shape(b));
  at::Tensor e = t.expand(b);
  std::vector<int64_t> shape = b.vec();
  shape.resize(leaf.dim(), 1);
  return e.reshape(shape);
}

using BinOp = at::Tensor (*)(const at::Tensor&, const at::Tensor&);

using BinaryFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

TensorDictBase binary(const TensorDictBase& a, const TensorDictBase& b, const BinaryFn& op,
                      const char* name) {
  check_same_keys(a, b, name);
  if (const auto* ls = detail::as_lazy_stack(a)) {
    auto parts = detail::split_for_members(*ls, b, name);
    return detail::map_members(
        *ls, [&](const TensorDictBase& m, std::size_t i) { return binary(m, parts[i], op, name); });
  }
  return map_leaves(
      a, B_of(a), a.batch_size(),
      [&](const at::Tensor& t, const NestedKey& k) { return op(t, other_leaf(b, k, name)); }, name);
}

TensorDictBase binary(const TensorDictBase& a, const at::Tensor& b, const BinaryFn& op,
                      const char* name) {
  if (const auto* ls = detail::as_lazy_stack(a))
    return detail::map_members(*ls, [&](const TensorDictBase& m, std::size_t i) {
      return binary(m, detail::operand_for_member(*ls, b, i), op, name);
    });
  return map_leaves(
      a, B_of(a), a.batch_size(),
      [&](const at::Tensor& t, const NestedKey&) { return op(t, batch_operand(b, a, t)); }, name);
}

// Member-wise on a lazy stack (the result stays lazy).
TensorDictBase unary(const TensorDictBase& a,
                     const std::function<at::Tensor(const at::Tensor&)>& op, const char* name) {
  if (const auto* ls = detail::as_lazy_stack(a))
    return detail::map_members(
        *ls, [&](const TensorDictBase& m, std::size_t) { return unary(m, op, name); });
  const detail::LazyChildFn on_lazy = [&](const TensorDictBase& c) { return unary(c, op, name); };
  return map_leaves(
      a, B_of(a), a.batch_size(), [&](const at::Tensor& t, const NestedKey&) { return op(t); },
      name, std::nullopt, &on_lazy);
}

void inplace(TensorDictBase& a, const std::function<void(at::Tensor&, const NestedKey&)>& op) {
  // Every leaf checked before any is written: an expanded leaf would make
  // LibTorch refuse the operation halfway through the tensordict. (Only where
  // reading a leaf is free: a storage outside the process would be read twice.)
  if (a.node().holds_values() || a.node().is_lazy_stack())
    detail::for_each_leaf(a, [](const at::Tensor& t, const NestedKey& k) {
      detail::check_writable_leaf(t, k, "in-place operation");
    });
  detail::for_each_leaf(a, [&](const at::Tensor& t, const NestedKey& k) {
    at::Tensor leaf = t;
    try {
      op(leaf, k);
    } catch (const c10::Error& e) {
      // errors.h: a LibTorch failure on a leaf is rethrown naming the key
      // (e.g. an int64 leaf cannot hold the result of div_), like map_leaves.
      throw ShapeError("in-place operation failed on entry " + k.repr() + " of shape " +
                       format_shape(t.sizes()) + " and dtype " +
                       detail::dtype_name(t.scalar_type()) + ": " + e.what_without_backtrace());
    }
  });
}

}  // namespace

// ---- apply -------------------------------------------------------------------

TensorDictBase TensorDictBase::apply(const LeafFn& fn,
                                     std::optional<std::vector<int64_t>> batch_size) const {
  if (const auto* ls = detail::as_lazy_stack(*this); ls && !batch_size)
    return detail::map_members(*ls,
                               [&](const TensorDictBase& m, std::size_t) { return m.apply(fn); });
  if (!batch_size) {
    const detail::LazyChildFn on_lazy = [&](const TensorDictBase& c) { return c.apply(fn); };
    TensorDict out = map_leaves(
        *this, B_of(*this), this->batch_size(),
        [&](const at::Tensor& t, const NestedKey&) { return fn(t); }, "apply", std::nullopt,
        &on_lazy);
    // A function that changes the batch dims must say so with batch_size.
    return out;
  }
  TensorDict raw = map_leaves(
      *this, B_of(*this), {}, [&](const at::Tensor& t, const NestedKey&) { return fn(t); }, "apply",
      std::nullopt, nullptr, detail::StackPolicy::Drop);
  // Nested tensordicts were given batch [] + own extra dims; rebuild with the
  // requested batch size, checking every leaf.
  TensorDict out = detail::make_tensordict(*batch_size, device());
  for (auto& [k, v] : raw.items(true, true)) out.set(k, v);
  for (auto& [k, v] : raw.items(KeysOptions{true, true, true}))
    if (v.is_non_tensor()) out.set(k, v);
  // Per-element values are kept as they are: they must fit the new batch size.
  for (auto& [k, v] : items(KeysOptions{true, true, true}))
    if (v.is_non_tensor_stack()) out.set(k, v);
  return out;
}

TensorDictBase TensorDictBase::apply(const LeafFn2& fn, const TensorDictBase& other) const {
  if (const auto* ls = detail::as_lazy_stack(*this)) {
    auto parts = detail::split_for_members(*ls, other, "apply");
    return detail::map_members(
        *ls, [&](const TensorDictBase& m, std::size_t i) { return m.apply(fn, parts[i]); });
  }
  return map_leaves(
      *this, B_of(*this), batch_size(),
      [&](const at::Tensor& t, const NestedKey& k) { return fn(t, other_leaf(other, k, "apply")); },
      "apply");
}

TensorDictBase& TensorDictBase::apply_(const LeafFn& fn) {
  inplace(*this, [&](at::Tensor& t, const NestedKey& k) {
    at::Tensor r = fn(t);
    if (!r.defined()) return;
    if (!r.is_same(t)) {
      try {
        t.copy_(r);
      } catch (const c10::Error& e) {
        throw ShapeError("apply_: the result for " + k.repr() + " of shape " +
                         format_shape(r.sizes()) + " cannot be copied into the leaf of shape " +
                         format_shape(t.sizes()) + ": " + e.what_without_backtrace());
      }
    }
  });
  return *this;
}

TensorDictBase TensorDictBase::named_apply(const NamedLeafFn& fn,
                                           const NamedApplyOptions& options) const {
  if (const auto* ls = detail::as_lazy_stack(*this))
    return detail::map_members(
        *ls, [&](const TensorDictBase& m, std::size_t) { return m.named_apply(fn, options); });
  return map_leaves(
      *this, B_of(*this), batch_size(),
      [&](const at::Tensor& t, const NestedKey& k) {
        return options.nested_keys || !k.is_nested() ? fn(k, t) : fn(NestedKey(k.back()), t);
      },
      "named_apply");
}

// ---- arithmetic ----------------------------------------------------------------

#define TD_BINARY(name, expr)                                                                \
  TensorDictBase TensorDictBase::name(const TensorDictBase& other) const {                   \
    return binary(                                                                           \
        *this, other, [](const at::Tensor& a, const at::Tensor& b) { return expr; }, #name); \
  }                                                                                          \
  TensorDictBase TensorDictBase::name(const at::Tensor& other) const {                       \
    return binary(                                                                           \
        *this, other, [](const at::Tensor& a, const at::Tensor& b) { return expr; }, #name); \
  }                                                                                          \
  TensorDictBase TensorDictBase::name(const at::Scalar& other) const {                       \
    return unary(                                                                            \
        *this, [&](const at::Tensor& a) { return a.name(other); }, #name);                   \
  }
TD_BINARY(add, a.add(b))
TD_BINARY(sub, a.sub(b))
TD_BINARY(mul, a.mul(b))
TD_BINARY(div, a.div(b))
#undef TD_BINARY

#define TD_BINARY_INPLACE(name, base)                                                          \
  TensorDictBase& TensorDictBase::name(const TensorDictBase& other) {                          \
    check_same_keys(*this, other, #name);                                                      \
    if (const auto* ls = detail::as_lazy_stack(*this)) {                                       \
      auto parts = detail::split_for_members(*ls, other, #name);                               \
      for (std::size_t i = 0; i < parts.size(); ++i) {                                         \
        TensorDictBase m = ls->members()[i];                                                   \
        m.name(parts[i]);                                                                      \
      }                                                                                        \
      return *this;                                                                            \
    }                                                                                          \
    inplace(*this,                                                                             \
            [&](at::Tensor& t, const NestedKey& k) { t.name(other_leaf(other, k, #name)); });  \
    return *this;                                                                              \
  }                                                                                            \
  TensorDictBase& TensorDictBase::name(const at::Tensor& other) {                              \
    if (const auto* ls = detail::as_lazy_stack(*this)) {                                       \
      for (std::size_t i = 0; i < ls->members().size(); ++i) {                                 \
        TensorDictBase m = ls->members()[i];                                                   \
        m.name(detail::operand_for_member(*ls, other, i));                                     \
      }                                                                                        \
      return *this;                                                                            \
    }                                                                                          \
    inplace(*this,                                                                             \
            [&](at::Tensor& t, const NestedKey&) { t.name(batch_operand(other, *this, t)); }); \
    return *this;                                                                              \
  }                                                                                            \
  TensorDictBase& TensorDictBase::name(const at::Scalar& other) {                              \
    inplace(*this, [&](at::Tensor& t, const NestedKey&) { t.name(other); });                   \
    return *this;                                                                              \
  }
TD_BINARY_INPLACE(add_, add)
TD_BINARY_INPLACE(sub_, sub)
TD_BINARY_INPLACE(mul_, mul)
TD_BINARY_INPLACE(div_, div)
#undef TD_BINARY_INPLACE

TensorDictBase TensorDictBase::pow(const at::Scalar& e) const {
  return unary(
      *this, [&](const at::Tensor& t) { return t.pow(e); }, "pow");
}

#define TD_UNARY(name)                                               \
  TensorDictBase TensorDictBase::name() const {                      \
    return unary(                                                    \
        *this, [](const at::Tensor& t) { return t.name(); }, #name); \
  }
TD_UNARY(neg)
TD_UNARY(abs)
TD_UNARY(exp)
TD_UNARY(log)
TD_UNARY(sqrt)
TD_UNARY(sigmoid)
#undef TD_UNARY

TensorDictBase TensorDictBase::clamp(std::optional<at::Scalar> min,
                                     std::optional<at::Scalar> max) const {
  // c10::optional is not std::optional in LibTorch 1.13.
  c10::optional<at::Scalar> lo, hi;
  if (min) lo = *min;
  if (max) hi = *max;
  return unary(
      *this, [&](const at::Tensor& t) { return t.clamp(lo, hi); }, "clamp");
}

TensorDictBase operator+(const TensorDictBase& a, const TensorDictBase& b) { return a.add(b); }
TensorDictBase operator+(const TensorDictBase& a, const at::Tensor& b) { return a.add(b); }
TensorDictBase operator+(const TensorDictBase& a, const at::Scalar& b) { return a.add(b); }
TensorDictBase operator-(const TensorDictBase& a, const TensorDictBase& b) { return a.sub(b); }
TensorDictBase operator-(const TensorDictBase& a, const at::Tensor& b) { return a.sub(b); }
TensorDictBase operator-(const TensorDictBase& a, const at::Scalar& b) { return a.sub(b); }
TensorDictBase operator*(const TensorDictBase& a, const TensorDictBase& b) { return a.mul(b); }
TensorDictBase operator*(const TensorDictBase& a, const at::Tensor& b) { return a.mul(b); }
TensorDictBase operator*(const TensorDictBase& a, const at::Scalar& b) { return a.mul(b); }
TensorDictBase operator/(const TensorDictBase& a, const TensorDictBase& b) { return a.div(b); }
TensorDictBase operator/(const TensorDictBase& a, const at::Tensor& b) { return a.div(b); }
TensorDictBase operator/(const TensorDictBase& a, const at::Scalar& b) { return a.div(b); }
TensorDictBase operator-(const TensorDictBase& a) { return a.neg(); }
TensorDictBase& operator+=(TensorDictBase& a, const TensorDictBase& b) { return a.add_(b); }
TensorDictBase& operator+=(TensorDictBase& a, const at::Scalar& b) { return a.add_(b); }
TensorDictBase& operator-=(TensorDictBase& a, const TensorDictBase& b) { return a.sub_(b); }
TensorDictBase& operator-=(TensorDictBase& a, const at::Scalar& b) { return a.sub_(b); }
TensorDictBase& operator*=(TensorDictBase& a, const TensorDictBase& b) { return a.mul_(b); }
TensorDictBase& operator*=(TensorDictBase& a, const at::Scalar& b) { return a.mul_(b); }
TensorDictBase& operator/=(TensorDictBase& a, const TensorDictBase& b) { return a.div_(b); }
TensorDictBase& operator/=(TensorDictBase& a, const at::Scalar& b) { return a.div_(b); }
TensorDictBase operator==(const TensorDictBase& a, const TensorDictBase& b) { return a.eq(b); }
TensorDictBase operator==(const TensorDictBase& a, const at::Scalar& b) { return a.eq(b); }
TensorDictBase operator!=(const TensorDictBase& a, const TensorDictBase& b) { return a.ne(b); }
TensorDictBase operator!=(const TensorDictBase& a, const at::Scalar& b) { return a.ne(b); }

// ---- reductions --------------------------------------------------------------------

namespace {

using ReduceFn = std::function<at::Tensor(const at::Tensor&, at::IntArrayRef, bool)>;

TensorDict reduce(const TensorDictBase& td, std::optional<std::vector<int64_t>> dims, bool keepdim,
                  const ReduceFn& fn, const char* name) {
  const int64_t B = td.batch_dims();
  auto b = td.batch_size();
  if (!dims) {
    // Every leaf fully reduced; the result has batch [], and so has every
    // nested tensordict (its extra batch dims are reduced too: root_dims is
    // "all of them", else a nested one kept e.g. [2] over scalar leaves).
    return map_leaves(
        td, std::numeric_limits<std::size_t>::max(), {},
        [&](const at::Tensor& t, const NestedKey&) {
          std::vector<int64_t> all(t.dim());
          for (int64_t i = 0; i < t.dim(); ++i) all[i] = i;
          return fn(t, all, false);
        },
        name);
  }
  std::vector<int64_t> ds;
  std::vector<bool> reduced(static_cast<std::size_t>(B), false);
  for (auto d : *dims) {
    int64_t w = detail::wrap_dim(d, B, name);
    reduced[w] = true;
    ds.push_back(w);
  }
  std::vector<int64_t> target;
  for (int64_t i = 0; i < B; ++i) {
    if (!reduced[i])
      target.push_back(b[i]);
    else if (keepdim)
      target.push_back(1);
  }
  return map_leaves(
      td, b.size(), target,
      [&](const at::Tensor& t, const NestedKey&) { return fn(t, ds, keepdim); }, name);
}

}  // namespace

TensorDict TensorDictBase::sum(std::optional<std::vector<int64_t>> dims, bool keepdim) const {
  return reduce(
      *this, dims, keepdim,
      [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.sum(d, k); }, "sum");
}
TensorDict TensorDictBase::mean(std::optional<std::vector<int64_t>> dims, bool keepdim) const {
  return reduce(
      *this, dims, keepdim,
      [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.mean(d, k); }, "mean");
}
TensorDict TensorDictBase::amax(std::optional<std::vector<int64_t>> dims, bool keepdim) const {
  return reduce(
      *this, dims, keepdim,
      [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.amax(d, k); }, "amax");
}
TensorDict TensorDictBase::amin(std::optional<std::vector<int64_t>> dims, bool keepdim) const {
  return reduce(
      *this, dims, keepdim,
      [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.amin(d, k); }, "amin");
}

namespace {
TensorDictBase::ValuesIndices minmax(const TensorDictBase& td, int64_t dim, bool keepdim,
                                     bool is_max) {
  const char* name = is_max ? "max" : "min";
  int64_t d = detail::wrap_dim(dim, td.batch_dims(), name);
  auto target = td.batch_size().vec();
  if (keepdim)
    target[d] = 1;
  else
    target.erase(target.begin() + d);
  const std::size_t B = td.batch_size().size();
  TensorDict values = map_leaves(
      td, B, target,
      [&](const at::Tensor& t, const NestedKey&) {
        return std::get<0>(is_max ? t.max(d, keepdim) : t.min(d, keepdim));
      },
      name);
  TensorDict indices = map_leaves(
      td, B, target,
      [&](const at::Tensor& t, const NestedKey&) {
        return std::get<1>(is_max ? t.max(d, keepdim) : t.min(d, keepdim));
      },
      name);
  return {values, indices};
}
}  // namespace

TensorDictBase::ValuesIndices TensorDictBase::max(int64_t dim, bool keepdim) const {
  return minmax(*this, dim, keepdim, true);
}
TensorDictBase::ValuesIndices TensorDictBase::min(int64_t dim, bool keepdim) const {
  return minmax(*this, dim, keepdim, false);
}

bool TensorDictBase::all() const {
  bool result = true;
  detail::for_each_leaf(*this, [&](const at::Tensor& t, const NestedKey&) {
    if (result && !t.all().item<bool>()) result = false;
  });
  return result;
}

bool TensorDictBase::any() const {
  bool result = false;
  detail::for_each_leaf(*this, [&](const at::Tensor& t, const NestedKey&) {
    if (!result && t.any().item<bool>()) result = true;
  });
  return result;
}

TensorDict TensorDictBase::all(int64_t dim) const {
  int64_t d = detail::wrap_dim(dim, batch_dims(), "all");
  auto target = batch_size().vec();
  target.erase(target.begin() + d);
  return map_leaves(
      *this, batch_size().size(), target,
      [&](const at::Tensor& t, const NestedKey&) { return t.all(d); }, "all");
}

TensorDict TensorDictBase::any(int64_t dim) const {
  int64_t d = detail::wrap_dim(dim, batch_dims(), "any");
  auto target = batch_size().vec();
  target.erase(target.begin() + d);
  return map_leaves(
      *this, batch_size().size(), target,
      [&](const at::Tensor& t, const NestedKey&) { return t.any(d); }, "any");
}

// ---- comparisons -------------------------------------------------------------------

TensorDictBase TensorDictBase::eq(const TensorDictBase& other) const {
  return binary(
      *this, other, [](const at::Tensor& a, const at::Tensor& b) { return a.eq(b); }, "eq");
}
TensorDictBase TensorDictBase::eq(const at::Tensor& other) const {
  return binary(
      *this, other, [](const at::Tensor& a, const at::Tensor& b) { return a.eq(b); }, "eq");
}
TensorDictBase TensorDictBase::eq(const at::Scalar& other) const {
  return unary(
      *this, [&](const at::Tensor& a) { return a.eq(other); }, "eq");
}
TensorDictBase TensorDictBase::ne(const TensorDictBase& other) const {
  return binary(
      *this, other, [](const at::Tensor& a, const at::Tensor& b) { return a.ne(b); }, "ne");
}
TensorDictBase TensorDictBase::ne(const at::Tensor& other) const {
  return binary(
      *this, other, [](const at::Tensor& a, const at::Tensor& b) { return a.ne(b); }, "ne");
}
TensorDictBase TensorDictBase::ne(const at::Scalar& other) const {
  return unary(
      *this, [&](const at::Tensor& a) { return a.ne(other); }, "ne");
}
TensorDictBase TensorDictBase::lt(const at::Scalar& o) const {
  return unary(
      *this, [&](const at::Tensor& a) { return a.lt(o); }, "lt");
}
TensorDictBase TensorDictBase::le(const at::Scalar& o) const {
  return unary(
      *this, [&](const at::Tensor& a) { return a.le(o); }, "le");
}
TensorDictBase TensorDictBase::gt(const at::Scalar& o) const {
  return unary(
      *this, [&](const at::Tensor& a) { return a.gt(o); }, "gt");
}
TensorDictBase TensorDictBase::ge(const at::Scalar& o) const {
  return unary(
      *this, [&](const at::Tensor& a) { return a.ge(o); }, "ge");
}

bool TensorDictBase::allclose(const TensorDictBase& other, double rtol, double atol,
                              bool equal_nan) const {
  auto ka = keys(true, true);
  auto kb = other.keys(true, true);
  if (std::set<NestedKey>(ka.begin(), ka.end()) != std::set<NestedKey>(kb.begin(), kb.end()))
    return false;
  if (!batch_size().equals(other.batch_size())) return false;
  for (const auto& k : ka) {
    at::Tensor a = get(k), b = other.get(k);
    if (!a.sizes().equals(b.sizes())) return false;
    if (!at::allclose(a, b.to(a.device()), rtol, atol, equal_nan)) return false;
  }
  return true;
}

bool TensorDictBase::equal(const TensorDictBase& other) const {
  if (!batch_size().equals(other.batch_size())) return false;
  auto ia = items(KeysOptions{true, true, true});
  auto ib = other.items(KeysOptions{true, true, true});
  if (ia.size() != ib.size()) return false;
  for (const auto& [k, v] : ia) {
    auto o = other.find(k);
    if (!o || o->kind() != v.kind()) return false;
    if (v.is_tensor()) {
      const auto& a = v.tensor();
      const auto& b = o->tensor();
      if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes()) ||
          !at::equal(a, b.to(a.device())))
        return false;
    } else if (v.is_non_tensor_stack()) {
      const auto& a = v.non_tensor_stack();
      const auto& b = o->non_tensor_stack();
      if (!a.batch_size().equals(b.batch_size()) || a.values() != b.values()) return false;
    } else if (v.non_tensor().data() != o->non_tensor().data()) {
      return false;
    }
  }
  return true;
}

// ---- fills, devices, dtypes ---------------------------------------------------------

TensorDictBase& TensorDictBase::zero_() {
  inplace(*this, [](at::Tensor& t, const NestedKey&) { t.zero_(); });
  return *this;
}

TensorDictBase& TensorDictBase::fill_(const at::Scalar& value) {
  inplace(*this, [&](at::Tensor& t, const NestedKey&) { t.fill_(value); });
  return *this;
}

TensorDictBase& TensorDictBase::fill_(const NestedKey& key, const at::Scalar& value) {
  if (const auto* ls = detail::as_lazy_stack(*this)) {
    // get() would return a stacked copy: fill the members' leaves.
    if (!contains(key)) (void)at(key);  // KeyError naming the key
    for (auto m : ls->members()) m.fill_(key, value);
    return *this;
  }
  at::Tensor t = get(key);
  t.fill_(value);
  return *this;
}

TensorDictBase TensorDictBase::to(at::Device device, bool non_blocking) const {
  if (node().device() == device) return *this;
  if (const auto* ls = detail::as_lazy_stack(*this)) {
    TensorDictBase out = detail::map_members(
        *ls, [&](const TensorDictBase& m, std::size_t) { return m.to(device, non_blocking); });
    detail::propagate_lock(*this, out);
    return out;
  }
  const detail::LazyChildFn on_lazy = [&](const TensorDictBase& c) {
    return c.to(device, non_blocking);
  };
  TensorDictBase out = map_leaves(
      *this, B_of(*this), batch_size(),
      [&](const at::Tensor& t, const NestedKey& key) {
        try {
          return t.to(device, non_blocking);
        } catch (const c10::Error& e) {
          // A device this build lacks (CUDA without CUDA) is a device error.
          throw DeviceError("to: cannot move the entry " + key.repr() + " to " + device.str() +
                            ": " + e.what_without_backtrace());
        }
      },
      "to", std::optional<at::Device>(device), &on_lazy);
  detail::propagate_lock(*this, out);
  return out;
}

TensorDictBase TensorDictBase::to(at::ScalarType dtype) const {
  TensorDictBase out = unary(
      *this, [&](const at::Tensor& t) { return t.to(dtype); }, "to");
  if (is_locked()) out.lock_();
  return out;
}

bool TensorDictBase::is_contiguous() const {
  bool ok = true;
  detail::for_each_leaf(
      *this, [&](const at::Tensor& t, const NestedKey&) { ok = ok && t.is_contiguous(); });
  return ok;
}

TensorDict TensorDictBase::contiguous() const {
  // Dense: a lazy stack is stacked into one TensorDict (Python's contiguous()).
  return map_leaves(
      *this, B_of(*this), batch_size(),
      [](const at::Tensor& t, const NestedKey&) { return t.contiguous(); }, "contiguous");
}

TensorDictBase TensorDictBase::detach() const {
  return unary(
      *this, [](const at::Tensor& t) { return t.detach(); }, "detach");
}

TensorDictBase& TensorDictBase::detach_() {
  inplace(*this, [](at::Tensor& t, const NestedKey&) { t.detach_(); });
  return *this;
}

TensorDictBase& TensorDictBase::requires_grad_(bool requires_grad) {
  inplace(*this, [&](at::Tensor& t, const NestedKey&) {
    if (t.is_floating_point() || t.is_complex()) t.requires_grad_(requires_grad);
  });
  return *this;
}

}  // namespace tensordict
