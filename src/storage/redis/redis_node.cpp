// The Redis storage (Python's TensorDictStore), in Python's layout
// (docs/redis.md, "Layout"): "<prefix>:{<td_id>}:<suffix>" keys,
// d:<path> raw bytes, m:<path> hashes, __keys__ set of leaf paths.
//
// Round trips: every user operation is one round trip. Row reads and row
// writes of all leaves are ONE pipeline of GETRANGE / SETRANGE commands, one
// per contiguous run of selected rows, wrapped in MULTI/EXEC by default so
// that other clients never see half an operation (bench_redis measured this
// faster than one Lua script doing the same). Whole-leaf reads and writes
// are one pipeline too.
// Metadata (leaf paths, shapes, dtypes) is cached per store object; a miss
// re-reads it from the server.

#include "core/json_limits.h"
#include "io/json_io.h"
#include "storage/redis/byte_ranges.h"
#include "storage/redis/lazy_stack_store.h"
#include "storage/redis/store.h"

#include <tensordict/dtype.h>
#include <tensordict/errors.h>
#include <tensordict/node.h>
#include <tensordict/non_tensor.h>
#include <tensordict/schema.h>
#include <tensordict/storage/redis.h>
#include <tensordict/storage/redis_lazy_stack.h>
#include <tensordict/tensor_dict.h>

#include <ATen/Functions.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>

