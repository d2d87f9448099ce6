#pragma once
// The state of one store in Python's layout (a TensorDictStore): its keys,
// its client and its metadata cache, shared by every level of the store and
// by the sharded store's blocks. Internal to the Redis component.

#include "storage/redis/connection.h"
#include "storage/redis/layout.h"  // json_list, uuid4

#include <tensordict/dtype.h>
#include <tensordict/errors.h>
#include <tensordict/node.h>
#include <tensordict/storage/redis.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/Functions.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>

namespace tensordict::detail::redis {

using json = nlohmann::json;

/// a * b, or nullopt when it passes INT64_MAX (both >= 0).
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}
/// The bytes of a tensor of `shape` and `dtype`; FormatError naming `where`
/// when the count passes INT64_MAX (a hostile shape whose product would wrap,
/// e.g. to zero, and pass a size check).
int64_t checked_nbytes(at::IntArrayRef shape, at::ScalarType dtype, const std::string& where);
/// A stored JSON list of sizes ("[5, 2]"): integers >= 0 only (no 2.5, no
/// -5), nesting bounded; FormatError naming `where` otherwise.
std::vector<int64_t> parse_sizes(std::string_view text, const std::string& where);
/// Stored JSON text (a non-tensor value, a manifest) parsed with the bounded
/// parser (kMaxNestingDepth): FormatError naming `where` for text nested too
/// deep, malformed or not UTF-8, never a raw nlohmann exception.
nlohmann::json parse_stored_json(std::string_view text, const std::string& where);
/// The leaf paths of a store's __keys__ set at `key` (one SMEMBERS round trip); FormatError for a
/// path that is not UTF-8 or nested deeper than kMaxNestingDepth.
std::vector<std::string> leaf_paths(Connection& conn, const std::string& key);
/// The device recorded in a store (`where` names the key): none or the CPU;
/// DeviceError for any other device (this library keeps Redis stores on the
/// CPU, as create() does), FormatError for text that is not a device.
std::optional<at::Device> stored_device(const std::string& text, const std::string& where);

