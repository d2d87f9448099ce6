#pragma once
// The lazy stack's versions of the core operations that must keep its
// structure (write through to the members, or stay lazy). The core reaches
// them only through detail::lazy_dispatch (src/core/lazy_dispatch.h); the
// table of docs/architecture.md ("The lazy stack") lists which operation goes
// where. Defined in lazy_stack.cpp. Not installed.

#include <tensordict/lazy_stack.h>
#include <tensordict/row_selection.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tensordict::detail {

// ---- building blocks (also used by formats/ and storage/memmap/) -------------

/// A lazy stack over `members` (member_batch is used when there are none).
TensorDictBase make_lazy(std::vector<TensorDictBase> members, int64_t stack_dim,
                         std::vector<int64_t> member_batch_if_empty);

/// `other` cut along the stack dim into one tensordict per member (the
/// members themselves for a lazy stack of the same layout).
std::vector<TensorDictBase> split_for_members(const LazyStackNode& ls, const TensorDictBase& other,
                                              const char* op);

/// A tensor operand broadcast to the batch, as member i sees it.
at::Tensor operand_for_member(const LazyStackNode& ls, const at::Tensor& t, std::size_t i);

// ---- member-wise results: a new lazy stack of the same stack dim -------------

using MemberMap = std::function<TensorDictBase(const TensorDictBase& member, std::size_t i)>;
/// A lazy stack of fn(member_i, i).
TensorDictBase map_members(const LazyStackNode& ls, const MemberMap& fn);

using MemberMapWith =
    std::function<TensorDictBase(const TensorDictBase& member, const TensorDictBase& part)>;
/// A lazy stack of fn(member_i, part_i), `other` cut by split_for_members.
TensorDictBase map_members_with(const LazyStackNode& ls, const TensorDictBase& other,
                                const char* op, const MemberMapWith& fn);

using MemberMapWithTensor =
    std::function<TensorDictBase(const TensorDictBase& member, const at::Tensor& part)>;
/// A lazy stack of fn(member_i, part_i), `t` cut by operand_for_member.
TensorDictBase map_members_with_tensor(const LazyStackNode& ls, const at::Tensor& t,
                                       const MemberMapWithTensor& fn);

// ---- member-wise in-place operations --------------------------------------------

using MemberUpdateWith =
    std::function<void(TensorDictBase& member, const std::vector<const TensorDictBase*>& parts)>;
/// fn(member_i, parts_i) on every member, each operand cut by
/// split_for_members (all operands are cut before any member is written).
void update_members_with(const LazyStackNode& ls,
                         const std::vector<const TensorDictBase*>& operands, const char* op,
                         const MemberUpdateWith& fn);

using MemberUpdateWithTensor = std::function<void(TensorDictBase& member, const at::Tensor& part)>;
/// fn(member_i, part_i) on every member, `t` cut by operand_for_member.
void update_members_with_tensor(const LazyStackNode& ls, const at::Tensor& t,
                                const MemberUpdateWithTensor& fn);

/// lerp_(end, weight) member-wise.
void lazy_lerp_(const LazyStackNode& ls, const TensorDictBase& end, const at::Tensor& weight);
/// masked_fill_(mask, value): each member gets its slice of the batch mask.
void lazy_masked_fill_(const LazyStackNode& ls, const at::Tensor& mask, const at::Scalar& value);
/// fill_(key, value) on the members' leaves (self.get(key) would be a stacked
/// copy). KeyError naming the key when a member lacks it.
void lazy_fill_key_(const LazyStackNode& ls, const TensorDictBase& self, const NestedKey& key,
                    const at::Scalar& value);
/// select_(keys, strict): every member is checked before any is changed.
void lazy_select_(const LazyStackNode& ls, const std::vector<NestedKey>& keys, bool strict);

/// repr of the non-tensor stack at `key` (the members' values listed one by
/// one when their batch sizes differ).
std::string lazy_non_tensor_repr(const LazyStackNode& ls, const std::string& key);

// ---- shape ops (dims already normalized by the core) ----------------------------

/// squeeze(d) with batch_size()[d] == 1.
TensorDictBase lazy_squeeze(const LazyStackNode& ls, int64_t d);
/// squeeze() of every dim of size 1 (self is the stack's handle).
TensorDictBase lazy_squeeze_all(const LazyStackNode& ls, const TensorDictBase& self);
/// unsqueeze(d), d in [0, batch dims].
TensorDictBase lazy_unsqueeze(const LazyStackNode& ls, int64_t d);
/// permute(perm), perm a checked permutation of the batch dims.
TensorDictBase lazy_permute(const LazyStackNode& ls, const std::vector<int64_t>& perm);
/// transpose(a, c), a != c.
TensorDictBase lazy_transpose(const LazyStackNode& ls, int64_t a, int64_t c);

// ---- indexing (indexing.cpp hands over after its zero-dim check) -----------------

/// self.index(index) (self is the stack's handle).
TensorDictBase lazy_index(const LazyStackNode& ls, const TensorDictBase& self, IndexList index);

/// Writes `value` at `index` into the members. existing_only: update_at_
/// semantics (no new keys); otherwise index_put_ (lazy pre-allocation).
/// Every member's part is checked before any member is written, so a refused
/// write (a shape that fits member 0 but not member k of a ragged stack)
/// changes nothing. check_only: only that check.
void lazy_index_put(const LazyStackNode& ls, IndexList index, const TensorDictBase& value,
                    bool existing_only, bool check_only = false);
/// update_at_(other, index, keys_to_update): lazy_index_put with existing_only.
void lazy_update_at_(const LazyStackNode& ls, const TensorDictBase& other, IndexList index,
                     const std::vector<NestedKey>& keys_to_update);
/// index_put_(index, tensor), checked for every member before any is written.
void lazy_index_put_tensor(const LazyStackNode& ls, IndexList index, const at::Tensor& value);

}  // namespace tensordict::detail