namespace tensordict {
namespace detail::redis {
namespace {

// Sets elements of a json_array payload on the server, so that two clients
// writing different elements lose no update. ARGV: (index, JSON text) pairs.
constexpr const char* kPatchJsonArray = R"lua(
local cur = redis.call('GET', KEYS[1])
if not cur then return redis.error_reply('json_array ' .. KEYS[1] .. ' is missing') end
local a = cjson.decode(cur)
for j = 1, #ARGV, 2 do a[tonumber(ARGV[j]) + 1] = cjson.decode(ARGV[j + 1]) end
redis.call('SET', KEYS[1], cjson.encode(a))
return #ARGV / 2
)lua";

}  // namespace

std::vector<std::string> leaf_paths(Connection& conn, const std::string& key) {
  Reply members = conn.call({"SMEMBERS", key}, "reading " + key);
  std::vector<std::string> out;
  const ReplyArray listed = members.array(key);
  for (std::size_t i = 0; i < listed.size(); ++i) {
    std::string path(listed[i].text(key));
    // Keys are UTF-8 and nested at most kMaxNestingDepth levels, as the core
    // and the other loaders require: a stored path that is not would reach
    // key lists and printing (and a deep one the recursive tree).
    if (auto bad = first_invalid_utf8(path))
      throw FormatError("Redis store: '" + key +
                        "' lists a leaf path that is not valid UTF-8 (byte " +
                        std::to_string(*bad) + ")");
    if (std::count(path.begin(), path.end(), '.') >= kMaxNestingDepth)
      throw FormatError("Redis store: '" + key + "' lists a leaf path nested deeper than " +
                        std::to_string(kMaxNestingDepth) + " levels ('" + path.substr(0, 40) +
                        "...')");
    out.push_back(std::move(path));
  }
  // A path that is a leaf cannot also be a nested level ("a" and "a.x"):
  // either would hide the other.
  std::vector<std::string_view> sorted(out.begin(), out.end());
  std::sort(sorted.begin(), sorted.end());
  for (const auto p : sorted) {
    const std::string level = std::string(p) + ".";
    const auto it = std::lower_bound(sorted.begin(), sorted.end(), std::string_view(level));
    if (it != sorted.end() && it->starts_with(level))
      throw FormatError("Redis store: '" + key + "' lists '" + std::string(p.substr(0, 100)) +
                        "' both as a leaf and as a nested tensordict (with '" +
                        std::string(it->substr(0, 100)) + "')");
  }
  return out;
}

int64_t checked_nbytes(at::IntArrayRef shape, at::ScalarType dtype, const std::string& where) {
  std::optional<int64_t> n = static_cast<int64_t>(c10::elementSize(dtype));
  for (auto d : shape)
    if (!(n = checked_mul(*n, d)))
      throw FormatError(where + ": shape " + json_list(shape) + " of " + dtype_to_string(dtype) +
                        " holds more than 2^63 bytes");
  return *n;
}

nlohmann::json parse_stored_json(std::string_view text, const std::string& where) {
  try {
    return to_plain(parse_python_json(std::string(text), where));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(where + " is not valid JSON (or not UTF-8): " + e.what());
  }
}

std::vector<int64_t> parse_sizes(std::string_view text, const std::string& where) {
  auto bad = [&] {
    return FormatError(where + " '" + std::string(text.substr(0, 200)) +
                       "' is not a JSON list of sizes (integers >= 0) such as [5, 2]");
  };
  nlohmann::json j;
  try {
    j = parse_stored_json(text, where);
  } catch (const FormatError&) {
    throw bad();
  }
  if (!j.is_array()) throw bad();
  std::vector<int64_t> out;
  for (const auto& d : j) {
    if (d.is_number_unsigned()) {
      if (d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) throw bad();
      out.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    } else if (d.is_number_integer() && d.get<int64_t>() >= 0) {
      out.push_back(d.get<int64_t>());
    } else {
      throw bad();
    }
  }
  return out;
}

std::optional<at::Device> stored_device(const std::string& text, const std::string& where) {
  if (text.empty()) return std::nullopt;
  std::optional<at::Device> device;
  try {
    device = c10::Device(text);
  } catch (const std::exception&) {
    throw FormatError("Redis store: " + where + " is '" + text.substr(0, 200) + "', not a device");
  }
  if (!device->is_cpu())
    throw DeviceError("Redis store: " + where + " records device '" + text +
                      "'; this library keeps Redis stores on the CPU (create() refuses other "
                      "devices): set that key to \"cpu\" or \"\" to read the store here");
  return device;
}

void add_allocation(Store& s, Batch& b, const std::string& path, const LeafInfo& info) {
  const std::string_view dk = b.own(s.data_key(path)), mk = b.own(s.meta_key(path));
  b.add({"DEL", dk, mk});
  add_zeroed(b, dk, info.nbytes());
  b.add({"HSET", mk, "shape", b.own(json_list(info.shape)), "dtype",
         b.own(dtype_to_string(info.dtype))});
  b.add({"SADD", b.own(s.key("__keys__")), b.own(path)});
}

void add_value(Store& s, Batch& b, const std::string& path, const Value& v,
               std::vector<at::Tensor>& keep,
               std::vector<std::pair<std::string, LeafInfo>>& added) {
  if (v.is_tensordict()) {
    const auto& td = v.tensordict();
    for (const auto& [key, value] : td.items())
      add_value(s, b, path + "." + key.parts().back(), value, keep, added);
    if (td.num_keys() == 0) s.empty_levels.insert(path + ".");
    return;
  }
  LeafInfo info;
  const std::string mk = s.meta_key(path), dk = s.data_key(path);
  b.add({"DEL", b.own(mk), b.own(dk)});
  if (v.is_tensor()) {
    at::Tensor t = v.tensor().detach().to(at::kCPU).contiguous();
    keep.push_back(t);
    info.shape = t.sizes().vec();
    info.dtype = t.scalar_type();
    if (t.numel() > 0)
      b.add(
          {"SET", b.own(dk), std::string_view(static_cast<const char*>(t.data_ptr()), t.nbytes())});
    b.add({"HSET", b.own(mk), "shape", b.own(json_list(info.shape)), "dtype",
           b.own(dtype_to_string(info.dtype))});
  } else {
    info.non_tensor = true;
    info.encoding = v.is_non_tensor() ? "json" : "json_array";
    const std::string payload =
        v.is_non_tensor() ? v.non_tensor().data().dump() : v.non_tensor_stack().tolist().dump();
    b.add({"SET", b.own(dk), b.own(payload)});
    b.add({"HSET", b.own(mk), "is_non_tensor", "1", "encoding", b.own(info.encoding)});
  }
  b.add({"SADD", b.own(s.key("__keys__")), b.own(path)});
  added.emplace_back(path, std::move(info));
}

at::Tensor as_stored(const at::Tensor& v, at::ScalarType dtype) {
  if (v.device().is_cpu() && v.scalar_type() == dtype && v.is_contiguous()) return v;
  return v.detach().to(at::kCPU).to(dtype).contiguous();
}

at::Tensor from_bytes(const char* data, std::size_t n, at::IntArrayRef shape,
                      at::ScalarType dtype) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
  if (n > 0) std::memcpy(t.data_ptr(), data, n);
  return t;
}

class RedisNode final : public StoreNode {
 public:
  RedisNode(std::shared_ptr<Store> store, std::string level)
      : s_(std::move(store)), level_(std::move(level)) {}

  Store& store() const { return *s_; }
  const std::shared_ptr<Store>& store_ptr() const { return s_; }
  bool owns(const Node* n) const override {
    auto* r = dynamic_cast<const RedisNode*>(n);
    return r != nullptr && r->s_ == s_;
  }

  std::string type_name() const override { return "TensorDictStore"; }

  Connection& client() const override { return s_->conn; }
  std::recursive_mutex& mutex() const override { return s_->mu; }
  const std::string& id() const override { return s_->options.td_id; }
  std::string server_key(const std::string& suffix) const override { return s_->key(suffix); }
  void clear_all() override {
    auto& s = *s_;
    std::lock_guard lock(s.mu);
    s.ensure_loaded();
    Batch b;
    // As Python's clear_redis() (0.15): the stored class goes too.
    std::vector<std::string_view> del{"DEL", b.own(s.key("__keys__")),
                                      b.own(s.key("__batch_size__")), b.own(s.key("__device__")),
                                      b.own(s.key("__tensorclass__"))};
    for (const auto& [p, info] : s.leaves)
      del.push_back(b.own(s.data_key(p))), del.push_back(b.own(s.meta_key(p)));
    b.add(std::move(del));
    s.conn.send(b, "clearing store " + s.options.td_id);
    s.leaves.clear();
    s.order.clear();
    s.empty_levels.clear();
  }

