// LazyStackedTensorDict: storage over live members, and the member-wise
// versions of the core operations (indexing, index assignment, shape ops,
// arithmetic) that the core dispatches to (lazy_ops.h).
#include "storage/lazy_stack/lazy_ops.h"

#include "core/internal.h"

#include <tensordict/lazy_stack.h>
#include <tensordict/stack.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <set>

namespace tensordict {

using detail::format_shape;

namespace detail {

namespace {

NestedKey key_of(std::string_view k) { return NestedKey(std::string(k)); }

std::vector<int64_t> without_dim(at::IntArrayRef shape, int64_t d) {
  std::vector<int64_t> out(shape.begin(), shape.end());
  if (d >= 0 && d < static_cast<int64_t>(out.size())) out.erase(out.begin() + d);
  return out;
}

std::vector<int64_t> with_dim(at::IntArrayRef shape, int64_t d, int64_t size) {
  std::vector<int64_t> out(shape.begin(), shape.end());
  out.insert(out.begin() + std::min<int64_t>(d, static_cast<int64_t>(out.size())), size);
  return out;
}

// Sizes that agree across shapes, -1 where they differ. Shapes must have the
// same number of dims (nullopt otherwise).
std::optional<std::vector<int64_t>> common_shape(const std::vector<std::vector<int64_t>>& shapes) {
  if (shapes.empty()) return std::vector<int64_t>{};
  std::vector<int64_t> out = shapes[0];
  for (const auto& s : shapes) {
    if (s.size() != out.size()) return std::nullopt;
    for (std::size_t i = 0; i < s.size(); ++i)
      if (s[i] != out[i]) out[i] = -1;
  }
  return out;
}

std::string shapes_list(const std::vector<at::Tensor>& leaves) {
  std::string out;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (i) out += ", ";
    out += format_shape(leaves[i].sizes());
  }
  return out;
}

void check_member_unlocked(const TensorDictBase& m, std::size_t i, std::string_view key,
                           const char* op) {
  if (m.is_locked())
    throw LockedError(std::string("Cannot modify locked TensorDict: ") + op + " of " +
                      key_of(key).repr() + " would write into member " + std::to_string(i) +
                      " of the lazy stack, which is locked");
}

}  // namespace

LazyStackNode::LazyStackNode(std::vector<TensorDictBase> members, int64_t stack_dim,
                             std::vector<int64_t> member_batch)
    : members_(std::move(members)), stack_dim_(stack_dim), member_batch_(std::move(member_batch)) {
  is_lazy_stack_ = true;
  refresh_batch();
}

void LazyStackNode::refresh_batch() {
  if (!members_.empty()) {
    // Compared in place: this runs for every lazy result (index, nested get).
    auto first = members_[0].batch_size();
    member_batch_.assign(first.begin(), first.end());
    for (std::size_t i = 1; i < members_.size(); ++i) {
      auto b = members_[i].batch_size();
      if (b.size() != member_batch_.size())
        throw ShapeError("lazy_stack: the members have different numbers of batch dims");
      for (std::size_t d = 0; d < b.size(); ++d)
        if (b[d] != member_batch_[d]) member_batch_[d] = -1;
    }
  }
  batch_ = with_dim(member_batch_, stack_dim_, static_cast<int64_t>(members_.size()));
}

void LazyStackNode::insert_member(std::size_t pos, TensorDictBase td) {
  members_.insert(members_.begin() + static_cast<std::ptrdiff_t>(pos), std::move(td));
  refresh_batch();
}

void LazyStackNode::set_batch_size(std::vector<int64_t>) {
  throw ShapeError(
      "Modifying the batch size of a lazy representation of a tensordict is not "
      "permitted. Consider instantiating the tensordict first by calling "
      "`td = td.to_tensordict()` before resetting the batch size.");
}

std::optional<at::Device> LazyStackNode::device() const {
  return members_.empty() ? std::nullopt : members_[0].device();
}

void LazyStackNode::set_device(std::optional<at::Device> device) {
  for (auto& m : members_) m.node().set_device(device);
}

std::vector<std::string> LazyStackNode::keys() const {
  if (members_.empty()) return {};
  auto first = members_[0].node().keys();
  std::set<std::string> common(first.begin(), first.end());
  for (std::size_t i = 1; i < members_.size() && !common.empty(); ++i) {
    auto ki = members_[i].node().keys();
    std::set<std::string> si(ki.begin(), ki.end());
    for (auto it = common.begin(); it != common.end();)
      it = si.count(*it) ? std::next(it) : common.erase(it);
  }
  // Python's rule: the keys of a lazy stack are sorted.
  return {common.begin(), common.end()};
}

namespace {
bool is_non_tensor_kind(EntryKind k) {
  return k == EntryKind::NonTensor || k == EntryKind::NonTensorStack;
}
}  // namespace

std::optional<EntryKind> LazyStackNode::kind(std::string_view key) const {
  if (members_.empty()) return std::nullopt;
  std::optional<EntryKind> out;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto k = members_[i].node().kind(key);
    if (!k) return std::nullopt;
    if (out && *k != *out && !(is_non_tensor_kind(*k) && is_non_tensor_kind(*out)))
      throw TypeError("lazy stack: entry " + key_of(key).repr() + " is a " + to_string(*out) +
                      " in member 0 and a " + to_string(*k) + " in member " + std::to_string(i));
    if (!out || *k == EntryKind::NonTensorStack) out = k;
  }
  // Non-tensors: one NonTensorData when every member holds the same value,
  // a NonTensorStack otherwise (what find() returns).
  if (out == EntryKind::NonTensor) {
    auto first = members_[0].node().find(key);
    for (std::size_t i = 1; i < members_.size(); ++i)
      if (members_[i].node().find(key)->non_tensor().data() != first->non_tensor().data())
        return EntryKind::NonTensorStack;
  }
  return out;
}

