// The sharded Redis store: one logical tensordict split along batch dim 0
// into blocks of `block_rows` rows. Block k holds rows [k*B, min(N, (k+1)*B))
// and is a complete store in Python's layout under its own td_id, so its
// keys share their own hash tag (their own slot, placed on the cluster's
// masters in turn) and Python reads it alone. The manifest
// "<prefix>:{<td_id>}:__shards__" lists the blocks (docs/redis.md).
//
// A ShardedNode is a Node whose leaves fan out to the blocks: an operation
// on rows is one Batch holding the commands of every block it touches, which
// the client sends as one pipeline per node, to all nodes at once (and one
// MULTI/EXEC per block with a transaction). Metadata (keys, shapes, dtypes)
// is the first block's, with dim 0 the whole buffer's.

#include "storage/redis/byte_ranges.h"
#include "storage/redis/store.h"

#include <tensordict/non_tensor.h>
#include <tensordict/tensor_dict.h>

namespace tensordict::detail::redis {
namespace {

constexpr int64_t kDefaultMaxBulk = 512LL * 1024 * 1024;  // Redis's default proto-max-bulk-len

// The smallest proto-max-bulk-len of the nodes (512 MB where CONFIG is
// refused, e.g. renamed away or a managed service).
int64_t string_limit(Connection& c) {
  int64_t best = 0;
  for (const auto& r :
       c.call_each_node({"CONFIG", "GET", "proto-max-bulk-len"}, "reading proto-max-bulk-len")) {
    int64_t v = kDefaultMaxBulk;
    const ReplyArray pair = r.is_array() ? r.array("proto-max-bulk-len") : ReplyArray(nullptr, 0);
    if (pair.size() == 2 && pair[1].is_text())
      v = std::atoll(std::string(pair[1].text("proto-max-bulk-len")).c_str());
    if (v > 0) best = best == 0 ? v : std::min(best, v);
  }
  return best > 0 ? best : kDefaultMaxBulk;
}

// A run of consecutive rows of batch dim 0: global start, count, and where
// it goes in the operation's rows.
struct Piece {
  std::size_t block = 0;
  int64_t local = 0;  // first row in the block
  int64_t count = 0;
  int64_t out = 0;  // first row in the selected rows
};

struct Sharded {
  std::shared_ptr<Connection> client;
  storage::Redis options;  // td_id: the manifest's
  std::string base;        // "<prefix>:{<td_id>}:"
  std::vector<int64_t> batch;
  std::optional<at::Device> device;
  int64_t block_rows = 1;
  int64_t limit = 0;  // 0: not read yet
  std::vector<std::shared_ptr<Store>> blocks;
  std::recursive_mutex mu;

