// apply, arithmetic, reductions, comparisons, fills, devices and dtypes.
#include "core/internal.h"
#include "core/lazy_dispatch.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/GradMode.h>
#include <torch/version.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

// The fused (foreach) forms LibTorch 1.13 lacks: per-leaf loops there.
#define TENSORDICT_HAVE_FOREACH_LERP (TORCH_VERSION_MAJOR >= 2)
#define TENSORDICT_HAVE_FOREACH_COPY \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2))

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
  if (auto lazy = detail::lazy_dispatch(a, detail::map_members_with, b, name,
                                        [&](const TensorDictBase& m, const TensorDictBase& part) {
                                          return binary(m, part, op, name);
                                        }))
    return std::move(*lazy);
  return map_leaves(
      a, B_of(a), a.batch_size(),
      [&](const at::Tensor& t, const NestedKey& k) { return op(t, other_leaf(b, k, name)); }, name);
}

TensorDictBase binary(const TensorDictBase& a, const at::Tensor& b, const BinaryFn& op,
                      const char* name) {
  if (auto lazy = detail::lazy_dispatch(a, detail::map_members_with_tensor, b,
                                        [&](const TensorDictBase& m, const at::Tensor& part) {
                                          return binary(m, part, op, name);
                                        }))
    return std::move(*lazy);
  return map_leaves(
      a, B_of(a), a.batch_size(),
      [&](const at::Tensor& t, const NestedKey&) { return op(t, batch_operand(b, a, t)); }, name);
}

// Member-wise on a lazy stack (the result stays lazy).
TensorDictBase unary(const TensorDictBase& a,
                     const std::function<at::Tensor(const at::Tensor&)>& op, const char* name) {
  if (auto lazy = detail::lazy_dispatch(
          a, detail::map_members,
          [&](const TensorDictBase& m, std::size_t) { return unary(m, op, name); }))
    return std::move(*lazy);
  const detail::LazyChildFn on_lazy = [&](const TensorDictBase& c) { return unary(c, op, name); };
  return map_leaves(
      a, B_of(a), a.batch_size(), [&](const at::Tensor& t, const NestedKey&) { return op(t); },
      name, std::nullopt, &on_lazy);
}

// The tensor leaves an in-place operation writes, in for_each_leaf's order
// (the members' leaves for a lazy stack).
struct Leaves {
  std::vector<NestedKey> keys;
  std::vector<at::Tensor> tensors;
};

Leaves collect_leaves(const TensorDictBase& a) {
  Leaves out;
  detail::for_each_leaf(a, [&](const at::Tensor& t, const NestedKey& k) {
    out.keys.push_back(k);
    out.tensors.push_back(t);
  });
  return out;
}

// Every leaf checked before any is written: an expanded leaf would make
// LibTorch refuse the operation halfway through the tensordict. (Only where
// the leaves live in memory: a storage outside the process hands out copies.)
void check_writable(const TensorDictBase& a, const Leaves& leaves) {
  if (!a.node().holds_values() && !a.node().is_lazy_stack()) return;
  for (std::size_t i = 0; i < leaves.tensors.size(); ++i)
    detail::check_writable_leaf(leaves.tensors[i], leaves.keys[i], "in-place operation");
}

// The tensor leaves of a tree whose every level is an in-memory TensorDict,
// with their keys, in for_each_leaf's order; false (and `out` partly filled)
// when a level is a storage or a lazy stack. `non_tensor` is set when the
// tree holds a non-tensor entry.
bool memory_leaves(const TensorDictBase& td, const NestedKey& path, Leaves& out,
                   bool* non_tensor = nullptr) {
  const Node& n = td.node();
  if (!n.is_memory_node()) return false;
  for (const auto& k : n.keys()) {
    const Value& v = *n.peek(k);
    if (v.is_tensor()) {
      out.keys.push_back(path.empty() ? NestedKey(k) : path.child(k));
      out.tensors.push_back(v.tensor());
    } else if (v.is_tensordict()) {
      if (!memory_leaves(v.tensordict(), path.empty() ? NestedKey(k) : path.child(k), out,
                         non_tensor))
        return false;
    } else if (non_tensor) {
      *non_tensor = true;
    }
  }
  return true;
}