std::optional<TensorMeta> LazyStackNode::tensor_meta(std::string_view key) const {
  if (kind(key) != EntryKind::Tensor) return std::nullopt;
  std::vector<std::vector<int64_t>> shapes;
  TensorMeta out;
  for (const auto& m : members_) {
    auto meta = m.node().tensor_meta(key);
    out.dtype = meta->dtype;
    out.device = meta->device;
    shapes.push_back(std::move(meta->shape));
  }
  auto common = common_shape(shapes);
  if (!common) common = std::vector<int64_t>(shapes[0].size(), -1);
  out.shape = with_dim(*common, stack_dim_, static_cast<int64_t>(members_.size()));
  return out;
}

std::vector<at::Tensor> LazyStackNode::member_leaves(std::string_view key) const {
  std::vector<at::Tensor> leaves;
  leaves.reserve(members_.size());
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const Node& n = members_[i].node();
    const Value* v = n.holds_values() ? n.peek(key) : nullptr;
    std::optional<Value> held;
    if (!v) {
      held = n.find(key);
      if (!held)
        throw KeyError("key " + key_of(key).repr() + " not found in member " + std::to_string(i) +
                       " of the lazy stack");
      v = &*held;
    }
    if (!v->is_tensor())
      throw TypeError("lazy stack: entry " + key_of(key).repr() + " of member " +
                      std::to_string(i) + " is a " + to_string(v->kind()) + ", not a Tensor");
    leaves.push_back(v->tensor());
  }
  return leaves;
}

at::Tensor LazyStackNode::stack_leaves(std::string_view key,
                                       const std::vector<at::Tensor>& leaves) const {
  for (const auto& l : leaves)
    if (!l.sizes().equals(leaves[0].sizes()))
      throw ShapeError("Failed to stack tensors within a tensordict: the entry " +
                       key_of(key).repr() + " has shapes " + shapes_list(leaves) +
                       " in the members of the lazy stack. Read it with "
                       "get_as_list() or get_padded(), or index a member.");
  return at::stack(leaves, stack_dim_);
}

std::optional<Value> LazyStackNode::find(std::string_view key) const {
  if (members_.empty()) return std::nullopt;
  const Node& n0 = members_[0].node();
  auto k0 = n0.kind(key);
  if (k0 == EntryKind::Tensor) {
    // One pass over the members: each leaf is looked up once.
    std::vector<at::Tensor> leaves;
    leaves.reserve(members_.size());
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const Node& n = members_[i].node();
      if (n.holds_values()) {
        const Value* v = n.peek(key);
        if (!v) return std::nullopt;           // an exclusive key is not a key of the stack
        if (!v->is_tensor()) (void)kind(key);  // throws the kind mismatch
        leaves.push_back(std::get<0>(v->variant()));
      } else {
        auto v = n.find(key);
        if (!v) return std::nullopt;
        if (!v->is_tensor()) (void)kind(key);
        leaves.push_back(std::move(*v).tensor());
      }
    }
    return Value(stack_leaves(key, leaves));
  }
  auto k = kind(key);
  if (!k) return std::nullopt;
  switch (*k) {
    case EntryKind::Tensor:
      break;  // handled above: kind() agrees with member 0 or throws
    case EntryKind::TensorDict: {
      std::vector<TensorDictBase> subs;
      subs.reserve(members_.size());
      for (const auto& m : members_) subs.push_back(m.node().find(key)->tensordict());
      auto b = subs.empty() ? std::vector<int64_t>{} : subs[0].batch_size().vec();
      auto node = std::make_shared<LazyStackNode>(std::move(subs), stack_dim_, b);
      if (locked()) node->set_locked_flag(true);
      return Value(TensorDictBase(std::move(node)));
    }
    case EntryKind::NonTensor:
      // The same value in every member (kind() checked): one NonTensorData
      // (its batch shows -1 where the members' batch sizes differ).
      return Value(
          NonTensorData(members_[0].node().find(key)->non_tensor().data(), batch_, device()));
    case EntryKind::NonTensorStack: {
      // One value per element, stacked along the stack dim (Python's
      // NonTensorStack). ShapeError naming the key for ragged members.
      std::vector<Value> held;
      held.reserve(members_.size());
      for (const auto& m : members_) held.push_back(*m.node().find(key));
      std::vector<const Value*> items;
      items.reserve(held.size());
      for (const auto& v : held) items.push_back(&v);
      return stack_non_tensors(items, stack_dim_, "lazy stack", key_of(key),
                               /*collapse_equal=*/false);
    }
  }
  return std::nullopt;
}

void LazyStackNode::write(std::string_view key, Value value) {
  for (std::size_t i = 0; i < members_.size(); ++i)
    check_member_unlocked(members_[i], i, key, "set");
  const NestedKey k = key_of(key);
  switch (value.kind()) {
    case EntryKind::Tensor: {
      auto parts = value.tensor().unbind(stack_dim_);
      for (std::size_t i = 0; i < members_.size(); ++i) members_[i].set(k, parts[i]);
      break;
    }
    case EntryKind::TensorDict: {
      auto parts = split_for_members(*this, value.tensordict(), "set");
      for (std::size_t i = 0; i < members_.size(); ++i) members_[i].set(k, parts[i]);
      break;
    }
    case EntryKind::NonTensor:
      for (auto& m : members_)
        m.set(k, NonTensorData(value.non_tensor().data(), m.batch_size().vec(), m.device()));
      break;
    case EntryKind::NonTensorStack: {
      // Member i receives the values of its slice of the stack dim.
      auto parts = unbind_non_tensor(value, stack_dim_, k);
      if (parts.size() != members_.size())
        throw ShapeError("set: the NonTensorStack for " + k.repr() + " has batch size " +
                         format_shape(value.non_tensor_stack().batch_size()) +
                         ", which does not match the lazy stack of batch size " +
                         format_shape(batch_) + " along its stack dim " +
                         std::to_string(stack_dim_));
      for (std::size_t i = 0; i < members_.size(); ++i) members_[i].set(k, parts[i]);
      break;
    }
  }
}