  int64_t rows() const { return batch[0]; }
  int64_t first(std::size_t k) const { return static_cast<int64_t>(k) * block_rows; }
  int64_t count(std::size_t k) const {
    return std::max<int64_t>(0, std::min(block_rows, rows() - first(k)));
  }
  std::vector<int64_t> block_batch(std::size_t k) const {
    auto b = batch;
    b[0] = count(k);
    return b;
  }
  Store& head() const { return *blocks.front(); }
  std::string manifest_key() const { return base + "__shards__"; }
  std::string manifest() const {
    nlohmann::ordered_json j;
    j["version"] = 1;
    j["layout"] = "row_blocks";
    j["batch_size"] = batch;
    j["block_rows"] = block_rows;
    std::vector<std::string> ids;
    for (const auto& b : blocks) ids.push_back(b->options.td_id);
    j["blocks"] = ids;
    j["device"] = device ? device->str() : "";
    return j.dump();
  }
  int64_t string_limit_bytes() {
    if (limit == 0) limit = string_limit(*client);
    return limit;
  }
  /// ValueError when a block of `row` bytes per row would pass the limit.
  void check_row(const std::string& path, int64_t row) {
    const int64_t lim = string_limit_bytes();
    if (row > lim)
      throw ValueError("sharded Redis store " + options.td_id + ": one row of '" + path + "' is " +
                       std::to_string(row) + " bytes, more than the server's proto-max-bulk-len (" +
                       std::to_string(lim) +
                       " bytes): it cannot be stored, even one row per block");
    if (row * block_rows > lim)
      throw ValueError("sharded Redis store " + options.td_id + ": a block of " +
                       std::to_string(block_rows) + " rows of '" + path + "' is " +
                       std::to_string(row * block_rows) +
                       " bytes, more than the server's proto-max-bulk-len (" + std::to_string(lim) +
                       " bytes): create the store with block_rows <= " + std::to_string(lim / row));
  }
  /// Splits runs of selected rows (global start, count) at block borders.
  std::vector<Piece> pieces(const ByteRuns& runs) const {
    std::vector<Piece> out;
    int64_t at = 0;
    for (auto [start, n] : runs) {
      while (n > 0) {
        const auto k = static_cast<std::size_t>(start / block_rows);
        const int64_t local = start - first(k);
        const int64_t take = std::min(n, count(k) - local);
        out.push_back(Piece{k, local, take, at});
        start += take;
        n -= take;
        at += take;
      }
    }
    return out;
  }
};

int64_t row_bytes(const LeafInfo& info) {
  int64_t row = static_cast<int64_t>(c10::elementSize(info.dtype));
  for (std::size_t d = 1; d < info.shape.size(); ++d) row *= info.shape[d];
  return row;
}

// The rows of batch dim 0 a selection reads, as runs (first row, count) in
// the order of the result, or nullopt when it is not a selection of dim-0
// rows (then the leaves are read whole and the selection is applied here).
std::optional<ByteRuns> dim0_runs(const RowSelection& rows, int64_t n) {
  const int64_t dims[] = {n};
  return selected_runs(rows, dims, /*item=*/1);
}

// The selection of the dims after dim 0 of a Box, applied to the rows read
// (`t` holds the selected rows of dim 0).
at::Tensor finish_box(at::Tensor t, const RowSelection& rows) {
  const auto ranges = rows.ranges();
  int64_t dim = 0;
  if (ranges[0].drop)
    t = t.select(0, 0);
  else
    dim = 1;
  for (std::size_t j = 1; j < ranges.size(); ++j) {
    const RowRange& r = ranges[j];
    if (r.drop) {
      t = t.select(dim, r.start);
    } else {
      t = t.slice(dim, r.start, std::max(r.start, r.stop), r.step);
      ++dim;
    }
  }
  return t.contiguous();
}

class ShardedNode final : public StoreNode {
 public:
  ShardedNode(std::shared_ptr<Sharded> s, std::string level)
      : s_(std::move(s)), level_(std::move(level)) {}

  std::string type_name() const override { return "ShardedTensorDictStore"; }
  Connection& client() const override { return *s_->client; }
  std::recursive_mutex& mutex() const override { return s_->mu; }
  const std::string& id() const override { return s_->options.td_id; }
  std::string server_key(const std::string& suffix) const override { return s_->base + suffix; }
  std::vector<std::string> block_ids() const override {
    std::vector<std::string> ids;
    for (const auto& b : s_->blocks) ids.push_back(b->options.td_id);
    return ids;
  }
  int64_t block_rows() const override { return s_->block_rows; }

  void clear_all() override {
    std::lock_guard lock(s_->mu);
    s_->head().ensure_loaded();
    Batch b;
    b.add({"DEL", b.own(s_->manifest_key()), b.own(server_key("__tensorclass__"))});
    for (const auto& blk : s_->blocks) {
      std::vector<std::string_view> del{"DEL", b.own(blk->key("__keys__")),
                                        b.own(blk->key("__batch_size__")),
                                        b.own(blk->key("__device__"))};
      for (const auto& [p, info] : s_->head().leaves)
        del.push_back(b.own(blk->data_key(p))), del.push_back(b.own(blk->meta_key(p)));
      b.add(std::move(del));
    }
    s_->client->send(b, "clearing sharded store " + s_->options.td_id);
    for (const auto& blk : s_->blocks) {
      blk->leaves.clear();
      blk->order.clear();
      blk->empty_levels.clear();
    }
  }