  at::IntArrayRef batch_size() const override {
    std::lock_guard lock(s_->mu);
    if (level_.empty()) return s_->batch;
    auto it = s_->level_batch.find(level_);
    return it != s_->level_batch.end() ? at::IntArrayRef(it->second) : at::IntArrayRef(s_->batch);
  }
  void set_batch_size(std::vector<int64_t> batch_size) override {
    std::lock_guard lock(s_->mu);
    if (!level_.empty()) {
      s_->level_batch[level_] = std::move(batch_size);
      return;
    }
    s_->conn.call({"SET", s_->key("__batch_size__"), json_list(batch_size)},
                  "writing the batch size");
    s_->batch = std::move(batch_size);
  }
  std::optional<at::Device> device() const override { return s_->device; }
  void set_device(std::optional<at::Device> device) override {
    std::lock_guard lock(s_->mu);
    if (device && !device->is_cpu())
      throw DeviceError("Redis store " + s_->options.td_id +
                        ": only the CPU device (or none) is supported, got " + device->str());
    if (level_.empty())
      s_->conn.call({"SET", s_->key("__device__"), device ? device->str() : std::string()},
                    "writing the device");
    s_->device = device;
  }

  std::vector<std::string> keys() const override {
    std::lock_guard lock(s_->mu);
    return s_->keys_at(level_);
  }
  std::size_t size() const override { return keys().size(); }

  std::optional<EntryKind> kind(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    return s_->kind_at(path(key));
  }
  std::optional<TensorMeta> tensor_meta(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    const std::string p = path(key);
    s_->ensure_loaded();
    // One lookup when cached (the row-write path asks this per leaf); a
    // miss re-reads the metadata as kind() does.
    auto it = s_->leaves.find(p);
    if (it == s_->leaves.end()) {
      if (s_->kind_at(p) != EntryKind::Tensor) return std::nullopt;
      it = s_->leaves.find(p);
    }
    if (it->second.non_tensor) return std::nullopt;
    return TensorMeta{it->second.shape, it->second.dtype, at::kCPU};
  }

  std::optional<Value> find(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    auto k = kind(key);
    if (!k) return std::nullopt;
    const std::string p = path(key);
    if (*k == EntryKind::TensorDict)
      return Value(nested_level(std::make_shared<RedisNode>(s_, p + ".")));
    // The data and fresh metadata in one round trip.
    Batch b;
    b.add({"GET", b.own(s_->data_key(p))}).add({"HGETALL", b.own(s_->meta_key(p))});
    auto r = s_->conn.send(b, "reading '" + s_->data_key(p) + "'");
    if (r[1].is_array() && r[1].array(s_->meta_key(p)).empty()) {  // removed by another process
      s_->forget(p);
      return std::nullopt;
    }
    LeafInfo info = s_->parse_meta(p, r[1]);
    s_->remember(p, info);
    const ReplyView data = r[0];
    if (!info.non_tensor) {
      const std::string_view bytes = data.text_or_nil(s_->data_key(p));
      const std::size_t n = bytes.size();
      if (static_cast<int64_t>(n) != info.nbytes())
        throw FormatError("Redis store: '" + s_->data_key(p) + "' has " + std::to_string(n) +
                          " bytes, its metadata (" + json_list(info.shape) + ", " +
                          dtype_to_string(info.dtype) + ") needs " + std::to_string(info.nbytes()));
      return Value(from_bytes(bytes.data(), n, info.shape, info.dtype));
    }
    if (info.encoding == "pickle")
      throw FormatError(
          "Redis store: '" + s_->data_key(p) +
          "' holds a pickled Python object, which C++ cannot read (store JSON values instead)");
    json value =
        parse_stored_json(data.text(s_->data_key(p)), "Redis store: '" + s_->data_key(p) + "'");
    const std::vector<int64_t> batch = batch_size().vec();
    if (info.encoding == "json") return Value(NonTensorData(std::move(value), batch, s_->device));
    if (!value.is_array())
      throw FormatError("Redis store: '" + s_->data_key(p) +
                        "' has encoding json_array but is not a JSON list");
    if (!batch.empty() && static_cast<int64_t>(value.size()) != batch[0])
      throw FormatError("Redis store: '" + s_->data_key(p) + "' is a list of " +
                        std::to_string(value.size()) +
                        " values (json_array) in a store of batch size " + json_list(batch) +
                        ": one value per row is needed");
    s_->last_array[p] = value;
    try {
      return Value(NonTensorStack(value, batch, s_->device));
    } catch (const Error&) {
      return Value(NonTensorStack::from_list(value, s_->device));
    }
  }