void LazyStackNode::write_(std::string_view key, const at::Tensor& value) {
  auto parts = value.unbind(stack_dim_);
  const NestedKey k = key_of(key);
  for (std::size_t i = 0; i < members_.size(); ++i) members_[i].set_(k, parts[i]);
}

void LazyStackNode::write_at_(std::string_view key, const RowSelection& rows,
                              const at::Tensor& value) {
  // The value arrives expanded to the indexed batch plus the leaf's feature
  // dims: wrap it as a tensordict and let the members take their rows.
  auto meta = tensor_meta(key);
  const int64_t features = static_cast<int64_t>(meta->shape.size() - batch_.size());
  auto vb = value.sizes().slice(0, static_cast<std::size_t>(value.dim() - features));
  TensorDict one(vb);
  one.set(key_of(key), value);
  lazy_index_put(*this, rows.items(), one, /*existing_only=*/true);
}

void LazyStackNode::create_leaf(std::string_view key, at::IntArrayRef shape,
                                const at::TensorOptions& options) {
  for (std::size_t i = 0; i < members_.size(); ++i)
    check_member_unlocked(members_[i], i, key, "create");
  auto member_shape = without_dim(shape, stack_dim_);
  for (auto& m : members_) {
    // Ragged batch dims (-1): each member gets its own batch size.
    auto s = member_shape;
    auto mb = m.batch_size();
    for (std::size_t d = 0; d < mb.size() && d < s.size(); ++d) s[d] = mb[d];
    m.node().create_leaf(key, s, options);
  }
}

TensorDictBase LazyStackNode::create_nested(std::string_view key, at::IntArrayRef,
                                            std::optional<at::Device>) {
  for (std::size_t i = 0; i < members_.size(); ++i)
    check_member_unlocked(members_[i], i, key, "create");
  std::vector<TensorDictBase> subs;
  for (auto& m : members_) subs.push_back(m.create_nested(key_of(key)));
  return TensorDictBase(
      std::make_shared<LazyStackNode>(std::move(subs), stack_dim_, member_batch_));
}

void LazyStackNode::remove(std::string_view key) {
  for (std::size_t i = 0; i < members_.size(); ++i)
    check_member_unlocked(members_[i], i, key, "del");
  for (auto& m : members_) m.del_(key_of(key));
}

void LazyStackNode::flush() {
  for (auto& m : members_) m.node().flush();
}

// ---- member-wise helpers ------------------------------------------------------

TensorDictBase make_lazy(std::vector<TensorDictBase> members, int64_t stack_dim,
                         std::vector<int64_t> member_batch_if_empty) {
  return TensorDictBase(std::make_shared<LazyStackNode>(std::move(members), stack_dim,
                                                        std::move(member_batch_if_empty)));
}

TensorDictBase map_members(const LazyStackNode& ls, const MemberMap& fn) {
  std::vector<TensorDictBase> out;
  out.reserve(ls.members().size());
  for (std::size_t i = 0; i < ls.members().size(); ++i) out.push_back(fn(ls.members()[i], i));
  return make_lazy(std::move(out), ls.stack_dim(), ls.member_batch());
}

std::vector<TensorDictBase> split_for_members(const LazyStackNode& ls, const TensorDictBase& other,
                                              const char* op) {
  const std::size_t n = ls.members().size();
  if (const auto* o = as_lazy_stack(other);
      o && o->stack_dim() == ls.stack_dim() && o->members().size() == n)
    return o->members();
  if (other.batch_dims() <= ls.stack_dim() ||
      other.batch_size()[ls.stack_dim()] != static_cast<int64_t>(n))
    throw ShapeError(
        std::string(op) + ": a tensordict of batch size " + format_shape(other.batch_size()) +
        " does not match the lazy stack of batch size " + format_shape(ls.batch_size()) +
        " along its stack dim " + std::to_string(ls.stack_dim()));
  return other.unbind(ls.stack_dim());
}

at::Tensor operand_for_member(const LazyStackNode& ls, const at::Tensor& t, std::size_t i) {
  // Broadcast right-aligned to the batch (-1 keeps ragged dims as they are),
  // then take the member's slice of the stack dim.
  const auto b = ls.batch_size();
  if (t.dim() > static_cast<int64_t>(b.size()))
    throw ShapeError("a tensor operand of shape " + format_shape(t.sizes()) +
                     " has more dims than the batch size " + format_shape(b));
  std::vector<int64_t> shape(b.size() - static_cast<std::size_t>(t.dim()), 1);
  shape.insert(shape.end(), t.sizes().begin(), t.sizes().end());
  at::Tensor v = t.reshape(shape);
  const int64_t s = ls.stack_dim();
  return v.size(s) == 1 ? v.select(s, 0) : v.select(s, static_cast<int64_t>(i));
}

// ---- indexing -----------------------------------------------------------------