  // -- shape and device -------------------------------------------------------
  at::IntArrayRef batch_size() const override {
    std::lock_guard lock(s_->mu);
    if (level_.empty()) return s_->batch;
    auto it = s_->head().level_batch.find(level_);
    return it != s_->head().level_batch.end() ? at::IntArrayRef(it->second)
                                              : at::IntArrayRef(s_->batch);
  }
  void set_batch_size(std::vector<int64_t> batch_size) override {
    std::lock_guard lock(s_->mu);
    if (!level_.empty()) {
      s_->head().level_batch[level_] = std::move(batch_size);
      return;
    }
    if (batch_size.empty() || batch_size[0] != s_->rows())
      throw ShapeError("sharded Redis store " + s_->options.td_id +
                       ": batch dim 0 is fixed at creation (" + std::to_string(s_->rows()) +
                       " rows in blocks), got " + json_list(batch_size));
    s_->batch = std::move(batch_size);
    write_headers("writing the batch size");
  }
  std::optional<at::Device> device() const override { return s_->device; }
  void set_device(std::optional<at::Device> device) override {
    std::lock_guard lock(s_->mu);
    if (device && !device->is_cpu())
      throw DeviceError("sharded Redis store " + s_->options.td_id +
                        ": only the CPU device (or none) is supported, got " + device->str());
    s_->device = device;
    if (level_.empty()) write_headers("writing the device");
  }

  // -- metadata (the first block's) --------------------------------------------
  std::vector<std::string> keys() const override {
    std::lock_guard lock(s_->mu);
    return s_->head().keys_at(level_);
  }
  std::size_t size() const override { return keys().size(); }
  std::optional<EntryKind> kind(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    return s_->head().kind_at(path(key));
  }
  std::optional<TensorMeta> tensor_meta(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    if (kind(key) != EntryKind::Tensor) return std::nullopt;
    TensorMeta m{s_->head().leaves.at(path(key)).shape, s_->head().leaves.at(path(key)).dtype,
                 at::kCPU};
    if (!m.shape.empty()) m.shape[0] = s_->rows();
    return m;
  }

  // -- reads ------------------------------------------------------------------
  std::optional<Value> find(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    auto k = kind(key);
    if (!k) return std::nullopt;
    const std::string p = path(key);
    if (*k == EntryKind::TensorDict)
      return Value(nested_level(std::make_shared<ShardedNode>(s_, p + ".")));
    if (*k == EntryKind::Tensor) {
      LeafRead leaf{this, NestedKey(std::string(key)), {}};
      read_leaves(RowSelection::all(s_->batch), std::span<LeafRead>(&leaf, 1));
      return Value(leaf.out);
    }
    // Non-tensor: one value (the same in every block), or a list per row.
    const LeafInfo info = s_->head().leaves.at(p);
    if (info.encoding == "pickle")
      throw FormatError("sharded Redis store: '" + s_->head().data_key(p) +
                        "' holds a pickled Python object, which C++ cannot read");
    const bool rows = info.encoding == "json_array";
    Batch b;
    for (std::size_t i = 0; i < (rows ? s_->blocks.size() : 1); ++i)
      b.add({"GET", b.own(s_->blocks[i]->data_key(p))});
    auto r = s_->client->send(b, "reading '" + p + "'");
    nlohmann::json all = nlohmann::json::array();
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string where = s_->blocks[i]->data_key(p);
      nlohmann::json v =
          parse_stored_json(r[i].text(where), "sharded Redis store: '" + where + "'");
      if (!rows) return Value(NonTensorData(std::move(v), batch_size().vec(), s_->device));
      if (!v.is_array() || static_cast<int64_t>(v.size()) != s_->count(i))
        throw FormatError("sharded Redis store: '" + where +
                          "' has encoding json_array but is not a JSON list of " +
                          std::to_string(s_->count(i)) + " values (one per row of its block)");
      for (auto& e : v) all.push_back(std::move(e));
    }
    return Value(NonTensorStack(all, batch_size().vec(), s_->device));
  }