  void read_leaves(const RowSelection& rows, std::span<LeafRead> leaves) const override {
    std::lock_guard lock(s_->mu);
    auto mine =
        own(leaves, [&](LeafRead& l) { Node::read_leaves(rows, std::span<LeafRead>(&l, 1)); });
    if (mine.empty()) return;
    std::vector<std::string> paths;
    std::vector<LeafInfo> infos;
    for (auto* l : mine) {
      paths.push_back(static_cast<const RedisNode*>(l->node)->path(l->key()));
      infos.push_back(tensor_leaf(paths.back()));
    }
    Batch b;
    CheckedReads reads("Redis store");
    const bool whole = rows.is_all();
    // A General selection reads the leaf whole and selects here.
    std::vector<bool> selected_here;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const LeafInfo& info = infos[i];
      auto runs = whole ? std::nullopt : selected_bytes(rows, info.shape, info.dtype);
      selected_here.push_back(!whole && !runs);
      if (!runs) add_run(runs.emplace(), 0, info.nbytes());  // no run for an empty leaf
      reads.leaf(b, b.own(s_->data_key(paths[i])), info.nbytes(), *runs,
                 /*as_whole=*/whole || selected_here.back());
    }
    auto replies = s_->conn.send(b, "reading rows of " + std::to_string(mine.size()) + " leaves",
                                 s_->options.transaction);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const LeafInfo& info = infos[i];
      const auto conflict = [&](const std::string& message) {
        s_->load();  // replaced or removed by another process: refresh the cache
        throw_size_mismatch(message, s_->same_bytes(paths[i], info));
      };
      if (auto message = reads.size_mismatch(i, replies)) conflict(*message);
      at::Tensor t =
          at::empty(whole || selected_here[i] ? info.shape : rows.selected_shape(info.shape),
                    at::TensorOptions().dtype(info.dtype));
      if (auto message = reads.copy(i, replies, static_cast<char*>(t.data_ptr())))
        conflict(*message);
      mine[i]->out = selected_here[i] ? rows.apply(t).clone() : t;
    }
  }

  void write(std::string_view key, Value value) override {
    std::lock_guard lock(s_->mu);
    s_->ensure_loaded();
    const std::string p = path(key);
    if (value.is_non_tensor_stack() && patch_json_array(p, value.non_tensor_stack())) return;
    Batch b;
    // Replacing a nested level or a leaf: drop what was there.
    std::vector<std::string> old;
    for (const auto& [lp, info] : s_->leaves)
      if (lp == p || lp.compare(0, p.size() + 1, p + ".") == 0) old.push_back(lp);
    for (const auto& lp : old) {
      if (lp == p) continue;  // add_value deletes the leaf's own keys
      b.add({"DEL", b.own(s_->data_key(lp)), b.own(s_->meta_key(lp))});
      b.add({"SREM", b.own(s_->key("__keys__")), b.own(lp)});
    }
    std::vector<at::Tensor> keep;
    std::vector<std::pair<std::string, LeafInfo>> added;
    add_value(*s_, b, p, value, keep, added);
    // Always one MULTI/EXEC, whatever options.transaction: the old value is
    // deleted in the same transaction that writes the new one, so a write the
    // server refuses (out of memory) leaves the old value as it was.
    s_->conn.send(b, "writing '" + p + "'", /*transaction=*/true);
    for (const auto& lp : old) s_->forget(lp);
    for (auto& [ap, info] : added) s_->remember(ap, std::move(info));
    if (value.is_tensordict()) {
      s_->level_batch[p + "."] = value.tensordict().batch_size().vec();
      if (value.tensordict().num_keys() == 0) s_->empty_levels.insert(p + ".");
    }
  }

  void write_leaves_(const RowSelection& rows, std::span<const LeafWrite> leaves) override {
    std::lock_guard lock(s_->mu);
    auto mine = own(leaves, [&](const LeafWrite& l) {
      Node::write_leaves_(rows, std::span<const LeafWrite>(&l, 1));
    });
    if (mine.empty()) return;
    // Pointers into the cache (a std::map: stable), not copies: this is the
    // row-write hot path.
    std::vector<std::pair<const std::string*, const LeafInfo*>> cached;
    std::vector<at::Tensor> values;
    cached.reserve(mine.size());
    values.reserve(mine.size());
    bool general = rows.kind() == RowSelection::Kind::General;
    for (const auto* l : mine) {
      const auto& [p, info] =
          *cached_tensor_leaf(static_cast<const RedisNode*>(l->node)->path(l->key()));
      cached.emplace_back(&p, &info);
      values.push_back(as_stored(l->value, info.dtype));
    }
    if (general) {
      // Read the leaves whole (one round trip), patch here, write them back.
      std::vector<LeafRead> reads;
      reads.reserve(mine.size());
      for (const auto* l : mine) reads.push_back(LeafRead{l->node, l->path, {}});
      Node* self = this;
      static_cast<RedisNode*>(self)->read_leaves(RowSelection::all(s_->batch), reads);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        rows.put(reads[i].out, values[i]);
        values[i] = reads[i].out.contiguous();
      }
    }
    Batch b;
    if (rows.is_all() || general) {
      for (std::size_t i = 0; i < mine.size(); ++i)
        if (cached[i].second->nbytes() > 0)
          b.add({"SET", cached[i].second->data_key,
                 std::string_view(static_cast<const char*>(values[i].data_ptr()),
                                  values[i].nbytes())});
      s_->conn.send(b, "writing " + std::to_string(mine.size()) + " leaves",
                    s_->options.transaction);
      return;
    }
    // With a transaction, one CheckedWrite: all leaves or none.
    RangeWrites writes(s_->options.transaction);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const LeafInfo& info = *cached[i].second;
      const auto runs = *selected_bytes(rows, info.shape, info.dtype);  // no empty run
      int64_t selected = 0;
      for (const auto& [off, len] : runs) {
        // Never past the leaf's end (a SETRANGE there would grow it).
        if (off < 0 || off + len > info.nbytes())
          throw IndexError("Redis store: '" + *cached[i].first + "': rows at bytes " +
                           std::to_string(off) + ".." + std::to_string(off + len) +
                           " are past the leaf's " + std::to_string(info.nbytes()) + " bytes");
        selected += len;
      }
      if (selected != static_cast<int64_t>(values[i].nbytes()))
        throw ShapeError("Redis store: '" + *cached[i].first + "': the value has " +
                         std::to_string(values[i].nbytes()) + " bytes for " +
                         std::to_string(selected) + " selected bytes");
      if (runs.empty()) continue;
      writes.key(b, info.data_key, info.nbytes());
      writes.runs(b, runs, static_cast<const char*>(values[i].data_ptr()));
    }
    writes.finish(b);
    send_checked(s_->conn, b, "writing rows of " + std::to_string(mine.size()) + " leaves", [&] {
      // Copied before load() replaces what `cached` points into.
      std::vector<std::pair<std::string, LeafInfo>> before;
      before.reserve(cached.size());
      for (const auto& [path, info] : cached) before.emplace_back(*path, *info);
      s_->load();
      return std::all_of(before.begin(), before.end(),
                         [&](const auto& leaf) { return s_->same_bytes(leaf.first, leaf.second); });
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
      const std::string p = static_cast<const RedisNode*>(l.node)->path(l.key());
      LeafInfo info;
      info.shape = l.shape;
      info.dtype = l.options.dtype().toScalarType();
      add_allocation(*s_, b, p, info);
      added.emplace_back(p, std::move(info));
    }
    try {
      s_->conn.send(b, "allocating " + std::to_string(added.size()) + " leaves",
                    s_->options.transaction);
    } catch (const StorageError&) {
      // The server does not roll back the leaves it allocated before the one
      // it refused (a size past proto-max-bulk-len): remove them all.
      Batch undo;
      for (const auto& [p, info] : added) {
        undo.add({"DEL", undo.own(s_->data_key(p)), undo.own(s_->meta_key(p))});
        undo.add({"SREM", undo.own(s_->key("__keys__")), undo.own(p)});
        s_->forget(p);
      }
      discard_errors([&] { s_->conn.send(undo, "removing leaves not allocated"); });
      throw;
    }
    for (auto& [p, info] : added) s_->remember(p, std::move(info));
  }

  TensorDictBase create_nested(std::string_view key, at::IntArrayRef batch_size,
                               std::optional<at::Device> device) override {
    std::lock_guard lock(s_->mu);
    const std::string level = path(key) + ".";
    s_->empty_levels.insert(level);
    s_->level_batch[level] = batch_size.vec();
    return TensorDictBase(std::make_shared<RedisNode>(s_, level));
  }

  void remove(std::string_view key) override {
    std::lock_guard lock(s_->mu);
    const std::string p = path(key);
    std::vector<std::string> gone;
    for (const auto& [lp, info] : s_->leaves)
      if (lp == p || lp.compare(0, p.size() + 1, p + ".") == 0) gone.push_back(lp);
    Batch b;
    for (const auto& lp : gone) {
      b.add({"DEL", b.own(s_->data_key(lp)), b.own(s_->meta_key(lp))});
      b.add({"SREM", b.own(s_->key("__keys__")), b.own(lp)});
    }
    s_->conn.send(b, "removing '" + p + "'", s_->options.transaction);
    for (const auto& lp : gone) s_->forget(lp);
    for (auto it = s_->empty_levels.begin(); it != s_->empty_levels.end();)
      it = it->compare(0, p.size() + 1, p + ".") == 0 ? s_->empty_levels.erase(it) : std::next(it);
  }

  std::string path(std::string_view key) const { return level_ + std::string(key); }
  const std::string& level() const noexcept { return level_; }

 private:
  // A per-element write of a json_array read before (index_put_ of rows
  // holding a non-tensor): only the changed elements are sent, and set on the
  // server by a Lua script, atomically. False when it does not apply.
  bool patch_json_array(const std::string& p, const NonTensorStack& stack) {
    auto before = s_->last_array.find(p);
    auto leaf = s_->leaves.find(p);
    if (before == s_->last_array.end() || leaf == s_->leaves.end() ||
        leaf->second.encoding != "json_array")
      return false;
    json now = stack.tolist();
    if (!now.is_array() || now.size() != before->second.size()) return false;
    Batch b;
    std::vector<std::string_view> args{"EVAL", kPatchJsonArray, "1", b.own(s_->data_key(p))};
    for (std::size_t i = 0; i < now.size(); ++i)
      if (now[i] != before->second[i])
        args.push_back(b.own(std::to_string(i))), args.push_back(b.own(now[i].dump()));
    if (args.size() > 4) {
      b.add(std::move(args));
      s_->conn.send(b, "writing elements of '" + p + "'");
    }
    before->second = std::move(now);
    return true;
  }

  // The cached metadata of the tensor leaf at `p` (a batched call's leaf).
  const LeafInfo& tensor_leaf(const std::string& p) const { return cached_tensor_leaf(p)->second; }
  // The cache entry (path and metadata) of a tensor leaf; KeyError when none.
  std::map<std::string, LeafInfo>::const_iterator cached_tensor_leaf(const std::string& p) const {
    auto it = s_->leaves.find(p);
    if (it == s_->leaves.end() || it->second.non_tensor)
      throw KeyError("Redis store " + s_->options.td_id + ": no tensor leaf '" + p + "'");
    return it;
  }

  std::shared_ptr<Store> s_;
  std::string level_;  // "" for the root, "a.b." for nested levels
};