namespace {

using at::indexing::TensorIndex;

// An index laid out against the batch dims of a lazy stack.
struct LazyPlan {
  enum Mode { Member, Members, Dense } mode = Dense;
  std::size_t member = 0;         // Mode::Member
  std::vector<int64_t> selected;  // Mode::Members: member ids, in order
  int64_t out_dim = 0;            // Mode::Members: stack dim of the result
  std::vector<TensorIndex> sub;   // the index each member gets
};

int64_t dims_consumed(const TensorIndex& i) {
  if (i.is_none() || i.is_ellipsis() || i.is_boolean()) return 0;
  if (i.is_tensor()) {
    const auto& t = i.tensor();
    return t.scalar_type() == at::kBool ? std::max<int64_t>(t.dim(), 1) : 1;
  }
  return 1;  // int or slice
}

template <class T>
int64_t as_int(const T& v) {
  if constexpr (std::is_integral_v<T>)
    return v;
  else
    return v.expect_int();  // c10::SymInt in LibTorch 2.x
}

LazyPlan plan_index(const LazyStackNode& ls, IndexList index) {
  const int64_t B = static_cast<int64_t>(ls.batch_size().size());
  const int64_t s = ls.stack_dim();
  const int64_t N = static_cast<int64_t>(ls.members().size());
  // Expand the Ellipsis into full slices.
  int64_t used = 0;
  bool has_ellipsis = false;
  for (const auto& i : index) {
    used += dims_consumed(i);
    if (i.is_ellipsis()) {
      if (has_ellipsis) throw IndexError("an index can only have a single ellipsis");
      has_ellipsis = true;
    }
  }
  if (used > B)
    throw IndexError("too many indices for a lazy stack of batch size " +
                     format_shape(ls.batch_size()));
  std::vector<TensorIndex> full;
  for (const auto& i : index) {
    if (i.is_ellipsis()) {
      for (int64_t k = 0; k < B - used; ++k) full.emplace_back(at::indexing::Slice());
    } else {
      full.push_back(i);
    }
  }
  if (!has_ellipsis)
    for (int64_t k = used; k < B; ++k) full.emplace_back(at::indexing::Slice());

  // Locate the item on the stack dim.
  int64_t dim = 0;
  std::size_t at_s = full.size();
  for (std::size_t j = 0; j < full.size(); ++j) {
    int64_t c = dims_consumed(full[j]);
    if (c > 0 && dim <= s && s < dim + c) {
      at_s = j;
      break;
    }
    dim += c;
  }
  LazyPlan plan;
  const TensorIndex& it = full[at_s];
  bool tensor_elsewhere = false;
  bool tensors_adjacent = true;
  int64_t adv_ndim = 0;
  std::ptrdiff_t last_tensor = -1;
  for (std::size_t j = 0; j < full.size(); ++j) {
    if (full[j].is_integer()) continue;  // applied as select, like LibTorch
    if (full[j].is_tensor()) {
      if (j != at_s) tensor_elsewhere = true;
      const auto& t = full[j].tensor();
      adv_ndim = std::max<int64_t>(adv_ndim, t.scalar_type() == at::kBool ? 1 : t.dim());
      if (last_tensor >= 0) {
        for (std::size_t q = static_cast<std::size_t>(last_tensor) + 1; q < j; ++q)
          if (!full[q].is_integer()) tensors_adjacent = false;
      }
      last_tensor = static_cast<std::ptrdiff_t>(j);
    }
  }
  for (std::size_t j = 0; j < full.size(); ++j)
    if (j != at_s) plan.sub.push_back(full[j]);

  // Output dims produced by the non-int, non-tensor items before position j.
  auto basic_dims_before = [&](std::size_t j) {
    int64_t n = 0;
    for (std::size_t q = 0; q < j; ++q)
      if (!full[q].is_integer() && !full[q].is_tensor()) ++n;
    return n;
  };

  if (it.is_integer()) {
    int64_t k = as_int(it.integer());
    if (k < -N || k >= N)
      throw IndexError("index " + std::to_string(k) + " is out of range for the " +
                       std::to_string(N) + " members of the lazy stack");
    plan.mode = LazyPlan::Member;
    plan.member = static_cast<std::size_t>(k < 0 ? k + N : k);
    return plan;
  }
  if (it.is_slice()) {
    const auto& sl = it.slice();
    int64_t step = as_int(sl.step());
    if (step <= 0) throw IndexError("slice step must be positive");
    int64_t start = as_int(sl.start()), stop = as_int(sl.stop());
    if (start < 0) start = std::max<int64_t>(start + N, 0);
    if (stop < 0) stop = std::max<int64_t>(stop + N, 0);
    start = std::min(start, N);
    stop = std::min(stop, N);
    for (int64_t k = start; k < stop; k += step) plan.selected.push_back(k);
    plan.mode = LazyPlan::Members;
    if (!tensor_elsewhere) {
      plan.out_dim = basic_dims_before(at_s);
    } else if (tensors_adjacent) {
      // The advanced block keeps its place: count it when it comes first.
      plan.out_dim =
          basic_dims_before(at_s) +
          (last_tensor >= 0 && static_cast<std::size_t>(last_tensor) < at_s ? adv_ndim : 0);
    } else {
      plan.out_dim = adv_ndim + basic_dims_before(at_s);
    }
    return plan;
  }
  if (it.is_tensor() && !tensor_elsewhere) {
    at::Tensor t = it.tensor();
    if (t.scalar_type() == at::kBool && t.dim() == 1) {
      if (t.size(0) != N)
        throw IndexError("a mask of " + std::to_string(t.size(0)) + " elements cannot index the " +
                         std::to_string(N) + " members of the lazy stack");
      t = t.nonzero().squeeze(1);
    }
    if (t.scalar_type() != at::kBool && t.dim() <= 1) {
      at::Tensor ids = t.to(at::kCPU, at::kLong);
      if (ids.dim() == 0) {
        plan.mode = LazyPlan::Member;
        int64_t k = ids.item<int64_t>();
        if (k < -N || k >= N)
          throw IndexError("index " + std::to_string(k) + " is out of range for the " +
                           std::to_string(N) + " members of the lazy stack");
        plan.member = static_cast<std::size_t>(k < 0 ? k + N : k);
        return plan;
      }
      auto acc = ids.accessor<int64_t, 1>();
      for (int64_t q = 0; q < ids.size(0); ++q) {
        int64_t k = acc[q];
        if (k < -N || k >= N)
          throw IndexError("index " + std::to_string(k) + " is out of range for the " +
                           std::to_string(N) + " members of the lazy stack");
        plan.selected.push_back(k < 0 ? k + N : k);
      }
      plan.mode = LazyPlan::Members;
      plan.out_dim = basic_dims_before(at_s);
      return plan;
    }
  }
  plan.mode = LazyPlan::Dense;
  return plan;
}

[[noreturn]] void throw_unsplittable() {
  throw IndexError(
      "index_put_ on a lazy stack: an index that mixes the stack dim with other dims "
      "(a mask over several dims, or index tensors on several dims) cannot be split "
      "between the members; index the members (td[i]) or densify with "
      "to_tensordict()");
}

std::vector<int64_t> member_batch_after(const LazyStackNode& ls,
                                        const std::vector<TensorIndex>& sub) {
  // The batch of a member after `sub`, computed on a dummy tensor.
  auto mb = ls.member_batch();
  for (auto& d : mb) d = std::max<int64_t>(d, 1);
  if (sub.empty()) return mb;  // Tensor::index refuses an empty index list
  return at::empty(mb, at::TensorOptions().device(at::kMeta)).index(sub).sizes().vec();
}

}  // namespace