  void read_leaves(const RowSelection& rows, std::span<LeafRead> leaves) const override {
    std::lock_guard lock(s_->mu);
    auto mine =
        own(leaves, [&](LeafRead& l) { Node::read_leaves(rows, std::span<LeafRead>(&l, 1)); });
    if (mine.empty()) return;
    auto runs = dim0_runs(rows, s_->rows());
    const bool here = !runs;  // General: read whole, select here
    if (here) runs = dim0_runs(RowSelection::all(s_->batch), s_->rows());
    const std::vector<Piece> pieces = s_->pieces(*runs);
    int64_t selected = 0;
    for (const auto& [start, n] : *runs) selected += n;

    std::vector<std::string> paths;
    std::vector<LeafInfo> infos;
    Batch b;
    CheckedReads reads("sharded Redis store");
    for (auto* l : mine) {
      paths.push_back(static_cast<const ShardedNode*>(l->node)->path(l->key()));
      infos.push_back(tensor_leaf(paths.back()));
      reads.leaf();
      const int64_t row = row_bytes(infos.back());
      if (row == 0) continue;
      // Each block's size first (a block replaced by another process is
      // refused, not read as garbage), then one GETRANGE per piece.
      // One key string per block (the client hashes each distinct one once).
      std::vector<std::size_t> keys(s_->blocks.size(), SIZE_MAX);
      for (const auto& pc : pieces)
        if (keys[pc.block] == SIZE_MAX)
          keys[pc.block] = reads.key(b, b.own(s_->blocks[pc.block]->data_key(paths.back())),
                                     s_->count(pc.block) * row);
      for (const auto& pc : pieces)
        reads.range(b, keys[pc.block], pc.local * row, pc.count * row, pc.out * row);
    }
    auto replies = s_->client->send(b, "reading rows of " + std::to_string(mine.size()) + " leaves",
                                    s_->options.transaction);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const LeafInfo& info = infos[i];
      const auto conflict = [&](const std::string& message) {
        s_->head().load();
        throw_size_mismatch(message, s_->head().same_bytes(paths[i], info));
      };
      std::vector<int64_t> shape = info.shape;
      shape[0] = selected;
      if (auto message = reads.size_mismatch(i, replies)) conflict(*message);
      at::Tensor t = at::empty(shape, at::TensorOptions().dtype(info.dtype));
      if (auto message = reads.copy(i, replies, static_cast<char*>(t.data_ptr())))
        conflict(*message);
      if (here)
        mine[i]->out = rows.apply(t).clone();
      else if (rows.kind() == RowSelection::Kind::Rows)
        mine[i]->out = t.view(rows.selected_shape(info_full(info)));
      else if (rows.kind() == RowSelection::Kind::Box)
        mine[i]->out = finish_box(t, rows);
      else
        mine[i]->out = t;
    }
  }