std::shared_ptr<Store> open(const storage::Redis& options, std::shared_ptr<Connection> shared) {
  if (options.prefix.empty()) throw ValueError("Redis store: the key prefix must not be empty");
  return std::make_shared<Store>(options, std::move(shared));
}

namespace {

const StoreNode& node_of(const TensorDictBase& td) {
  auto* n = td.defined() ? dynamic_cast<const StoreNode*>(&td.node()) : nullptr;
  if (n == nullptr) throw TypeError("not a Redis store (TensorDictStore)");
  return *n;
}

std::string dotted(const NestedKey& key) {
  std::string out;
  for (const auto& part : key.parts()) out += (out.empty() ? "" : ".") + std::string(part);
  return out;
}

// Bytes per row of every tensor leaf of a schema / a tensordict.
RowSizes row_sizes(const Schema& schema) {
  RowSizes out;
  for (const auto& [key, spec] : schema.entries()) {
    int64_t n = static_cast<int64_t>(c10::elementSize(spec.dtype));
    for (auto d : spec.shape) n *= d;
    out.emplace_back(dotted(key), n);
  }
  return out;
}
RowSizes row_sizes(const TensorDictBase& td) {
  RowSizes out;
  const int64_t rows = td.batch_size().empty() ? 1 : std::max<int64_t>(td.batch_size()[0], 1);
  for (const auto& key : td.keys(true, true))
    if (td.entry_kind(key) == EntryKind::Tensor) {
      const at::Tensor t = td.get(key);
      out.emplace_back(dotted(key), static_cast<int64_t>(t.nbytes()) / rows);
    }
  return out;
}

}  // namespace
}  // namespace detail::redis