TensorDictBase lazy_index(const LazyStackNode& ls, const TensorDictBase& self, IndexList index) {
  // stack[i] with the stack dim first: the member, without planning.
  if (index.size() == 1 && index[0].is_integer() && ls.stack_dim() == 0) {
    const auto n = static_cast<int64_t>(ls.members().size());
    int64_t k = as_int(index[0].integer());
    if (k >= -n && k < n) return ls.members()[static_cast<std::size_t>(k < 0 ? k + n : k)];
  }
  LazyPlan plan = plan_index(ls, index);
  switch (plan.mode) {
    case LazyPlan::Member:
      return plan.sub.empty() ? ls.members()[plan.member]
                              : ls.members()[plan.member].index(plan.sub);
    case LazyPlan::Members: {
      if (plan.selected.empty() && !ls.members().empty()) {
        // No member selected (an empty slice, long index or mask): as in
        // Python, a dense TensorDict of size 0 along the stack dim that keeps
        // the keys; member 0 gives the feature shapes, and no data is copied.
        const TensorDictBase& first = ls.members()[0];
        TensorDictBase one = plan.sub.empty() ? first : first.index(plan.sub);
        return one.unsqueeze(plan.out_dim).narrow(plan.out_dim, 0, 0).to_tensordict();
      }
      std::vector<TensorDictBase> out;
      out.reserve(plan.selected.size());
      for (auto k : plan.selected) {
        const auto& m = ls.members()[static_cast<std::size_t>(k)];
        out.push_back(plan.sub.empty() ? m : m.index(plan.sub));
      }
      auto mb = out.empty() ? member_batch_after(ls, plan.sub) : std::vector<int64_t>{};
      return make_lazy(std::move(out), plan.out_dim, std::move(mb));
    }
    case LazyPlan::Dense:
      break;
  }
  // Indices that mix the stack dim with other dims (a mask over several dims,
  // several index tensors): densify. Ragged leaves refuse with a clear error.
  return self.to_tensordict().index(index);
}

void lazy_index_put(const LazyStackNode& ls, IndexList index, const TensorDictBase& value_in,
                    bool existing_only, bool check_only) {
  LazyPlan plan = plan_index(ls, index);
  static const std::vector<TensorIndex> all{at::indexing::Ellipsis};
  IndexList idx = plan.sub.empty() ? IndexList(all) : IndexList(plan.sub);
  auto check = [&](const TensorDictBase& m, const TensorDictBase& v) {
    check_index_put(m, idx, v, /*allow_create=*/!existing_only);
  };
  auto put = [&](const TensorDictBase& m, const TensorDictBase& v) {
    TensorDictBase target = m;
    if (existing_only)
      target.update_at_(v, idx);
    else
      target.index_put_(idx, v);
  };
  switch (plan.mode) {
    case LazyPlan::Member: {
      if (check_only)
        check(ls.members()[plan.member], value_in);
      else
        put(ls.members()[plan.member], value_in);
      return;
    }
    case LazyPlan::Members: {
      const auto n = static_cast<int64_t>(plan.selected.size());
      std::vector<int64_t> out_batch = member_batch_after(ls, plan.sub);
      out_batch.insert(out_batch.begin() + plan.out_dim, n);
      const int64_t out_ndim = static_cast<int64_t>(out_batch.size());
      // Broadcast the value to the indexed batch first, as a dense
      // index_put_ would (its batch aligns with the right end).
      TensorDictBase value = value_in;
      auto vb = value.batch_size();
      bool ragged = std::any_of(ls.member_batch().begin(), ls.member_batch().end(),
                                [](int64_t d) { return d < 0; });
      if (!ragged && !vb.empty() && !vb.equals(out_batch) && at::is_expandable_to(vb, out_batch))
        value = value.expand(out_batch);
      const int64_t vd = value.batch_dims();
      const int64_t p = plan.out_dim - (out_ndim - vd);  // the value's dim for the stack
      std::vector<TensorDictBase> parts;
      if (p >= 0 && value.batch_size()[p] == n && n != 1) {
        parts = value.unbind(p);
      } else if (p >= 0 && value.batch_size()[p] == 1) {
        parts.assign(static_cast<std::size_t>(n), value.squeeze(p));
      } else if (p < 0) {
        parts.assign(static_cast<std::size_t>(n), value);
      } else if (n == 1 && value.batch_size()[p] == 1) {
        parts.assign(1, value.squeeze(p));
      } else {
        throw ShapeError("index_put_: a value of batch size " + format_shape(value.batch_size()) +
                         " cannot be written into " + std::to_string(n) +
                         " members of the lazy stack");
      }
      // Check every member first, so a refused write changes nothing.
      for (auto k : plan.selected)
        if (ls.members()[static_cast<std::size_t>(k)].is_locked() && !existing_only)
          for (const auto& key : value.keys(true, true))
            if (!ls.members()[static_cast<std::size_t>(k)].contains(key))
              throw LockedError("Cannot modify locked TensorDict: index_put_ would add " +
                                key.repr() + " to member " + std::to_string(k) +
                                " of the lazy stack, which is locked");
      // Each member's part checked before any is written: a part that fits
      // member 0 but not member k (ragged leaves) is refused with nothing
      // changed, as the dense path's checking walk does.
      for (std::size_t j = 0; j < plan.selected.size(); ++j)
        check(ls.members()[static_cast<std::size_t>(plan.selected[j])], parts[j]);
      if (check_only) return;
      for (std::size_t j = 0; j < plan.selected.size(); ++j)
        put(ls.members()[static_cast<std::size_t>(plan.selected[j])], parts[j]);
      return;
    }
    case LazyPlan::Dense:
      break;
  }
  throw_unsplittable();
}