  // -- writes -----------------------------------------------------------------
  void write_leaves_(const RowSelection& rows, std::span<const LeafWrite> leaves) override {
    std::lock_guard lock(s_->mu);
    auto mine = own(leaves, [&](const LeafWrite& l) {
      Node::write_leaves_(rows, std::span<const LeafWrite>(&l, 1));
    });
    if (mine.empty()) return;
    std::vector<std::string> paths;
    std::vector<LeafInfo> infos;
    std::vector<at::Tensor> values;
    for (const auto* l : mine) {
      paths.push_back(static_cast<const ShardedNode*>(l->node)->path(l->key()));
      infos.push_back(tensor_leaf(paths.back()));
      values.push_back(as_stored(l->value, infos.back().dtype));
    }
    // Rows of dim 0 are written in place; other selections (several batch
    // dims of a Box, General) read the leaves, patch them here and write
    // them back whole (two round trips).
    const bool box_of_dims = rows.kind() == RowSelection::Kind::Box && rows.ranges().size() > 1;
    auto runs = box_of_dims ? std::nullopt : dim0_runs(rows, s_->rows());
    const RowSelection all = RowSelection::all(s_->batch);
    if (!runs) {
      std::vector<LeafRead> reads;
      reads.reserve(mine.size());
      for (const auto* l : mine) reads.push_back(LeafRead{l->node, l->path, {}});
      read_leaves(all, reads);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        rows.put(reads[i].out, values[i]);
        values[i] = reads[i].out.contiguous();
      }
      runs = dim0_runs(all, s_->rows());
    }
    const std::vector<Piece> pieces = s_->pieces(*runs);
    int64_t selected = 0;
    for (const auto& pc : pieces) selected += pc.count;
    Batch b;
    // With a transaction, one CheckedWrite (all leaves or none) per block on
    // a cluster (a script reaches one slot), one for every block otherwise.
    const bool per_block = s_->client->cluster();
    RangeWrites writes(s_->options.transaction, per_block ? s_->blocks.size() : 1);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const int64_t row = row_bytes(infos[i]);
      if (static_cast<int64_t>(values[i].nbytes()) != selected * row)
        throw ShapeError("sharded Redis store: '" + paths[i] + "': the value has " +
                         std::to_string(values[i].nbytes()) + " bytes for " +
                         std::to_string(selected * row) + " selected bytes");
      if (row == 0) continue;
      const char* data = static_cast<const char*>(values[i].data_ptr());
      std::vector<std::vector<const Piece*>> by_block(s_->blocks.size());
      for (const auto& pc : pieces) by_block[pc.block].push_back(&pc);
      for (std::size_t k = 0; k < by_block.size(); ++k) {
        if (by_block[k].empty()) continue;
        writes.key(b, b.own(s_->blocks[k]->data_key(paths[i])), s_->count(k) * row,
                   per_block ? k : 0);
        for (const Piece* pc : by_block[k])
          writes.range(
              b, pc->local * row,
              std::string_view(data + pc->out * row, static_cast<std::size_t>(pc->count * row)));
      }
    }
    writes.finish(b);
    send_checked(*s_->client, b, "writing rows of " + std::to_string(mine.size()) + " leaves", [&] {
      s_->head().load();
      for (std::size_t i = 0; i < mine.size(); ++i)
        if (!s_->head().same_bytes(paths[i], infos[i])) return false;
      return true;
    });
  }

  void create_leaves(std::span<const LeafCreate> leaves) override {
    std::lock_guard lock(s_->mu);
    Batch b;
    std::vector<std::pair<std::string, LeafInfo>> added;
    for (const auto& l : leaves) {
      if (!owns(l.node)) {
        Node::create_leaves(std::span<const LeafCreate>(&l, 1));
        continue;
      }
      const std::string p = static_cast<const ShardedNode*>(l.node)->path(l.key());
      LeafInfo info;
      info.shape = l.shape;
      info.dtype = l.options.dtype().toScalarType();
      s_->check_row(p, row_bytes(info));
      for (std::size_t k = 0; k < s_->blocks.size(); ++k) {
        LeafInfo part = info;
        part.shape[0] = s_->count(k);
        add_allocation(*s_->blocks[k], b, p, part);
        if (k == 0) added.emplace_back(p, part);
      }
    }
    try {
      s_->client->send(b,
                       "allocating " + std::to_string(added.size()) + " leaves in " +
                           std::to_string(s_->blocks.size()) + " blocks",
                       s_->options.transaction);
    } catch (const StorageError&) {
      // Remove the leaves the server did allocate (it does not roll back).
      Batch undo;
      for (const auto& [p, info] : added) {
        for (const auto& blk : s_->blocks) {
          undo.add({"DEL", undo.own(blk->data_key(p)), undo.own(blk->meta_key(p))});
          undo.add({"SREM", undo.own(blk->key("__keys__")), undo.own(p)});
        }
        s_->head().forget(p);
      }
      discard_errors([&] { s_->client->send(undo, "removing leaves not allocated"); });
      throw;
    }
    for (auto& [p, info] : added) s_->head().remember(p, std::move(info));
  }

  void write(std::string_view key, Value value) override {
    std::lock_guard lock(s_->mu);
    Store& head = s_->head();
    head.ensure_loaded();
    const std::string p = path(key);
    Batch b;
    std::vector<std::string> old;
    for (const auto& [lp, info] : head.leaves)
      if (lp == p || lp.compare(0, p.size() + 1, p + ".") == 0) old.push_back(lp);
    for (const auto& blk : s_->blocks)
      for (const auto& lp : old) {
        b.add({"DEL", b.own(blk->data_key(lp)), b.own(blk->meta_key(lp))});
        b.add({"SREM", b.own(blk->key("__keys__")), b.own(lp)});
      }
    std::vector<std::pair<std::string, Value>> flat;
    flatten(p, value, flat);
    std::vector<at::Tensor> keep;
    std::vector<std::vector<std::pair<std::string, LeafInfo>>> added(s_->blocks.size());
    for (const auto& [lp, v] : flat) {
      for (std::size_t k = 0; k < s_->blocks.size(); ++k)
        add_value(*s_->blocks[k], b, lp, block_part(lp, v, k), keep, added[k]);
    }
    // Always MULTI/EXEC (one per block on a cluster): a write the server
    // refuses (out of memory) leaves the old value as it was.
    s_->client->send(b, "writing '" + p + "'", /*transaction=*/true);
    for (const auto& lp : old) head.forget(lp);
    for (auto& [ap, info] : added[0]) head.remember(ap, std::move(info));
    if (value.is_tensordict()) head.level_batch[p + "."] = value.tensordict().batch_size().vec();
  }

  TensorDictBase create_nested(std::string_view key, at::IntArrayRef batch_size,
                               std::optional<at::Device> device) override {
    std::lock_guard lock(s_->mu);
    const std::string level = path(key) + ".";
    s_->head().empty_levels.insert(level);
    s_->head().level_batch[level] = batch_size.vec();
    (void)device;
    return TensorDictBase(std::make_shared<ShardedNode>(s_, level));
  }

  void remove(std::string_view key) override {
    std::lock_guard lock(s_->mu);
    Store& head = s_->head();
    const std::string p = path(key);
    std::vector<std::string> gone;
    for (const auto& [lp, info] : head.leaves)
      if (lp == p || lp.compare(0, p.size() + 1, p + ".") == 0) gone.push_back(lp);
    Batch b;
    for (const auto& blk : s_->blocks)
      for (const auto& lp : gone) {
        b.add({"DEL", b.own(blk->data_key(lp)), b.own(blk->meta_key(lp))});
        b.add({"SREM", b.own(blk->key("__keys__")), b.own(lp)});
      }
    s_->client->send(b, "removing '" + p + "'", s_->options.transaction);
    for (const auto& lp : gone) head.forget(lp);
    for (auto it = head.empty_levels.begin(); it != head.empty_levels.end();)
      it = it->compare(0, p.size() + 1, p + ".") == 0 ? head.empty_levels.erase(it) : std::next(it);
  }

 private:
  std::string path(std::string_view key) const { return level_ + std::string(key); }
  bool owns(const Node* n) const override {
    auto* r = dynamic_cast<const ShardedNode*>(n);
    return r != nullptr && r->s_ == s_;
  }
  const LeafInfo& tensor_leaf(const std::string& p) const {
    auto it = s_->head().leaves.find(p);
    if (it == s_->head().leaves.end() || it->second.non_tensor)
      throw KeyError("sharded Redis store " + s_->options.td_id + ": no tensor leaf '" + p + "'");
    return it->second;
  }
  std::vector<int64_t> info_full(const LeafInfo& info) const {
    auto shape = info.shape;
    shape[0] = s_->rows();
    return shape;
  }
  // __batch_size__ / __device__ of every block and the manifest, one batch.
  void write_headers(const std::string& what) {
    Batch b;
    b.add({"SET", b.own(s_->manifest_key()), b.own(s_->manifest())});
    for (std::size_t k = 0; k < s_->blocks.size(); ++k) {
      b.add({"SET", b.own(s_->blocks[k]->key("__batch_size__")),
             b.own(json_list(s_->block_batch(k)))});
      b.add({"SET", b.own(s_->blocks[k]->key("__device__")),
             b.own(s_->device ? s_->device->str() : std::string())});
    }
    s_->client->send(b, what, s_->options.transaction);
  }
  // The leaves of a value: (path, tensor or non-tensor), nested levels
  // flattened ("a.b"); an empty level is remembered here.
  void flatten(const std::string& p, const Value& v,
               std::vector<std::pair<std::string, Value>>& out) {
    if (!v.is_tensordict()) {
      out.emplace_back(p, v);
      return;
    }
    const auto& td = v.tensordict();
    for (const auto& [key, value] : td.items()) flatten(p + "." + key.parts().back(), value, out);
    if (td.num_keys() == 0) s_->head().empty_levels.insert(p + ".");
  }
  // Block k's part of a whole value: its rows of a tensor or of a list per
  // row; a single non-tensor value goes to every block.
  Value block_part(const std::string& p, const Value& v, std::size_t k) {
    const int64_t lo = s_->first(k), n = s_->count(k);
    if (v.is_tensor()) {
      at::Tensor t = v.tensor().detach().to(at::kCPU).contiguous();
      if (t.dim() == 0 || t.size(0) != s_->rows())
        throw ShapeError("sharded Redis store: '" + p + "' must have " +
                         std::to_string(s_->rows()) + " rows");
      if (k == 0) s_->check_row(p, t.size(0) ? static_cast<int64_t>(t.nbytes()) / t.size(0) : 0);
      return Value(t.slice(0, lo, lo + n));
    }
    if (v.is_non_tensor())
      return Value(NonTensorData(v.non_tensor().data(), s_->block_batch(k), s_->device));
    const nlohmann::json list = v.non_tensor_stack().tolist();
    if (!list.is_array() || static_cast<int64_t>(list.size()) != s_->rows())
      throw ShapeError("sharded Redis store: the list '" + p + "' must have " +
                       std::to_string(s_->rows()) + " elements");
    nlohmann::json part(list.begin() + lo, list.begin() + lo + n);
    if (part.is_null()) part = nlohmann::json::array();
    return Value(NonTensorStack(part, s_->block_batch(k), s_->device));
  }

  std::shared_ptr<Sharded> s_;
  std::string level_;  // "" for the root, "a.b." for nested levels
};

