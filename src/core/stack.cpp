// Dense stack and cat of tensordicts.
#include "core/internal.h"

#include <tensordict/stack.h>

#include <ATen/ATen.h>

#include <set>

namespace tensordict {

using detail::format_shape;

namespace {

[[noreturn]] void key_mismatch(const char* op, const TensorDictBase& a, const TensorDictBase& b,
                               std::size_t which, const NestedKey& path) {
  auto ka = a.node().keys();
  auto kb = b.node().keys();
  std::set<std::string> sa(ka.begin(), ka.end()), sb(kb.begin(), kb.end());
  std::string only_a, only_b;
  for (const auto& k : sa)
    if (!sb.count(k)) only_a += (only_a.empty() ? "'" : ", '") + k + "'";
  for (const auto& k : sb)
    if (!sa.count(k)) only_b += (only_b.empty() ? "'" : ", '") + k + "'";
  throw KeyError(std::string(op) + ": the sets of keys in the tensordicts to " + op + " differ" +
                 (path.empty() ? std::string() : " under " + path.repr()) + ": tensordict 0 has [" +
                 only_a + "] that tensordict " + std::to_string(which) + " lacks, and it has [" +
                 only_b + "] that tensordict 0 lacks");
}

// The in-memory nodes of `tds` when they all share the first one's key index
// (parts or rows indexed from one tensordict): their entries pair up by
// position, with no key lookups. Empty otherwise.
std::vector<const detail::MemoryNode*> aligned_nodes(const std::vector<TensorDictBase>& tds) {
  std::vector<const detail::MemoryNode*> out;
  if (!tds[0].node().is_memory_node()) return out;
  const auto& first = static_cast<const detail::MemoryNode&>(tds[0].node());
  out.reserve(tds.size());
  for (const auto& t : tds) {
    const Node& n = t.node();
    if (!n.is_memory_node() || !static_cast<const detail::MemoryNode&>(n).shares_keys_with(first))
      return {};
    out.push_back(static_cast<const detail::MemoryNode*>(&n));
  }
  return out;
}

// Entries of `tds` at key k (the pos-th key of each node when `aligned` is
// not empty), checked to be of one kind. Pointers into the inputs (valid
// while they are not mutated); `holders` keeps entries that a storage
// materialized.
std::vector<const Value*> gather_entries(const std::vector<TensorDictBase>& tds,
                                         const std::vector<const detail::MemoryNode*>& aligned,
                                         std::size_t pos, const std::string& k, const char* op,
                                         const NestedKey& path, std::vector<Value>& holders) {
  std::vector<const Value*> out;
  out.reserve(tds.size());
  holders.clear();
  holders.reserve(tds.size());
  for (std::size_t i = 0; i < tds.size(); ++i) {
    const Value* v;
    if (!aligned.empty()) {
      v = &aligned[i]->entries()[pos].second;
    } else {
      const Node& n = tds[i].node();
      v = n.holds_values() ? n.peek(k) : nullptr;
      if (!v) {
        auto f = n.find(k);
        if (!f) key_mismatch(op, tds[0], tds[i], i, path);
        holders.push_back(std::move(*f));
        v = &holders.back();
      }
    }
    // NonTensorData and NonTensorStack entries stack together.
    if (!out.empty() && v->kind() != out.front()->kind() &&
        !(v->is_non_tensor_or_stack() && out.front()->is_non_tensor_or_stack())) {
      NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
      throw TypeError(std::string(op) + ": entry " + key.repr() + " is a " +
                      to_string(out.front()->kind()) + " in tensordict 0 and a " +
                      to_string(v->kind()) + " in tensordict " + std::to_string(i));
    }
    out.push_back(v);
  }
  return out;
}

// What differs between stack and cat: the batch size of the result (and the
// checks of the inputs' batch sizes), how leaves and non-tensors combine.
struct StackOp {
  static constexpr const char* name = "stack";
  static std::vector<int64_t> result_batch(const std::vector<TensorDictBase>& tds, int64_t dim,
                                           const NestedKey& path,
                                           std::optional<at::Device>& device) {
    auto b = tds[0].batch_size();
    for (std::size_t i = 1; i < tds.size(); ++i)
      if (!tds[i].batch_size().equals(b))
        throw ShapeError(
            "stack: stacking tensordicts requires them to have "
            "congruent batch sizes; tensordict 0" +
            (path.empty() ? std::string() : " at " + path.repr()) + " has " + format_shape(b) +
            " and tensordict " + std::to_string(i) + " has " + format_shape(tds[i].batch_size()));
    std::vector<int64_t> target = b.vec();
    target.insert(target.begin() + dim, static_cast<int64_t>(tds.size()));
    device = tds[0].device();
    return target;
  }
  template <class KeyOf>
  static at::Tensor leaves(const std::vector<const Value*>& entries,
                           std::vector<at::Tensor>& leaves, int64_t dim, const KeyOf& key_of) {
    auto shape = entries[0]->tensor().sizes();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& t = std::get<0>(entries[i]->variant());
      if (!t.sizes().equals(shape))
        throw ShapeError(
            "stack: the shapes of the tensors to stack are "
            "incompatible for key " +
            key_of().repr() + ": " + format_shape(shape) + " in tensordict 0 and " +
            format_shape(t.sizes()) + " in tensordict " + std::to_string(i));
      leaves.push_back(t);
    }
    try {
      return at::stack(leaves, dim);
    } catch (const c10::Error& e) {
      throw ShapeError("stack: key " + key_of().repr() + ": " + e.what_without_backtrace());
    }
  }
  static Value non_tensors(const std::vector<const Value*>& entries, int64_t dim,
                           const NestedKey& key) {
    // Equal values stay one NonTensorData; others give a NonTensorStack.
    return detail::stack_non_tensors(entries, dim, "stack", key);
  }
};

struct CatOp {
  static constexpr const char* name = "cat";
  static std::vector<int64_t> result_batch(const std::vector<TensorDictBase>& tds, int64_t dim,
                                           const NestedKey& path,
                                           std::optional<at::Device>& device) {
    auto b = tds[0].batch_size();
    std::vector<int64_t> target = b.vec();
    target[dim] = 0;
    device = tds[0].device();
    for (std::size_t i = 0; i < tds.size(); ++i) {
      auto bi = tds[i].batch_size();
      bool ok = bi.size() == b.size();
      for (std::size_t d = 0; ok && d < b.size(); ++d)
        if (static_cast<int64_t>(d) != dim && bi[d] != b[d]) ok = false;
      if (!ok)
        throw ShapeError("cat: batch sizes must agree except along dim " + std::to_string(dim) +
                         ": tensordict 0" + (path.empty() ? std::string() : " at " + path.repr()) +
                         " has " + format_shape(b) + " and tensordict " + std::to_string(i) +
                         " has " + format_shape(bi));
      if (tds[i].device() != device) device = std::nullopt;
      target[dim] += bi[dim];
    }
    return target;
  }
  template <class KeyOf>
  static at::Tensor leaves(const std::vector<const Value*>& entries,
                           std::vector<at::Tensor>& leaves, int64_t dim, const KeyOf& key_of) {
    for (auto* e : entries) leaves.push_back(std::get<0>(e->variant()));
    try {
      return at::cat(leaves, dim);
    } catch (const c10::Error& e) {
      throw ShapeError(
          "cat: the shapes of the tensors to concatenate are "
          "incompatible for key " +
          key_of().repr() + ": " + e.what_without_backtrace());
    }
  }
  static Value non_tensors(const std::vector<const Value*>& entries, int64_t dim,
                           const NestedKey& key) {
    return detail::cat_non_tensors(entries, dim, key);
  }
};

// stack or cat of tensordicts with the same keys, level by level.
template <class Op>
TensorDict combine_rec(const std::vector<TensorDictBase>& tds, int64_t dim, const NestedKey& path) {
  const auto& first = tds[0];
  std::optional<at::Device> device;
  std::vector<int64_t> target = Op::result_batch(tds, dim, path, device);
  for (std::size_t i = 1; i < tds.size(); ++i)
    if (tds[i].node().size() != first.node().size()) key_mismatch(Op::name, first, tds[i], i, path);
  TensorDict out = detail::make_tensordict(target, device);
  auto& dst = static_cast<detail::MemoryNode&>(out.node());
  const auto keys = first.node().keys();
  dst.reserve(keys.size());
  const auto aligned = aligned_nodes(tds);
  std::vector<at::Tensor> leaves;
  std::vector<Value> holders;
  for (std::size_t pos = 0; pos < keys.size(); ++pos) {
    const std::string& k = keys[pos];
    auto key_of = [&]() { return path.empty() ? NestedKey(k) : path.child(k); };
    auto entries = gather_entries(tds, aligned, pos, k, Op::name, path, holders);
    switch (entries[0]->kind()) {
      case EntryKind::Tensor:
        leaves.clear();
        leaves.reserve(entries.size());
        dst.write(k, Op::leaves(entries, leaves, dim, key_of));
        break;
      case EntryKind::TensorDict: {
        std::vector<TensorDictBase> subs;
        subs.reserve(entries.size());
        for (auto* e : entries) subs.push_back(e->tensordict());
        dst.write(k, combine_rec<Op>(subs, dim, key_of()));
        break;
      }
      case EntryKind::NonTensor:
      case EntryKind::NonTensorStack:
        dst.write(k, Op::non_tensors(entries, dim, key_of()));
        break;
    }
  }
  return out;
}

}  // namespace

TensorDict stack(const std::vector<TensorDictBase>& tds, int64_t dim) {
  if (tds.empty()) throw ValueError("stack: expected a non-empty list of tensordicts");
  const int64_t B = tds[0].batch_dims();
  int64_t d = detail::wrap_dim(dim, B + 1, "stack");
  return combine_rec<StackOp>(tds, d, NestedKey());
}

TensorDict cat(const std::vector<TensorDictBase>& tds, int64_t dim) {
  if (tds.empty()) throw ValueError("cat: expected a non-empty list of tensordicts");
  int64_t d = detail::wrap_dim(dim, tds[0].batch_dims(), "cat");
  return combine_rec<CatOp>(tds, d, NestedKey());
}

}  // namespace tensordict