void lazy_update_at_(const LazyStackNode& ls, const TensorDictBase& other, IndexList index,
                     const std::vector<NestedKey>& keys_to_update) {
  lazy_index_put(ls, index, keys_to_update.empty() ? other : other.select(keys_to_update),
                 /*existing_only=*/true);
}

void lazy_index_put_tensor(const LazyStackNode& ls, IndexList index, const at::Tensor& value) {
  // A tensor value is broadcast to every leaf: turn it into a tensordict of
  // those leaves (views, no copies) and split that.
  LazyPlan plan = plan_index(ls, index);
  if (plan.mode == LazyPlan::Member) {
    TensorDictBase m = ls.members()[plan.member];
    if (plan.sub.empty())
      m.index_put_({at::indexing::Ellipsis}, value);
    else
      m.index_put_(plan.sub, value);
    return;
  }
  if (plan.mode == LazyPlan::Dense) throw_unsplittable();
  if (value.numel() == 1) {
    // A scalar fits every leaf of every member, ragged or not.
    for (auto k : plan.selected) {
      TensorDictBase m = ls.members()[static_cast<std::size_t>(k)];
      if (plan.sub.empty())
        m.index_put_({at::indexing::Ellipsis}, value.reshape({}));
      else
        m.index_put_(plan.sub, value.reshape({}));
    }
    return;
  }
  // The value is broadcast, as LibTorch's index_put_ would, to every leaf of
  // [*indexed batch, *that leaf's feature dims] of each selected member (its
  // own shapes: members may differ), and member j takes its row along the
  // stack dim. Views only, from metadata; every member's part is built and
  // checked before any member is written.
  static const std::vector<TensorIndex> all{at::indexing::Ellipsis};
  const IndexList idx = plan.sub.empty() ? IndexList(all) : IndexList(plan.sub);
  const auto n = static_cast<int64_t>(plan.selected.size());
  std::vector<std::pair<TensorDictBase, TensorDict>> parts;
  parts.reserve(plan.selected.size());
  for (int64_t j = 0; j < n; ++j) {
    const TensorDictBase& m = ls.members()[static_cast<std::size_t>(plan.selected[j])];
    std::vector<int64_t> row_batch =
        plan.sub.empty() ? m.batch_size().vec()
                         : at::empty(m.batch_size(), at::TensorOptions().device(at::kMeta))
                               .index(plan.sub)
                               .sizes()
                               .vec();
    TensorDict part(row_batch);
    std::vector<int64_t> out_batch = row_batch;
    out_batch.insert(out_batch.begin() + plan.out_dim, n);
    for (const auto& k : m.keys(true, true)) {
      const auto item = m.get_item_shape(k);
      std::vector<int64_t> shape = out_batch;
      shape.insert(shape.end(), item.begin() + static_cast<std::ptrdiff_t>(m.batch_dims()),
                   item.end());
      if (!at::is_expandable_to(value.sizes(), shape))
        throw ShapeError("index_put_: cannot write a tensor of shape " +
                         format_shape(value.sizes()) + " into " + k.repr() + " of member " +
                         std::to_string(plan.selected[j]) +
                         " of the lazy stack at an index of shape " + format_shape(shape));
      part.set(k, value.expand(shape).select(plan.out_dim, j));
    }
    check_index_put(m, idx, part, /*allow_create=*/false);
    parts.emplace_back(m, std::move(part));
  }
  for (auto& [m, part] : parts) {
    TensorDictBase target = m;
    target.update_at_(part, idx);
  }
}

// ---- member-wise operations the core dispatches to (lazy_ops.h) ----------------

namespace {

// fn applied to every member.
template <class Fn>
std::vector<TensorDictBase> members_op(const LazyStackNode& ls, Fn&& fn) {
  std::vector<TensorDictBase> out;
  out.reserve(ls.members().size());
  for (const auto& m : ls.members()) out.push_back(fn(m));
  return out;
}

}  // namespace

TensorDictBase map_members_with(const LazyStackNode& ls, const TensorDictBase& other,
                                const char* op, const MemberMapWith& fn) {
  auto parts = split_for_members(ls, other, op);
  return map_members(ls, [&](const TensorDictBase& m, std::size_t i) { return fn(m, parts[i]); });
}

TensorDictBase map_members_with_tensor(const LazyStackNode& ls, const at::Tensor& t,
                                       const MemberMapWithTensor& fn) {
  return map_members(ls, [&](const TensorDictBase& m, std::size_t i) {
    return fn(m, operand_for_member(ls, t, i));
  });
}