// The block ids: "<td_id>-<k>", with a suffix ".<j>" where needed so that
// block k lands on master k mod #masters of a cluster.
std::vector<std::string> place(Connection& c, const storage::Redis& o, std::size_t n) {
  const auto nodes = c.nodes();
  std::vector<std::string> ids;
  for (std::size_t k = 0; k < n; ++k) {
    const std::string& want = nodes[k % nodes.size()];
    for (int j = 0;; ++j) {
      std::string id = o.td_id + "-" + std::to_string(k) + (j ? "." + std::to_string(j) : "");
      if (!c.cluster() || j == 10000 || c.node_of(o.prefix + ":{" + id + "}:") == want) {
        ids.push_back(std::move(id));
        break;
      }
    }
  }
  return ids;
}

std::shared_ptr<Sharded> make(const storage::Redis& options, std::shared_ptr<Connection> client) {
  if (options.prefix.empty()) throw ValueError("Redis store: the key prefix must not be empty");
  auto s = std::make_shared<Sharded>();
  s->options = options;
  if (s->options.td_id.empty()) s->options.td_id = uuid4();
  s->client = client ? std::move(client) : std::make_shared<Connection>(s->options);
  s->base = s->options.prefix + ":{" + s->options.td_id + "}:";
  return s;
}

