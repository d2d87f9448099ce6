// Collectives: every rank checks the structures with one allreduce, then the
// data moves with the group's broadcast, allreduce, reduce or allgather
// (docs/distributed.md, "Collectives").

#include "distributed/buffers.h"
#include "distributed/channel.h"
#include "distributed/layout.h"
#include "distributed/protocol.h"

#include <tensordict/distributed.h>
#include <tensordict/stack.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace tensordict::detail::distributed {

namespace {

// Strings of every rank (padded to the longest), in rank order.
std::vector<std::string> gather_strings(Channel& ch, const std::string& mine) {
  c10d::ProcessGroup& pg = ch.pg();
  std::vector<at::Tensor> len{at::full({1}, static_cast<int64_t>(mine.size()), at::kLong)};
  c10d::AllreduceOptions max_opts;
  max_opts.reduceOp = c10d::ReduceOp::MAX;
  ch.collective([&] { return pg.allreduce(len, max_opts); });
  const int64_t max_len = len[0].item<int64_t>();
  if (max_len > kMaxJsonBytes)  // a rank that announces more than any sends
    throw FormatError(ch.what() + ": a rank announces " + std::to_string(max_len) +
                      " bytes of JSON, more than the " + std::to_string(kMaxJsonBytes) +
                      " a transfer carries");
  std::vector<std::string> result(pg.getSize());
  if (max_len == 0) return result;
  std::vector<at::Tensor> in{at::zeros({max_len}, at::kByte)};
  std::memcpy(in[0].data_ptr(), mine.data(), mine.size());
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < pg.getSize(); ++r) out[0].push_back(at::empty({max_len}, at::kByte));
  ch.collective([&] { return pg.allgather(out, in); });
  for (int r = 0; r < pg.getSize(); ++r) result[r] = tensor_string(out[0][r]);
  return result;
}

// Every rank checks that all structures (and transfer modes) equal rank
// `root`'s with one allreduce; on a mismatch, the descriptions are gathered so
// that every rank names the first rank and entry that differ. The same
// allreduce tells whether a rank that `receives` in place cannot (an expanded
// leaf): then every rank throws ValueError before any data moves.
void agree(Channel& ch, const Layout& layout, TransferMode mode, int root, bool receives) {
  c10d::ProcessGroup& pg = ch.pg();
  const std::string refused = receives ? unreceivable(ch.what(), layout) : std::string();
  at::Tensor check = at::empty({5}, at::kLong);
  int64_t* c = check.data_ptr<int64_t>();
  c[0] = layout.hash;
  c[1] = -layout.hash;
  c[2] = static_cast<int64_t>(mode);
  c[3] = -static_cast<int64_t>(mode);
  c[4] = refused.empty() ? 0 : pg.getRank() + 1;  // the last rank that refuses, plus one
  std::vector<at::Tensor> v{check};
  c10d::AllreduceOptions max_opts;
  max_opts.reduceOp = c10d::ReduceOp::MAX;
  ch.collective([&] { return pg.allreduce(v, max_opts); });
  if (!refused.empty()) throw ValueError(refused);
  if (c[4] > 0)
    throw ValueError(ch.what() + ": rank " + std::to_string(c[4] - 1) +
                     " cannot receive in place (a leaf of its tensordict is expanded); nothing "
                     "was written");
  const bool same_structure = c[0] == -c[1];
  if (same_structure && c[2] != -c[3])
    throw ValueError(ch.what() + ": the ranks use different TransferOptions::mode values");
  if (same_structure) return;

  const std::string mine = layout.text();
  const std::vector<std::string> descriptions = gather_strings(ch, mine);
  const std::string& reference = descriptions[root];
  for (int r = 0; r < pg.getSize(); ++r) {
    const std::string& theirs = descriptions[r];
    if (theirs == reference) continue;
    if (pg.getRank() == root || theirs != mine)
      throw_mismatch(
          ch.what() + " (rank " + std::to_string(root) + " against rank " + std::to_string(r) + ")",
          reference, "rank " + std::to_string(r), theirs);
    throw_mismatch(ch.what(), mine, "rank " + std::to_string(root), reference);
  }
  throw StructureError(ch.what() + ": the ranks' structures differ", NestedKey());
}

}  // namespace

}  // namespace tensordict::detail::distributed