void update_members_with(const LazyStackNode& ls,
                         const std::vector<const TensorDictBase*>& operands, const char* op,
                         const MemberUpdateWith& fn) {
  std::vector<std::vector<TensorDictBase>> parts;
  parts.reserve(operands.size());
  for (const auto* o : operands) parts.push_back(split_for_members(ls, *o, op));
  std::vector<const TensorDictBase*> member_parts(parts.size());
  for (std::size_t i = 0; i < ls.members().size(); ++i) {
    TensorDictBase m = ls.members()[i];
    for (std::size_t p = 0; p < parts.size(); ++p) member_parts[p] = &parts[p][i];
    fn(m, member_parts);
  }
}

void update_members_with_tensor(const LazyStackNode& ls, const at::Tensor& t,
                                const MemberUpdateWithTensor& fn) {
  for (std::size_t i = 0; i < ls.members().size(); ++i) {
    TensorDictBase m = ls.members()[i];
    fn(m, operand_for_member(ls, t, i));
  }
}

void lazy_lerp_(const LazyStackNode& ls, const TensorDictBase& end, const at::Tensor& weight) {
  auto parts = split_for_members(ls, end, "lerp_");
  for (std::size_t i = 0; i < parts.size(); ++i) {
    TensorDictBase m = ls.members()[i];
    m.lerp_(parts[i], operand_for_member(ls, weight, i));
  }
}

void lazy_masked_fill_(const LazyStackNode& ls, const at::Tensor& mask, const at::Scalar& value) {
  for (std::size_t i = 0; i < ls.members().size(); ++i) {
    TensorDictBase m = ls.members()[i];
    m.masked_fill_(mask.select(ls.stack_dim(), static_cast<int64_t>(i)), value);
  }
}

void lazy_fill_key_(const LazyStackNode& ls, const TensorDictBase& self, const NestedKey& key,
                    const at::Scalar& value) {
  if (!self.contains(key)) (void)self.at(key);  // KeyError naming the key
  for (auto m : ls.members()) m.fill_(key, value);
}

void lazy_select_(const LazyStackNode& ls, const std::vector<NestedKey>& keys, bool strict) {
  for (const auto& m : ls.members()) (void)m.select(keys, strict);  // check all first
  for (auto m : ls.members()) m.select_(keys, strict);
}

std::string lazy_non_tensor_repr(const LazyStackNode& ls, const std::string& key) {
  // Members of different batch sizes cannot be stacked into one
  // NonTensorStack (find() refuses), but repr must not throw: then each
  // member's values are listed.
  try {
    return ls.find(key)->non_tensor_stack().repr();
  } catch (const ShapeError&) {
  }
  nlohmann::json values = nlohmann::json::array();
  for (const auto& m : ls.members()) {
    Value v = m.at(key);
    values.push_back(v.is_non_tensor() ? v.non_tensor().tolist() : v.non_tensor_stack().tolist());
  }
  return non_tensor_stack_repr(values, ls.batch_size(), ls.device());
}

TensorDictBase lazy_squeeze(const LazyStackNode& ls, int64_t d) {
  const int64_t s = ls.stack_dim();
  if (d == s) return ls.members()[0];  // the only member
  return make_lazy(
      members_op(ls, [&](const TensorDictBase& m) { return m.squeeze(d < s ? d : d - 1); }),
      d < s ? s - 1 : s, {});
}

TensorDictBase lazy_squeeze_all(const LazyStackNode& ls, const TensorDictBase& self) {
  const auto b = ls.batch_size();
  TensorDictBase out = self;
  for (int64_t d = static_cast<int64_t>(b.size()) - 1; d >= 0; --d)
    if (b[d] == 1) out = out.squeeze(d);
  return out;
}

TensorDictBase lazy_unsqueeze(const LazyStackNode& ls, int64_t d) {
  const int64_t s = ls.stack_dim();
  return make_lazy(
      members_op(ls, [&](const TensorDictBase& m) { return m.unsqueeze(d <= s ? d : d - 1); }),
      d <= s ? s + 1 : s, {});
}

TensorDictBase lazy_permute(const LazyStackNode& ls, const std::vector<int64_t>& perm) {
  // The stack dim moves to where perm puts it; members permute the rest.
  const int64_t s = ls.stack_dim();
  int64_t new_s = 0;
  std::vector<int64_t> member_perm;
  for (std::size_t p = 0; p < perm.size(); ++p) {
    if (perm[p] == s)
      new_s = static_cast<int64_t>(p);
    else
      member_perm.push_back(perm[p] < s ? perm[p] : perm[p] - 1);
  }
  return make_lazy(members_op(ls, [&](const TensorDictBase& m) { return m.permute(member_perm); }),
                   new_s, {});
}

TensorDictBase lazy_transpose(const LazyStackNode& ls, int64_t a, int64_t c) {
  std::vector<int64_t> perm(ls.batch_size().size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[a], perm[c]);
  return lazy_permute(ls, perm);
}

}  // namespace detail

// ---- the handle --------------------------------------------------------------

namespace {

std::shared_ptr<Node> make_stack_node(std::vector<TensorDictBase> tds, int64_t stack_dim,
                                      bool strict_shape) {
  if (tds.empty()) throw ValueError("lazy_stack: expected at least one tensordict to stack");
  const int64_t B = tds[0].batch_dims();
  for (std::size_t i = 0; i < tds.size(); ++i) {
    if (!tds[i].defined())
      throw ValueError("lazy_stack: tensordict " + std::to_string(i) + " is a null handle");
    if (tds[i].batch_dims() != B)
      throw ShapeError(
          "lazy_stack: the tensordicts must have the same number of batch "
          "dims: tensordict 0 has batch size " +
          format_shape(tds[0].batch_size()) + " and tensordict " + std::to_string(i) + " has " +
          format_shape(tds[i].batch_size()));
    if (strict_shape && !tds[i].batch_size().equals(tds[0].batch_size()))
      throw ShapeError(
          "lazy_stack: batch sizes in tensordicts differs: " + format_shape(tds[0].batch_size()) +
          " and " + format_shape(tds[i].batch_size()) + " (strict_shape)");
    if (tds[i].device() != tds[0].device())
      throw DeviceError("lazy_stack: devices differ: tensordict 0 is on " +
                        (tds[0].device() ? tds[0].device()->str() : std::string("None")) +
                        " and tensordict " + std::to_string(i) + " on " +
                        (tds[i].device() ? tds[i].device()->str() : std::string("None")));
  }
  int64_t d = detail::wrap_dim(stack_dim, B + 1, "lazy_stack");
  auto mb = tds[0].batch_size().vec();
  bool all_locked = true;
  for (const auto& t : tds) all_locked = all_locked && t.is_locked();
  auto node = std::make_shared<detail::LazyStackNode>(std::move(tds), d, std::move(mb));
  // Python: a stack of locked members is locked.
  if (all_locked) node->set_locked_flag(true);
  return node;
}

detail::LazyStackNode& lazy_node(const TensorDictBase& td) {
  return static_cast<detail::LazyStackNode&>(td.node());
}

}  // namespace