namespace redis {
using detail::redis::Batch;
using detail::redis::RedisNode;

TensorDictStore create(const storage::Redis& storage, std::vector<int64_t> batch_size,
                       std::optional<c10::Device> device) {
  if (device && !device->is_cpu())
    throw DeviceError("Redis store: only the CPU device (or none) is supported, got " +
                      device->str());
  for (auto d : batch_size)
    if (d < 0)
      throw ShapeError("Redis store: negative batch size " + detail::redis::json_list(batch_size));
  if (storage.sharded)
    return TensorDictStore(
        detail::redis::create_sharded(storage, batch_size, device, {}).node_ptr());
  auto s = detail::redis::open(storage);
  std::lock_guard lock(s->mu);
  Batch b;
  b.add({"SET", b.own(s->key("__batch_size__")), b.own(detail::redis::json_list(batch_size))});
  b.add({"SET", b.own(s->key("__device__")), b.own(device ? device->str() : std::string())});
  s->conn.send(b, "creating store " + s->options.td_id, s->options.transaction);
  s->batch = std::move(batch_size);
  s->device = device;
  s->load();  // leaves of an earlier store with this td_id stay visible, as in Python
  return TensorDictStore(std::make_shared<RedisNode>(s, ""));
}

TensorDictStore from_store(const storage::Redis& storage) {
  if (storage.td_id.empty()) throw ValueError("redis::from_store: td_id is required");
  auto s = detail::redis::open(storage);
  std::lock_guard lock(s->mu);
  Batch b;
  b.add({"GET", b.own(s->key("__batch_size__"))}).add({"GET", b.own(s->key("__device__"))});
  b.add({"GET", b.own(s->key("__shards__"))});
  // __type__: a LazyStackedTensorDictStore (docs/formats.md, "Redis lazy-stack stores").
  b.add({"GET", b.own(s->key("__type__"))});
  auto r = s->conn.send(b, "attaching to store " + storage.td_id);
  if (!r[3].is_nil()) {
    // The only store type that says what it is (a plain or sharded store has
    // no __type__): another value is a store this build cannot read.
    const auto type = r[3].text(s->key("__type__"));
    if (type != detail::redis::kLazyStackType)
      throw FormatError("Redis store: '" + s->key("__type__") + "' is '" +
                        std::string(type.substr(0, 100)) + "', expected '" +
                        std::string(detail::redis::kLazyStackType) + "' or no such key");
    return from_lazy_stack_store(storage);
  }
  if (r[0].is_nil() && !r[2].is_nil())  // a sharded store
    return TensorDictStore(
        detail::redis::attach_sharded(storage, s->client, r[2].text(s->key("__shards__")))
            .node_ptr());
  if (r[0].is_nil())
    throw KeyError("no Redis store with td_id '" + storage.td_id + "' (prefix '" + storage.prefix +
                   "') at " + s->conn.where() + ": key '" + s->key("__batch_size__") +
                   "' is missing");
  s->batch = detail::redis::parse_sizes(r[0].text(s->key("__batch_size__")),
                                        "Redis store: '" + s->key("__batch_size__") + "'");
  const std::string dev(r[1].text_or_nil(s->key("__device__")));
  s->device = detail::redis::stored_device(dev, "'" + s->key("__device__") + "'");
  s->load();  // checks that every leaf starts with the batch size
  return TensorDictStore(std::make_shared<RedisNode>(s, ""));
}

TensorDictStore from_tensordict(const TensorDictBase& td, const storage::Redis& storage) {
  if (td.is<LazyStackedTensorDict>())
    return from_lazy_stack(td.as<LazyStackedTensorDict>(), storage);
  auto dev = td.device();
  if (storage.sharded) {
    TensorDictStore store(detail::redis::create_sharded(storage, td.batch_size().vec(),
                                                        dev && dev->is_cpu() ? dev : std::nullopt,
                                                        detail::redis::row_sizes(td))
                              .node_ptr());
    for (const auto& [key, value] : td.items()) store.set(key, value);
    return store;
  }
  TensorDictStore store =
      create(storage, td.batch_size().vec(), dev && dev->is_cpu() ? dev : std::nullopt);
  auto& s = static_cast<const RedisNode&>(store.node()).store();
  std::lock_guard lock(s.mu);
  Batch b;
  std::vector<at::Tensor> keep;
  std::vector<std::pair<std::string, detail::redis::LeafInfo>> added;
  for (const auto& [key, value] : td.items())
    detail::redis::add_value(s, b, key.parts().back(), value, keep, added);
  s.conn.send(b, "uploading " + std::to_string(added.size()) + " leaves", s.options.transaction);
  for (auto& [p, info] : added) s.remember(p, std::move(info));
  return store;
}

bool is_store(const TensorDictBase& td) { return td.is<TensorDictStore>(); }
std::string td_id(const TensorDictBase& td) { return detail::redis::node_of(td).id(); }
std::string server_key(const TensorDictBase& td, const std::string& suffix) {
  return detail::redis::node_of(td).server_key(suffix);
}

void clear(const TensorDictBase& td) {
  const_cast<detail::redis::StoreNode&>(detail::redis::node_of(td)).clear_all();
}

std::optional<std::string> tensorclass_name(const TensorDictBase& td) {
  const auto& n = detail::redis::node_of(td);
  std::lock_guard lock(n.mutex());
  const std::string key = n.server_key("__tensorclass__");
  auto r = n.client().call({"GET", key}, "reading the tensorclass of store " + n.id());
  if (r.is_nil()) return std::nullopt;
  return std::string(r.text(key));
}

void set_tensorclass_name(const TensorDictBase& td, const std::string& name) {
  const auto& n = detail::redis::node_of(td);
  std::lock_guard lock(n.mutex());
  n.client().call({"SET", n.server_key("__tensorclass__"), name},
                  "recording the tensorclass of store " + n.id());
}

std::int64_t round_trips(const TensorDictBase& td) {
  return detail::redis::node_of(td).client().round_trips();
}

void close(const TensorDictBase& td) { detail::redis::node_of(td).client().close(); }

std::vector<std::string> block_ids(const TensorDictBase& td) {
  return detail::redis::node_of(td).block_ids();
}
std::int64_t block_rows(const TensorDictBase& td) {
  return detail::redis::node_of(td).block_rows();
}

}  // namespace redis