void add_blocks(Sharded& s, const std::vector<std::string>& ids) {
  for (std::size_t k = 0; k < ids.size(); ++k) {
    storage::Redis o = s.options;
    o.td_id = ids[k];
    auto blk = open(o, s.client);
    blk->batch = s.block_batch(k);
    blk->device = s.device;
    s.blocks.push_back(std::move(blk));
  }
}

}  // namespace

TensorDictBase create_sharded(const storage::Redis& options, std::vector<int64_t> batch,
                              std::optional<at::Device> device, const RowSizes& rows) {
  if (device && !device->is_cpu())
    throw DeviceError("sharded Redis store: only the CPU device (or none) is supported, got " +
                      device->str());
  if (batch.empty())
    throw ShapeError("sharded Redis store: needs a batch dim to split into blocks, got []");
  for (auto d : batch)
    if (d < 0) throw ShapeError("sharded Redis store: negative batch size " + json_list(batch));
  if (options.block_rows < 0)
    throw ValueError("sharded Redis store: block_rows must be >= 0, got " +
                     std::to_string(options.block_rows));
  auto s = make(options, nullptr);
  std::lock_guard lock(s->mu);
  s->batch = std::move(batch);
  s->device = device;
  const int64_t n = s->rows();
  int64_t widest = 0;
  std::string widest_path;
  for (const auto& [p, bytes] : rows)
    if (bytes > widest) widest = bytes, widest_path = p;
  if (options.block_rows > 0) {
    s->block_rows = options.block_rows;
  } else {
    // As many rows as the string limit allows, and on a cluster no more than
    // an equal share per master, so that the buffer spans the nodes.
    const int64_t lim = s->string_limit_bytes();
    int64_t b = widest > 0 ? lim / widest : std::max<int64_t>(n, 1);
    if (s->client->cluster()) {
      const auto masters = static_cast<int64_t>(s->client->nodes().size());
      b = std::min(b, (n + masters - 1) / masters);
    }
    s->block_rows = std::max<int64_t>(1, std::min(b, std::max<int64_t>(n, 1)));
  }
  if (widest > 0) s->check_row(widest_path, widest);
  const std::size_t count =
      n == 0 ? 1 : static_cast<std::size_t>((n + s->block_rows - 1) / s->block_rows);
  add_blocks(*s, place(*s->client, s->options, count));
  // The manifest and every block's header in one round trip per node.
  Batch b;
  b.add({"SET", b.own(s->manifest_key()), b.own(s->manifest())});
  for (std::size_t k = 0; k < s->blocks.size(); ++k) {
    b.add({"SET", b.own(s->blocks[k]->key("__batch_size__")), b.own(json_list(s->block_batch(k)))});
    b.add({"SET", b.own(s->blocks[k]->key("__device__")),
           b.own(device ? device->str() : std::string())});
  }
  s->client->send(b, "creating sharded store " + s->options.td_id, s->options.transaction);
  s->head().load();  // leaves of an earlier store with these ids stay visible, as in Python
  return TensorDictBase(std::make_shared<ShardedNode>(s, ""));
}