LazyStackedTensorDict::LazyStackedTensorDict(std::vector<TensorDictBase> tds, int64_t stack_dim,
                                             bool strict_shape)
    : TensorDictBase(make_stack_node(std::move(tds), stack_dim, strict_shape)) {}

LazyStackedTensorDict::LazyStackedTensorDict(std::shared_ptr<Node> node)
    : TensorDictBase(std::move(node)) {
  if (!defined() || !is_node(this->node()))
    throw TypeError("LazyStackedTensorDict: the storage is not a lazy stack");
}

const std::vector<TensorDictBase>& LazyStackedTensorDict::tensordicts() const {
  return lazy_node(*this).members();
}

int64_t LazyStackedTensorDict::stack_dim() const { return lazy_node(*this).stack_dim(); }

LazyStackedTensorDict& LazyStackedTensorDict::insert(int64_t index, const TensorDictBase& td) {
  auto& n = lazy_node(*this);
  if (is_locked())
    throw LockedError("Cannot modify locked TensorDict: insert into a locked lazy stack");
  const auto N = static_cast<int64_t>(n.members().size());
  // Python's list.insert: negative positions count from the end (-1 is
  // before the last member) and positions out of range are clamped.
  if (index < 0) index = std::max<int64_t>(index + N, 0);
  index = std::min(index, N);
  const auto& mb = n.member_batch();
  bool ok = td.defined() && td.batch_size().size() == mb.size();
  for (std::size_t d = 0; ok && d < mb.size(); ++d) ok = mb[d] < 0 || td.batch_size()[d] == mb[d];
  if (!ok)
    throw ShapeError("insert: the tensordict of batch size " +
                     (td.defined() ? format_shape(td.batch_size()) : std::string("(null)")) +
                     " does not match the members' batch size " + format_shape(mb));
  if (N > 0 && td.device() != n.device())
    throw DeviceError("insert: the tensordict is on another device than the members");
  n.insert_member(static_cast<std::size_t>(index), td);
  return *this;
}

LazyStackedTensorDict& LazyStackedTensorDict::append(const TensorDictBase& td) {
  return insert(static_cast<int64_t>(num_members()), td);
}

TensorDictBase LazyStackedTensorDict::member(std::size_t i) const {
  const auto& ms = tensordicts();
  if (i >= ms.size())
    throw IndexError("member " + std::to_string(i) + " is out of range for a lazy stack of " +
                     std::to_string(ms.size()) + " members");
  return ms[i];
}

LazyStackedTensorDict& LazyStackedTensorDict::extend(const std::vector<TensorDictBase>& tds) {
  for (const auto& t : tds) append(t);
  return *this;
}

std::vector<at::Tensor> LazyStackedTensorDict::get_as_list(const NestedKey& key) const {
  // A member that is itself a lazy stack gives its stacked tensor.
  std::vector<at::Tensor> out;
  out.reserve(num_members());
  for (const auto& m : tensordicts()) out.push_back(m.get(key));
  return out;
}

at::Tensor LazyStackedTensorDict::get_padded(const NestedKey& key, double padding_value,
                                             PaddingSide side) const {
  auto leaves = get_as_list(key);
  if (leaves.empty()) throw ValueError("get_padded: the lazy stack has no members");
  std::vector<int64_t> max_shape = leaves[0].sizes().vec();
  for (const auto& l : leaves) {
    if (l.dim() != static_cast<int64_t>(max_shape.size()))
      throw ShapeError("get_padded: the entry " + key.repr() +
                       " has a different number of dims in different members");
    for (int64_t d = 0; d < l.dim(); ++d) max_shape[d] = std::max(max_shape[d], l.size(d));
  }
  std::vector<at::Tensor> padded;
  for (const auto& l : leaves) {
    // constant_pad_nd takes (before, after) pairs from the last dim backwards.
    std::vector<int64_t> pad;
    for (int64_t d = l.dim() - 1; d >= 0; --d) {
      int64_t extra = max_shape[d] - l.size(d);
      pad.push_back(side == PaddingSide::Left ? extra : 0);
      pad.push_back(side == PaddingSide::Left ? 0 : extra);
    }
    padded.push_back(at::constant_pad_nd(l, pad, padding_value));
  }
  return at::stack(padded, stack_dim());
}

LazyStackedTensorDict lazy_stack(std::vector<TensorDictBase> tds, int64_t dim, bool strict_shape) {
  return LazyStackedTensorDict(std::move(tds), dim, strict_shape);
}

TensorDictBase maybe_dense_stack(const std::vector<TensorDictBase>& tds, int64_t dim) {
  try {
    return stack(tds, dim);
  } catch (const KeyError&) {
  } catch (const ShapeError&) {
  } catch (const TypeError&) {
  }
  return lazy_stack(tds, dim);
}

}  // namespace tensordict