TensorDictStore from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                            const storage::Redis& storage) {
  TensorDictStore root =
      storage.sharded
          ? TensorDictStore(detail::redis::create_sharded(storage, batch_size, std::nullopt,
                                                          detail::redis::row_sizes(schema))
                                .node_ptr())
          : redis::create(storage, batch_size);
  const std::vector<NestedKey> before = root.keys();
  try {
    allocate_schema(root, schema);
  } catch (const Error&) {
    // Remove what this call created (the server does not roll back the
    // leaves allocated before the one it refused): the whole store when it
    // was new, else the entries the schema added.
    try {
      if (before.empty()) {
        redis::clear(root);
      } else {
        for (const auto& key : root.keys())
          if (std::find(before.begin(), before.end(), key) == before.end()) root.del_(key);
      }
    } catch (const Error&) {
      // The server went away: the error below says why.
    }
    throw;
  }
  return root;
}

storage::Redis redis::options_from(const StorageOptions& options) {
  check_storage_options(
      options, "redis",
      {"host", "port", "unix_socket", "db", "username", "password", "connect_timeout", "timeout",
       "prefix", "td_id", "transaction", "cluster", "seeds", "sharded", "block_rows"});
  storage::Redis r;
  r.host = storage_option<std::string>(options, "redis", "host", r.host);
  r.port = storage_option<int>(options, "redis", "port", r.port);
  r.unix_socket = storage_option<std::string>(options, "redis", "unix_socket", r.unix_socket);
  r.db = storage_option<int>(options, "redis", "db", r.db);
  r.username = storage_option<std::string>(options, "redis", "username", r.username);
  r.password = storage_option<std::string>(options, "redis", "password", r.password);
  r.connect_timeout =
      storage_option<double>(options, "redis", "connect_timeout", r.connect_timeout);
  r.timeout = storage_option<double>(options, "redis", "timeout", r.timeout);
  r.prefix = storage_option<std::string>(options, "redis", "prefix", r.prefix);
  r.td_id = storage_option<std::string>(options, "redis", "td_id", r.td_id);
  r.transaction = storage_option<bool>(options, "redis", "transaction", r.transaction);
  r.cluster = storage_option<bool>(options, "redis", "cluster", r.cluster);
  r.sharded = storage_option<bool>(options, "redis", "sharded", r.sharded);
  r.block_rows = storage_option<std::int64_t>(options, "redis", "block_rows", r.block_rows);
  // seeds: a list of "host:port", or one string of them separated by commas.
  if (auto it = options.find("seeds"); it != options.end() && it->second.is_string()) {
    std::string all = it->second.get<std::string>();
    for (std::size_t start = 0; start <= all.size();) {
      const auto comma = std::min(all.find(',', start), all.size());
      if (comma > start) r.seeds.push_back(all.substr(start, comma - start));
      start = comma + 1;
    }
  } else {
    r.seeds = storage_option<std::vector<std::string>>(options, "redis", "seeds", r.seeds);
  }
  return r;
}