// The fast path of the in-place operations: when `a` and `b` are in-memory
// trees of the same layout (the same keys in the same order at every level,
// tensors facing tensors, nested levels facing nested levels), their tensor
// leaves in order, into `la` and `lb` (either may be null), without building
// a single key. False on any difference (the general path then checks and
// names what differs). `non_tensor` is set when a non-tensor entry was
// skipped.
bool same_layout_leaves(const Node& a, const Node& b, std::vector<at::Tensor>* la,
                        std::vector<at::Tensor>* lb, bool* non_tensor = nullptr) {
  if (!a.is_memory_node() || !b.is_memory_node()) return false;
  const auto& ma = static_cast<const detail::MemoryNode&>(a);
  const auto& mb = static_cast<const detail::MemoryNode&>(b);
  const auto& ea = ma.entries();
  const auto& eb = mb.entries();
  if (ea.size() != eb.size()) return false;
  const bool same_keys = &ma == &mb || ma.shares_keys_with(mb);
  for (std::size_t i = 0; i < ea.size(); ++i) {
    if (!same_keys && ea[i].first != eb[i].first) return false;
    const Value& va = ea[i].second;
    const Value& vb = eb[i].second;
    if (va.is_tensor()) {
      if (!vb.is_tensor()) return false;
      if (la) la->push_back(va.tensor());
      if (lb) lb->push_back(vb.tensor());
    } else if (va.is_tensordict()) {
      if (!vb.is_tensordict() ||
          !same_layout_leaves(va.tensordict().node(), vb.tensordict().node(), la, lb, non_tensor))
        return false;
    } else if (vb.is_tensor() || vb.is_tensordict()) {
      return false;
    } else if (non_tensor) {
      *non_tensor = true;
    }
  }
  return true;
}

// No leaf of `leaves` is expanded (several elements sharing memory).
bool all_writable(const std::vector<at::Tensor>& leaves) {
  return std::none_of(leaves.begin(), leaves.end(), [](const at::Tensor& t) {
    return at::has_internal_overlap(t) == at::MemOverlap::Yes;
  });
}

// The leaves of `other` under `keys`, in that order. The common case (both
// tensordicts in memory with the same layout) costs one walk and no lookups;
// otherwise the key sets must match (KeyError) and each leaf is looked up.
std::vector<at::Tensor> operand_leaves(const TensorDictBase& a, const std::vector<NestedKey>& keys,
                                       const TensorDictBase& other, const char* op) {
  Leaves theirs;
  if (memory_leaves(other, NestedKey(), theirs) && theirs.keys == keys)
    return std::move(theirs.tensors);
  check_same_keys(a, other, op);
  std::vector<at::Tensor> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(other_leaf(other, k, op));
  return out;
}

// Whether one fused LibTorch call (at::_foreach_*) may replace the per-leaf
// loop: every operand has its leaf's shape, dtype and device (the fused
// kernels do not broadcast or promote), the leaves are floating point when
// `floating_only` (an integer leaf refuses a float result: the per-leaf loop
// names it), and autograd is not involved (an in-place write into a leaf that
// requires grad is refused: the per-leaf loop names the key).
bool fusable(const std::vector<at::Tensor>& leaves,
             std::initializer_list<const std::vector<at::Tensor>*> operands, bool floating_only) {
  if (leaves.empty()) return false;  // LibTorch's foreach refuses an empty list
  const bool grad = c10::GradMode::is_enabled();
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const at::Tensor& t = leaves[i];
    if (floating_only && !t.is_floating_point() && !t.is_complex()) return false;
    if (grad && t.requires_grad()) return false;
    for (const auto* list : operands) {
      const at::Tensor& o = (*list)[i];
      if (o.scalar_type() != t.scalar_type() || o.device() != t.device() ||
          !o.sizes().equals(t.sizes()) || (grad && o.requires_grad()))
        return false;
    }
  }
  return true;
}

// Runs a fused call; a LibTorch failure is rethrown typed.
template <class Fn>
void run_fused(const char* op, Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    throw ShapeError(std::string(op) +
                     ": in-place operation failed: " + e.what_without_backtrace());
  }
}