TensorDictBase attach_sharded(const storage::Redis& options, std::shared_ptr<Connection> client,
                              std::string_view manifest) {
  auto s = make(options, std::move(client));
  std::lock_guard lock(s->mu);
  std::vector<std::string> ids;
  const std::string where = "sharded Redis store: manifest '" + s->manifest_key() + "'";
  const nlohmann::json j = parse_stored_json(manifest, where);
  std::string dev;
  try {
    // Written by this library only (docs/formats.md, "Redis sharded stores").
    const auto& version = j.at("version");
    if (!version.is_number_integer() || version.get<int64_t>() != 1)
      throw FormatError(where + ": version " + version.dump() +
                        " is not known (this build reads 1)");
    if (j.value("layout", std::string()) != "row_blocks")
      throw FormatError(where + ": layout " + j.value("layout", nlohmann::json()).dump() +
                        " is not known (this build reads \"row_blocks\")");
    s->batch = parse_sizes(j.at("batch_size").dump(), where + ": batch_size");
    const auto& rows = j.at("block_rows");
    if (!rows.is_number_integer()) throw FormatError(where + ": block_rows is not an integer");
    s->block_rows = rows.get<int64_t>();
    ids = j.at("blocks").get<std::vector<std::string>>();
    dev = j.value("device", "");
  } catch (const FormatError&) {
    throw;
  } catch (const std::exception& e) {
    throw FormatError(where + " is not valid: " + e.what());
  }
  s->device = stored_device(dev, where + ": device");
  const int64_t n = s->batch.empty() ? -1 : s->batch[0];
  // The block count without overflow (a hostile batch size near 2^63).
  const int64_t blocks =
      s->block_rows < 1 ? -1 : n / s->block_rows + (n % s->block_rows != 0 ? 1 : 0);
  if (n < 0 || s->block_rows < 1 || ids.empty() ||
      static_cast<int64_t>(ids.size()) != std::max<int64_t>(1, blocks))
    throw FormatError(where + " lists " + std::to_string(ids.size()) + " blocks of " +
                      std::to_string(s->block_rows) + " rows for batch size " +
                      json_list(s->batch));
  add_blocks(*s, ids);
  // Every block exists and holds the rows the manifest gives it: a block
  // deleted (or never written) would otherwise read as rows of nothing. One
  // round trip per node.
  Batch b;
  for (const auto& block : s->blocks) b.add({"GET", b.own(block->key("__batch_size__"))});
  const auto sizes = s->client->send(b, "opening sharded store " + s->options.td_id);
  for (std::size_t k = 0; k < s->blocks.size(); ++k) {
    const std::string key = s->blocks[k]->key("__batch_size__");
    if (sizes[k].is_nil())
      throw FormatError(where + " lists block " + std::to_string(k) + " ('" +
                        s->blocks[k]->options.td_id + "'), whose '" + key +
                        "' is missing: the block was deleted or never written");
    const auto found = parse_sizes(sizes[k].text(key), "sharded Redis store: '" + key + "'");
    if (found != s->block_batch(k))
      throw FormatError("sharded Redis store: '" + key + "' is " + json_list(found) + ", but " +
                        where + " gives block " + std::to_string(k) + " the batch size " +
                        json_list(s->block_batch(k)));
  }
  s->head().load();  // each leaf starts with block 0's batch size
  // Whole-buffer sizes (rows x bytes per row) must not wrap either.
  for (const auto& [p, info] : s->head().leaves)
    if (!info.non_tensor && !checked_mul(row_bytes(info), n))
      throw FormatError(where + ": leaf '" + p + "' of " + json_list(info.shape) +
                        " per block holds more than 2^63 bytes for " + std::to_string(n) + " rows");
  return TensorDictBase(std::make_shared<ShardedNode>(s, ""));
}

}  // namespace tensordict::detail::redis