namespace {

TensorDictBase make_redis(const Schema& schema, const std::vector<int64_t>& batch_size,
                          const StorageOptions& options) {
  return from_schema(schema, batch_size, redis::options_from(options));
}

}  // namespace

TENSORDICT_REGISTER_STORAGE("redis", make_redis);

// ---- the handle ------------------------------------------------------------------

TensorDictStore::TensorDictStore(std::shared_ptr<Node> node) : TensorDictBase(std::move(node)) {}
bool TensorDictStore::is_node(const Node& node) noexcept {
  return dynamic_cast<const detail::redis::StoreNode*>(&node) != nullptr;
}
TensorDictStore TensorDictStore::create(const storage::Redis& storage,
                                        std::vector<int64_t> batch_size,
                                        std::optional<c10::Device> device) {
  return redis::create(storage, std::move(batch_size), device);
}
TensorDictStore TensorDictStore::from_tensordict(const TensorDictBase& td,
                                                 const storage::Redis& storage) {
  return redis::from_tensordict(td, storage);
}
TensorDictStore TensorDictStore::from_store(const storage::Redis& storage) {
  return redis::from_store(storage);
}
std::string TensorDictStore::td_id() const { return redis::td_id(*this); }
std::string TensorDictStore::server_key(const std::string& suffix) const {
  return redis::server_key(*this, suffix);
}
bool TensorDictStore::is_sharded() const { return redis::block_rows(*this) > 0; }
std::vector<std::string> TensorDictStore::block_ids() const { return redis::block_ids(*this); }
std::int64_t TensorDictStore::block_rows() const { return redis::block_rows(*this); }
std::int64_t TensorDictStore::round_trips() const { return redis::round_trips(*this); }
void TensorDictStore::close() const { redis::close(*this); }
void TensorDictStore::clear() const { redis::clear(*this); }
std::optional<std::string> TensorDictStore::tensorclass_name() const {
  return redis::tensorclass_name(*this);
}
void TensorDictStore::set_tensorclass_name(const std::string& name) const {
  redis::set_tensorclass_name(*this, name);
}

}  // namespace tensordict