// The per-leaf loop: op(leaf, i) on every leaf, a LibTorch failure rethrown
// naming the key.
void per_leaf(Leaves& leaves, const std::function<void(at::Tensor&, std::size_t)>& op) {
  for (std::size_t i = 0; i < leaves.tensors.size(); ++i) {
    at::Tensor& t = leaves.tensors[i];
    try {
      op(t, i);
    } catch (const c10::Error& e) {
      // errors.h: a LibTorch failure on a leaf is rethrown naming the key
      // (e.g. an int64 leaf cannot hold the result of div_), like map_leaves.
      throw ShapeError("in-place operation failed on entry " + leaves.keys[i].repr() +
                       " of shape " + format_shape(t.sizes()) + " and dtype " +
                       detail::dtype_name(t.scalar_type()) + ": " + e.what_without_backtrace());
    }
  }
}

void inplace(TensorDictBase& a, const std::function<void(at::Tensor&, const NestedKey&)>& op) {
  Leaves leaves = collect_leaves(a);
  check_writable(a, leaves);
  per_leaf(leaves, [&](at::Tensor& t, std::size_t i) { op(t, leaves.keys[i]); });
}

// An in-place operation of `a` with tensordict operands (`other`, and for
// lerp_ a weight): a lazy stack is written member by member with the
// operands cut to match; otherwise the operands' leaves are gathered (key
// sets checked), every leaf is checked, and then either `fused` runs once
// over all of them or `op` runs leaf by leaf.
using LeafOperands = std::vector<std::vector<at::Tensor>>;
TensorDictBase& inplace_with(
    TensorDictBase& a, const std::vector<const TensorDictBase*>& operands, const char* name,
    bool floating_only,
    const std::function<void(std::vector<at::Tensor>&, const LeafOperands&)>& fused,
    const std::function<void(at::Tensor&, const LeafOperands&, std::size_t)>& op) {
  if (detail::lazy_dispatch(
          a, detail::update_members_with, operands, name,
          [&](TensorDictBase& m, const std::vector<const TensorDictBase*>& parts) {
            inplace_with(m, parts, name, floating_only, fused, op);
          }))
    return a;
  if (fused) {
    // Same layouts in memory: the keys match by construction; anything the
    // fast path cannot take (an expanded leaf, an integer leaf, autograd)
    // goes the general way below, which names the leaf.
    std::vector<at::Tensor> mine;
    LeafOperands others(operands.size());
    bool same = true;
    for (std::size_t j = 0; same && j < operands.size(); ++j)
      same =
          same_layout_leaves(a.node(), operands[j]->node(), j == 0 ? &mine : nullptr, &others[j]);
    bool fuse = same && all_writable(mine);
    for (const auto& list : others) fuse = fuse && fusable(mine, {&list}, floating_only);
    if (fuse) {
      run_fused(name, [&] { fused(mine, others); });
      return a;
    }
  }
  Leaves leaves = collect_leaves(a);
  LeafOperands others;
  others.reserve(operands.size());
  for (const auto* o : operands) others.push_back(operand_leaves(a, leaves.keys, *o, name));
  check_writable(a, leaves);
  bool fuse = static_cast<bool>(fused);
  for (const auto& list : others) fuse = fuse && fusable(leaves.tensors, {&list}, floating_only);
  if (fuse && others.empty()) fuse = fusable(leaves.tensors, {}, floating_only);
  if (fuse) {
    run_fused(name, [&] { fused(leaves.tensors, others); });
    return a;
  }
  per_leaf(leaves, [&](at::Tensor& t, std::size_t i) { op(t, others, i); });
  return a;
}

// A scalar operation on every leaf: fused when the leaves allow it.
TensorDictBase& inplace_scalar(TensorDictBase& a, const char* name, bool floating_only,
                               const std::function<void(std::vector<at::Tensor>&)>& fused,
                               const std::function<void(at::Tensor&)>& op) {
  std::vector<at::Tensor> mine;
  if (same_layout_leaves(a.node(), a.node(), &mine, nullptr) && all_writable(mine) &&
      fusable(mine, {}, floating_only)) {
    run_fused(name, [&] { fused(mine); });
    return a;
  }
  Leaves leaves = collect_leaves(a);
  check_writable(a, leaves);
  if (fusable(leaves.tensors, {}, floating_only)) {
    run_fused(name, [&] { fused(leaves.tensors); });
    return a;
  }
  per_leaf(leaves, [&](at::Tensor& t, std::size_t) { op(t); });
  return a;
}

}  // namespace

// ---- apply -------------------------------------------------------------------