/// Runs `f`, ignoring a tensordict error: cleanup after a failure, whose
/// own error is the one reported.
template <class F>
void discard_errors(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

struct LeafInfo {
  bool non_tensor = false;
  std::string encoding;  // json | json_array | pickle
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  /// The leaf's d: key, filled by Store::remember (built once, not per row write).
  std::string data_key;
  int64_t nbytes() const {
    int64_t n = static_cast<int64_t>(c10::elementSize(dtype));
    for (auto d : shape) n *= d;
    return n;
  }
};

/// Shared by every level of one store object: the connection and the cache.
struct Store {
  /// `shared`: a client shared with other stores (the blocks of a sharded
  /// store), else a new one.
  explicit Store(storage::Redis opts, std::shared_ptr<Connection> shared = nullptr)
      : client(shared ? std::move(shared) : std::make_shared<Connection>(opts)),
        conn(*client),
        options(std::move(opts)) {
    if (options.td_id.empty()) options.td_id = uuid4();
    base = options.prefix + ":{" + options.td_id + "}:";
  }
  std::string key(std::string_view suffix) const { return base + std::string(suffix); }
  std::string data_key(std::string_view path) const { return base + "d:" + std::string(path); }
  std::string meta_key(std::string_view path) const { return base + "m:" + std::string(path); }

  /// Parses an m: hash (HGETALL reply); FormatError naming the key.
  LeafInfo parse_meta(const std::string& path, const ReplyView& r) const {
    const std::string where = "'" + meta_key(path) + "'";
    if (!r.is_array() || r.array(where).empty())
      throw FormatError("Redis store " + options.td_id + ": leaf '" + path +
                        "' has no metadata hash " + where);
    std::map<std::string, std::string> fields = r.hash(where);
    LeafInfo info;
    if (fields["is_non_tensor"] == "1") {
      info.non_tensor = true;
      info.encoding = fields["encoding"];
      if (info.encoding != "json" && info.encoding != "json_array" && info.encoding != "pickle")
        throw FormatError("Redis metadata " + where + ": unknown non-tensor encoding '" +
                          info.encoding + "' (expected json, json_array or pickle)");
      return info;
    }
    if (!fields.count("shape") || !fields.count("dtype"))
      throw FormatError("Redis metadata " + where +
                        ": neither a tensor (shape, dtype) nor a non-tensor");
    info.shape = parse_sizes(fields["shape"], "Redis metadata " + where + ": shape");
    try {
      info.dtype = dtype_from_string(fields["dtype"]);
    } catch (const Error&) {
      throw FormatError("Redis metadata " + where + ": unknown dtype '" + fields["dtype"] +
                        "' (expected a name such as torch.float32)");
    }
    // Checked once here, so that nbytes() (on the row paths) cannot wrap.
    checked_nbytes(info.shape, info.dtype, "Redis metadata " + where);
    return info;
  }

  /// Re-reads the leaf paths and their metadata (two round trips).
  void load() {
    std::vector<std::string> paths = leaf_paths(conn, key("__keys__"));
    std::sort(paths.begin(), paths.end());
    Batch b;
    for (const auto& p : paths) b.add({"HGETALL", b.own(meta_key(p))});
    auto replies = conn.send(b, "reading leaf metadata");
    std::map<std::string, LeafInfo> fresh;
    for (std::size_t i = 0; i < paths.size(); ++i) {
      LeafInfo& info = fresh[paths[i]] = parse_meta(paths[i], replies[i]);
      info.data_key = data_key(paths[i]);
      // Every tensor leaf, at any level, starts with the store's batch size
      // (nested levels extend it): a leaf shorter than its rows would be
      // written past its end by a row write.
      if (!info.non_tensor && (info.shape.size() < batch.size() ||
                               !std::equal(batch.begin(), batch.end(), info.shape.begin())))
        throw FormatError("Redis store " + options.td_id + ": leaf '" + paths[i] + "' has shape " +
                          json_list(info.shape) + " ('" + meta_key(paths[i]) +
                          "'), which does not start with the batch size " + json_list(batch));
    }
    // Keep this process's insertion order for the paths it already knew.
    std::vector<std::string> kept;
    for (const auto& p : order)
      if (fresh.count(p)) kept.push_back(p);
    for (const auto& p : paths)
      if (!leaves.count(p)) kept.push_back(p);
    order = std::move(kept);
    leaves = std::move(fresh);
    loaded = true;
  }
  void ensure_loaded() {
    if (!loaded) load();
  }
  /// Whether the cached metadata still gives leaf `path` the bytes `before`
  /// gave it (used after load(): was the leaf replaced?).
  bool same_bytes(const std::string& path, const LeafInfo& before) const {
    const auto it = leaves.find(path);
    return it != leaves.end() && !it->second.non_tensor && it->second.dtype == before.dtype &&
           it->second.shape == before.shape;
  }

  /// The keys of the level `level` ("" or "a.b.") in insertion order.
  std::vector<std::string> keys_at(const std::string& level) {
    ensure_loaded();
    std::vector<std::string> out;
    std::set<std::string> seen;
    auto take = [&](const std::string& path) {
      if (path.compare(0, level.size(), level) != 0 || path.size() == level.size()) return;
      std::string part = path.substr(level.size());
      part = part.substr(0, part.find('.'));
      if (seen.insert(part).second) out.push_back(part);
    };
    for (const auto& p : order) take(p);
    for (const auto& l : empty_levels) take(l.substr(0, l.size() - 1));
    return out;
  }
  /// The kind of the entry at `path`; a miss re-reads the metadata (another
  /// process may have added it).
  std::optional<EntryKind> kind_at(const std::string& path) {
    ensure_loaded();
    if (auto k = kind_cached(path)) return k;
    load();
    return kind_cached(path);
  }
  std::optional<EntryKind> kind_cached(const std::string& path) const {
    auto it = leaves.find(path);
    if (it != leaves.end()) {
      if (!it->second.non_tensor) return EntryKind::Tensor;
      return it->second.encoding == "json_array" ? EntryKind::NonTensorStack : EntryKind::NonTensor;
    }
    if (has_level(path + ".")) return EntryKind::TensorDict;
    return std::nullopt;
  }

  void forget(const std::string& path) {
    leaves.erase(path);
    order.erase(std::remove(order.begin(), order.end(), path), order.end());
  }
  void remember(const std::string& path, LeafInfo info) {
    if (!leaves.count(path)) order.push_back(path);
    info.data_key = data_key(path);
    leaves[path] = std::move(info);
  }
  /// True when some leaf lives under `level` ("a.b.").
  bool has_level(const std::string& level) const {
    auto it = leaves.lower_bound(level);
    return (it != leaves.end() && it->first.compare(0, level.size(), level) == 0) ||
           empty_levels.count(level);
  }

  std::shared_ptr<Connection> client;
  Connection& conn;
  storage::Redis options;
  std::string base;
  std::recursive_mutex mu;
  std::vector<int64_t> batch;
  std::optional<at::Device> device;
  bool loaded = false;
  std::map<std::string, LeafInfo> leaves;
  std::vector<std::string> order;
  // Nested levels are not stored on the server (Python's layout): levels
  // without leaves and nested batch sizes are known to this process only.
  std::set<std::string> empty_levels;  // "a.b."
  // The json_array values as last read, to send only the changed elements.
  std::map<std::string, nlohmann::json> last_array;
  std::map<std::string, std::vector<int64_t>> level_batch;
};

/// The commands that store a whole value at `path` (any kind) in `s`, added
/// to `b`; the tensors sent are kept in `keep`, the leaves in `added`.
void add_value(Store& s, Batch& b, const std::string& path, const Value& v,
               std::vector<at::Tensor>& keep, std::vector<std::pair<std::string, LeafInfo>>& added);

/// The commands that allocate the zero-filled tensor leaf `info` at `path`
/// in `s` (DEL, SETRANGE at the last byte, HSET, SADD), added to `b`.
void add_allocation(Store& s, Batch& b, const std::string& path, const LeafInfo& info);

/// A tensor of `shape` and `dtype` holding the `n` bytes at `data`.
at::Tensor from_bytes(const char* data, std::size_t n, at::IntArrayRef shape, at::ScalarType dtype);
/// The bytes to send for `v`: v itself when it is already a contiguous CPU
/// tensor of the stored dtype (a row write; no dispatcher call), else a copy.
at::Tensor as_stored(const at::Tensor& v, at::ScalarType dtype);

/// A new store object (its own client unless `shared` is given).
std::shared_ptr<Store> open(const storage::Redis& options,
                            std::shared_ptr<Connection> shared = nullptr);

/// A level of a Redis store, sharded or not: what the public helpers
/// (td_id, clear, round_trips...) need of it.
class StoreNode : public Node {
 public:
  StoreNode() { keeps_data_outside_ = true; }  // the core refuses views of it
  virtual Connection& client() const = 0;
  virtual std::recursive_mutex& mutex() const = 0;
  /// The td_id of the store (of the manifest for a sharded store).
  virtual const std::string& id() const = 0;
  virtual std::string server_key(const std::string& suffix) const = 0;
  /// Deletes every key of the store from the server.
  virtual void clear_all() = 0;
  virtual std::vector<std::string> block_ids() const { return {}; }
  virtual int64_t block_rows() const { return 0; }

  // Single-leaf calls go through the batched ones (one pipeline each).
  at::Tensor read_at(std::string_view key, const RowSelection& rows) const override {
    LeafRead leaf{this, NestedKey(std::string(key)), {}};
    read_leaves(rows, std::span<LeafRead>(&leaf, 1));
    return leaf.out;
  }
  void write_(std::string_view key, const at::Tensor& value) override {
    LeafWrite leaf{this, NestedKey(std::string(key)), value};
    write_leaves_(RowSelection::all(batch_size()), std::span<const LeafWrite>(&leaf, 1));
  }
  void write_at_(std::string_view key, const RowSelection& rows, const at::Tensor& value) override {
    LeafWrite leaf{this, NestedKey(std::string(key)), value};
    write_leaves_(rows, std::span<const LeafWrite>(&leaf, 1));
  }
  void create_leaf(std::string_view key, at::IntArrayRef shape,
                   const at::TensorOptions& options) override {
    LeafCreate leaf{this, NestedKey(std::string(key)), shape.vec(), options};
    create_leaves(std::span<const LeafCreate>(&leaf, 1));
  }

 protected:
  /// The handle of nested level `node` of this store, read now: a new node
  /// each time, so it takes this level's lock (lock_() locked only the levels
  /// that existed as nodes then; a level read later must refuse new entries
  /// as well, as Python's nested stores do).
  TensorDictBase nested_level(std::shared_ptr<Node> node) const {
    if (locked()) {
      node->set_locked_flag(true);
      node->lock_parents().emplace_back(std::const_pointer_cast<Node>(shared_from_this()));
    }
    return TensorDictBase(std::move(node));
  }
  /// True when `n` is a level of this same store.
  virtual bool owns(const Node* n) const = 0;
  /// The leaves of a batched call that belong to this store; the others
  /// (levels of another storage) are served by Node's defaults here.
  template <class Leaf, class Serve>
  std::vector<Leaf*> own(std::span<Leaf> leaves, Serve&& serve_other) const {
    std::vector<Leaf*> mine;
    for (auto& l : leaves) {
      if (owns(l.node))
        mine.push_back(&l);
      else
        serve_other(l);
    }
    return mine;
  }
};

/// Bytes per row (batch dim 0) of each leaf to be stored, for choosing the
/// rows per block of a sharded store.
using RowSizes = std::vector<std::pair<std::string, int64_t>>;

/// A new sharded store (sharded_node.cpp): manifest and empty blocks.
TensorDictBase create_sharded(const storage::Redis& options, std::vector<int64_t> batch,
                              std::optional<at::Device> device, const RowSizes& rows);
/// Re-attaches to the sharded store whose manifest (JSON text) was read by
/// `client` under options.td_id.
TensorDictBase attach_sharded(const storage::Redis& options, std::shared_ptr<Connection> client,
                              std::string_view manifest);

}  // namespace tensordict::detail::redis