namespace tensordict {

using namespace detail::distributed;

void broadcast(const TensorDictBase& td, c10d::ProcessGroup& pg, int root,
               const TransferOptions& options) {
  native_wire_only(options, "broadcast");
  if (root < 0 || root >= pg.getSize())
    throw ValueError("broadcast: root rank " + std::to_string(root) + " is not in the group of " +
                     std::to_string(pg.getSize()));
  Channel ch(pg, options, "broadcast from rank " + std::to_string(root));
  const Layout layout = describe(td);
  const TransferMode mode = choose_mode(layout, options);
  const bool is_root = pg.getRank() == root;
  agree(ch, layout, mode, root, !is_root);

  // Non-tensor values: the root's, length first.
  const std::string extra = is_root ? non_tensor_payload(ch.what(), td, layout) : std::string();
  c10d::BroadcastOptions bopts;
  bopts.rootRank = root;
  std::vector<NonTensorValue> non_tensors;  // applied after the data
  if (!layout.non_tensors.empty()) {
    std::vector<at::Tensor> len{at::full({1}, static_cast<int64_t>(extra.size()), at::kLong)};
    ch.collective([&] { return pg.broadcast(len, bopts); });
    const int64_t n = len[0].item<int64_t>();
    if (n < 0 || n > kMaxJsonBytes)
      throw FormatError(ch.what() + ": the root announces " + std::to_string(n) +
                        " bytes of non-tensor values, outside [0, " +
                        std::to_string(kMaxJsonBytes) + "]");
    std::vector<at::Tensor> bytes{is_root ? bytes_tensor(extra) : at::empty({n}, at::kByte)};
    if (bytes[0].numel() > 0) ch.collective([&] { return pg.broadcast(bytes, bopts); });
    if (!is_root) non_tensors = read_non_tensors(ch.what(), td, layout, tensor_string(bytes[0]));
  }
  if (mode == TransferMode::Consolidated) {
    if (layout.flat_bytes > 0) {
      MessageBuffer buffer(layout.flat_bytes, options.reuse_buffers);
      if (is_root) pack_into(layout, buffer.data());
      std::vector<at::Tensor> tensors{buffer.tensor()};
      ch.collective([&] { return pg.broadcast(tensors, bopts); });
      if (!is_root) unpack(layout, static_cast<uint8_t*>(buffer.tensor().data_ptr()), td);
      tensors.clear();
      buffer.done();
    }
  } else {
    TensorDictBase out = td;
    for (const Leaf& leaf : layout.leaves) {
      if (leaf.nbytes == 0) continue;
      const at::Tensor* own =
          detail::find_memory_tensor(td.node_ptr().get(), leaf.key.parts().data(), leaf.key.size());
      const bool in_place = own && own->is_contiguous() && own->device().is_cpu();
      at::Tensor data = in_place ? *own : contiguous_cpu(leaf.tensor);
      std::vector<at::Tensor> t{bytes_of(data)};
      ch.collective([&] { return pg.broadcast(t, bopts); });
      if (!is_root && !in_place) out.set_(leaf.key, data);
    }
  }
  apply_non_tensors(td, non_tensors);
}

namespace {
// all_reduce (root -1: every rank receives) and reduce (only `root` does):
// one flat tensor per dtype, the leaves written back with set_.
void reduce_leaves(const TensorDictBase& td, c10d::ProcessGroup& pg, const c10d::ReduceOp& op,
                   int root, const TransferOptions& options) {
  const std::string name = root < 0 ? "all_reduce" : "reduce";
  native_wire_only(options, name.c_str());
  if (root >= pg.getSize())
    throw ValueError("reduce: destination rank " + std::to_string(root) +
                     " is not in the group of " + std::to_string(pg.getSize()));
  Channel ch(pg, options, root < 0 ? name : name + " to rank " + std::to_string(root));
  const Layout layout = describe(td);
  const bool receives = root < 0 || pg.getRank() == root;
  agree(ch, layout, TransferMode::Auto, std::max(root, 0), receives);
  std::map<at::ScalarType, std::vector<const Leaf*>> groups;
  for (const Leaf& leaf : layout.leaves) {
    if (leaf.dtype == at::kBool)
      throw TypeError(name + ": the leaf " + leaf.key.repr() +
                      " is a bool tensor, which process groups do not reduce; cast it first");
    if (leaf.nbytes > 0) groups[leaf.dtype].push_back(&leaf);
  }
  TensorDictBase out = td;
  for (auto& [dtype, leaves] : groups) {
    std::vector<at::Tensor> flat_parts;
    for (const Leaf* leaf : leaves) flat_parts.push_back(contiguous_cpu(leaf->tensor).view({-1}));
    std::vector<at::Tensor> flat{at::cat(flat_parts)};
    if (root < 0) {
      c10d::AllreduceOptions opts;
      opts.reduceOp = op;
      ch.collective([&] { return pg.allreduce(flat, opts); });
    } else {
      c10d::ReduceOptions opts;
      opts.reduceOp = op;
      opts.rootRank = root;
      ch.collective([&] { return pg.reduce(flat, opts); });
    }
    if (!receives) continue;  // the other ranks' tensordicts stay as they were
    int64_t offset = 0;
    for (const Leaf* leaf : leaves) {
      const int64_t n = leaf->tensor.numel();
      out.set_(leaf->key, flat[0].narrow(0, offset, n).view(leaf->shape));
      offset += n;
    }
  }
}
}  // namespace

void all_reduce(const TensorDictBase& td, c10d::ProcessGroup& pg, const c10d::ReduceOp& op,
                const TransferOptions& options) {
  reduce_leaves(td, pg, op, -1, options);
}

void reduce(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst, const c10d::ReduceOp& op,
            const TransferOptions& options) {
  if (dst < 0)
    throw ValueError("reduce: destination rank " + std::to_string(dst) +
                     " is not in the group of " + std::to_string(pg.getSize()));
  reduce_leaves(td, pg, op, dst, options);
}

void gather_and_stack(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                      const TransferOptions& options) {
  native_wire_only(options, "gather_and_stack");
  const int world = pg.getSize();
  if (dst < 0 || dst >= world)
    throw ValueError("gather_and_stack: destination rank " + std::to_string(dst) +
                     " is not in the group of " + std::to_string(world));
  if (pg.getRank() != dst) {
    send(td, pg, dst, options);
    return;
  }
  if (!td.defined()) throw ValueError("gather_and_stack of a null tensordict handle");
  if (td.batch_dims() == 0 || td.batch_size()[0] != world - 1)
    throw ShapeError("gather_and_stack: the destination tensordict must have world_size - 1 = " +
                     std::to_string(world - 1) +
                     " rows along its first batch dim (one per other "
                     "rank), not batch size " +
                     shape_string(td.batch_size()));
  // Before any message (the senders then fail at their timeout).
  check_receivable("gather_and_stack to rank " + std::to_string(dst), describe(td));
  // Each rank's data is received into a tensordict of one row's structure,
  // then written at its row (index_put_: any storage, in place).
  TensorDict row = td[0].to_tensordict();
  TensorDictBase out = td;
  for (int r = 0, k = 0; r < world; ++r) {
    if (r == dst) continue;
    recv(row, pg, r, options);
    out.index_put_({at::indexing::TensorIndex(k++)}, row);
  }
}

TensorDict all_gather(const TensorDictBase& td, c10d::ProcessGroup& pg,
                      const TransferOptions& options) {
  native_wire_only(options, "all_gather");
  Channel ch(pg, options, "all_gather");
  const Layout layout = describe(td);
  agree(ch, layout, TransferMode::Auto, 0, false);
  const int world = pg.getSize();
  std::vector<std::string> extras;
  if (!layout.non_tensors.empty())
    extras = gather_strings(ch, non_tensor_payload(ch.what(), td, layout));
  std::vector<std::vector<at::Tensor>> buffers(1);
  if (layout.flat_bytes > 0) {
    std::vector<at::Tensor> in{pack(layout)};
    for (int r = 0; r < world; ++r) buffers[0].push_back(at::empty({layout.flat_bytes}, at::kByte));
    ch.collective([&] { return pg.allgather(buffers, in); });
  }
  std::vector<TensorDictBase> members;
  for (int r = 0; r < world; ++r) {
    TensorDict member = td.to_tensordict();
    if (layout.flat_bytes > 0)
      unpack(layout, static_cast<uint8_t*>(buffers[0][r].data_ptr()), member);
    if (!extras.empty())
      apply_non_tensors(member, read_non_tensors(ch.what(), member, layout, extras[r]));
    members.push_back(member);
  }
  return stack(members, 0);
}

}  // namespace tensordict