TensorDictBase TensorDictBase::apply(const LeafFn& fn,
                                     std::optional<std::vector<int64_t>> batch_size) const {
  if (!batch_size) {
    if (auto lazy = detail::lazy_dispatch(
            *this, detail::map_members,
            [&](const TensorDictBase& m, std::size_t) { return m.apply(fn); }))
      return std::move(*lazy);
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
  if (auto lazy = detail::lazy_dispatch(
          *this, detail::map_members_with, other, "apply",
          [&](const TensorDictBase& m, const TensorDictBase& part) { return m.apply(fn, part); }))
    return std::move(*lazy);
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
  if (auto lazy = detail::lazy_dispatch(
          *this, detail::map_members,
          [&](const TensorDictBase& m, std::size_t) { return m.named_apply(fn, options); }))
    return std::move(*lazy);
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

// `fused_call` is the at::_foreach_ form over `l` (the leaves) and `o` (the
// operands' leaves) or `v` (the scalar).
#define TD_BINARY_INPLACE(name, fused_list, fused_scalar)                                       \
  TensorDictBase& TensorDictBase::name(const TensorDictBase& other) {                           \
    return inplace_with(                                                                        \
        *this, {&other}, #name, true,                                                           \
        [](std::vector<at::Tensor>& l, const LeafOperands& o) { fused_list; },                  \
        [](at::Tensor& t, const LeafOperands& o, std::size_t i) { t.name(o[0][i]); });          \
  }                                                                                             \
  TensorDictBase& TensorDictBase::name(const at::Tensor& other) {                               \
    if (detail::lazy_dispatch(*this, detail::update_members_with_tensor, other,                 \
                              [](TensorDictBase& m, const at::Tensor& part) { m.name(part); })) \
      return *this;                                                                             \
    inplace(*this,                                                                              \
            [&](at::Tensor& t, const NestedKey&) { t.name(batch_operand(other, *this, t)); });  \
    return *this;                                                                               \
  }                                                                                             \
  TensorDictBase& TensorDictBase::name(const at::Scalar& v) {                                   \
    return inplace_scalar(                                                                      \
        *this, #name, true, [&](std::vector<at::Tensor>& l) { fused_scalar; },                  \
        [&](at::Tensor& t) { t.name(v); });                                                     \
  }
TD_BINARY_INPLACE(add_, at::_foreach_add_(l, o[0]), at::_foreach_add_(l, v))
TD_BINARY_INPLACE(sub_, at::_foreach_sub_(l, o[0]), at::_foreach_sub_(l, v))
TD_BINARY_INPLACE(mul_, at::_foreach_mul_(l, o[0]), at::_foreach_mul_(l, v))
TD_BINARY_INPLACE(div_, at::_foreach_div_(l, o[0]), at::_foreach_div_(l, v))
#undef TD_BINARY_INPLACE

TensorDictBase& TensorDictBase::add_(const TensorDictBase& other, const at::Scalar& alpha) {
  return inplace_with(
      *this, {&other}, "add_", true,
      [&](std::vector<at::Tensor>& l, const LeafOperands& o) { at::_foreach_add_(l, o[0], alpha); },
      [&](at::Tensor& t, const LeafOperands& o, std::size_t i) { t.add_(o[0][i], alpha); });
}

TensorDictBase& TensorDictBase::sub_(const TensorDictBase& other, const at::Scalar& alpha) {
  return inplace_with(
      *this, {&other}, "sub_", true,
      [&](std::vector<at::Tensor>& l, const LeafOperands& o) { at::_foreach_sub_(l, o[0], alpha); },
      [&](at::Tensor& t, const LeafOperands& o, std::size_t i) { t.sub_(o[0][i], alpha); });
}

TensorDictBase& TensorDictBase::lerp_(const TensorDictBase& end, const at::Scalar& weight) {
#if TENSORDICT_HAVE_FOREACH_LERP
  auto fused = [&](std::vector<at::Tensor>& l, const LeafOperands& o) {
    at::_foreach_lerp_(l, o[0], weight);
  };
#else
  std::nullptr_t fused = nullptr;
#endif
  return inplace_with(
      *this, {&end}, "lerp_", true, fused,
      [&](at::Tensor& t, const LeafOperands& o, std::size_t i) { t.lerp_(o[0][i], weight); });
}

TensorDictBase& TensorDictBase::lerp_(const TensorDictBase& end, const TensorDictBase& weight) {
#if TENSORDICT_HAVE_FOREACH_LERP
  auto fused = [](std::vector<at::Tensor>& l, const LeafOperands& o) {
    at::_foreach_lerp_(l, o[0], o[1]);
  };
#else
  std::nullptr_t fused = nullptr;
#endif
  return inplace_with(
      *this, {&end, &weight}, "lerp_", true, fused,
      [](at::Tensor& t, const LeafOperands& o, std::size_t i) { t.lerp_(o[0][i], o[1][i]); });
}

TensorDictBase& TensorDictBase::lerp_(const TensorDictBase& end, const at::Tensor& weight) {
  if (detail::lazy_dispatch(*this, detail::lazy_lerp_, end, weight)) return *this;
  // The weight broadcast over the batch dims, as every tensor operand here,
  // in each leaf's dtype (torch's lerp_ wants the same dtype; one weight may
  // serve float and double leaves): one weight per leaf, so no fused call.
  return inplace_with(*this, {&end}, "lerp_", true, nullptr,
                      [&](at::Tensor& t, const LeafOperands& o, std::size_t i) {
                        t.lerp_(o[0][i], batch_operand(weight, *this, t).to(t.scalar_type()));
                      });
}

TensorDictBase& TensorDictBase::copy_(const TensorDictBase& other) {
#if TENSORDICT_HAVE_FOREACH_COPY
  // Both in memory, `other` without a non-tensor to update, and the same
  // tensor leaves (paired by layout without building keys, or else by key):
  // one fused copy. Anything else is update_'s job.
  std::vector<at::Tensor> mine, theirs;
  bool non_tensor = false;
  bool paired =
      same_layout_leaves(node(), other.node(), &mine, &theirs, &non_tensor) && !non_tensor;
  if (!paired) {
    Leaves here, there;
    non_tensor = false;
    paired = memory_leaves(*this, NestedKey(), here) &&
             memory_leaves(other, NestedKey(), there, &non_tensor) && !non_tensor &&
             here.keys == there.keys;
    mine = std::move(here.tensors);
    theirs = std::move(there.tensors);
  }
  if (paired && all_writable(mine)) {
    const bool grad = c10::GradMode::is_enabled();
    bool fuse = !mine.empty();
    for (std::size_t i = 0; fuse && i < mine.size(); ++i) {
      const at::Tensor& t = mine[i];
      const at::Tensor& o = theirs[i];
      fuse = o.scalar_type() == t.scalar_type() && o.device() == t.device() &&
             o.sizes().equals(t.sizes()) && !(grad && t.requires_grad());
    }
    if (fuse) {
      run_fused("copy_", [&] { at::_foreach_copy_(mine, theirs); });
      return *this;
    }
  }
#endif
  return update_(other);
}

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
      *this, std::move(dims), keepdim,
      [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.sum(d, k); }, "sum");
}
TensorDict TensorDictBase::mean(std::optional<std::vector<int64_t>> dims, bool keepdim) const {
  return reduce(
      *this, std::move(dims), keepdim,
      [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.mean(d, k); }, "mean");
}
TensorDict TensorDictBase::amax(std::optional<std::vector<int64_t>> dims, bool keepdim) const {
  return reduce(
      *this, std::move(dims), keepdim,
      [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.amax(d, k); }, "amax");
}
TensorDict TensorDictBase::amin(std::optional<std::vector<int64_t>> dims, bool keepdim) const {
  return reduce(
      *this, std::move(dims), keepdim,
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
  return inplace_scalar(
      *this, "zero_", false, [](std::vector<at::Tensor>& l) { at::_foreach_zero_(l); },
      [](at::Tensor& t) { t.zero_(); });
}

TensorDictBase& TensorDictBase::fill_(const at::Scalar& value) {
  inplace(*this, [&](at::Tensor& t, const NestedKey&) { t.fill_(value); });
  return *this;
}

TensorDictBase& TensorDictBase::fill_(const NestedKey& key, const at::Scalar& value) {
  if (detail::lazy_dispatch(*this, detail::lazy_fill_key_, *this, key, value)) return *this;
  at::Tensor t = get(key);
  t.fill_(value);
  return *this;
}

TensorDictBase TensorDictBase::to(at::Device device, bool non_blocking) const {
  if (node().device() == device) return *this;
  if (auto lazy = detail::lazy_dispatch(
          *this, detail::map_members,
          [&](const TensorDictBase& m, std::size_t) { return m.to(device, non_blocking); })) {
    detail::propagate_lock(*this, *lazy);
    return std::move(*lazy);
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
