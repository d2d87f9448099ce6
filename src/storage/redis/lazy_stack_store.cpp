// LazyStackedTensorDictStore: a lazy stack of N tensordicts on a Redis
// server, Python's layout (docs/redis.md, "Lazy stacks"):
//   __type__ "lazy_stack", __count__ N, __stack_dim__, __inner_batch_size__,
//   __device__, __keys__ (leaf paths),
//   d:<path>      the N elements' bytes, element 0 first (element-major
//                 whatever the stack dim),
//   d:<path>:idx  heterogeneous leaves only: N+1 int64 LE byte offsets,
//   m:<path>      shape [N] + element shape (the first element's when
//                 heterogeneous), dtype, homogeneous "1"/"0", shapes (every
//                 element's shape, heterogeneous only), layout "stack".
// Python's set() of a whole leaf writes layout "batch": shape = the stacked
// shape, bytes in batch order. Those leaves are read and written in place
// (KeyInfo::for_ranges); a leaf this library writes is always "stack".
//
// Round trips: the metadata (shapes, dtypes, offset tables) is cached per
// store object, so a read or write of any set of elements of any set of
// leaves is one pipeline of GETRANGE / SETRANGE commands (Python needs a
// second round trip for the offsets). A STRLEN per leaf in the same pipeline
// catches a leaf another process replaced.

#include "storage/redis/lazy_stack_store.h"
#include "storage/redis/byte_ranges.h"
#include "storage/redis/connection.h"
#include "storage/redis/layout.h"
#include "storage/redis/store.h"

#include <tensordict/dtype.h>
#include <tensordict/errors.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/node.h>
#include <tensordict/storage/redis_lazy_stack.h>
#include <tensordict/tensor_dict.h>

#include <ATen/Functions.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace tensordict {
namespace detail::redis {
namespace {

using json = nlohmann::json;

// Elements per SETRANGE of an upload (Python's _UPLOAD_CHUNK).
constexpr int64_t kUploadChunk = 10'000;

// The most elements a stored lazy stack may have (each is a tensordict in
// memory once read): a larger __count__ is a FormatError, not a 2^62-entry
// allocation.
constexpr int64_t kMaxElements = (int64_t{1} << 31) - 1;

int64_t numel_of(at::IntArrayRef shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<int64_t> with_dim(std::vector<int64_t> shape, int64_t dim, int64_t size) {
  shape.insert(shape.begin() + dim, size);
  return shape;
}

// The shape of every element's leaf, and where its bytes are.
struct KeyInfo {
  at::ScalarType dtype = at::kFloat;
  bool homogeneous = true;
  std::vector<int64_t> first;                // element 0's shape (every element's when homogeneous)
  std::vector<std::vector<int64_t>> shapes;  // heterogeneous: every element's shape
  std::vector<int64_t> offsets;              // heterogeneous: N+1 byte offsets

  int64_t item() const { return static_cast<int64_t>(c10::elementSize(dtype)); }
  int64_t row() const { return item() * numel_of(first); }
  const std::vector<int64_t>& shape_of(int64_t i) const {
    return homogeneous ? first : shapes[static_cast<std::size_t>(i)];
  }
  int64_t offset(int64_t i) const {
    return homogeneous ? i * row() : offsets[static_cast<std::size_t>(i)];
  }
  int64_t length(int64_t i) const {
    return homogeneous
               ? row()
               : offsets[static_cast<std::size_t>(i) + 1] - offsets[static_cast<std::size_t>(i)];
  }
  int64_t total(int64_t n) const { return offset(n); }

  // Python's "batch" layout (a homogeneous leaf that `set` wrote whole,
  // stack dim != 0): the bytes are the stacked tensor's, in batch order, so
  // element e is one block per row of the dims before the stack dim.
  bool batch_layout = false;
  int64_t lead = 1;   // batch layout: the rows of the dims before the stack dim
  int64_t count = 0;  // batch layout: the elements

  /// Calls f(offset, length) for each byte range of element i, in the
  /// element's row-major order.
  template <class F>
  void for_ranges(int64_t i, F&& f) const {
    if (!batch_layout) {
      f(offset(i), length(i));
      return;
    }
    const int64_t block = lead > 0 ? row() / lead : 0;
    for (int64_t r = 0; r < lead; ++r) f((r * count + i) * block, block);
  }
};

std::string show(at::IntArrayRef shape) { return json_list(shape); }

}  // namespace

/// Shared by every level of one store object: connection and metadata cache.
struct LazyStackState {
  explicit LazyStackState(storage::Redis opts) : conn(opts), options(std::move(opts)) {
    if (options.td_id.empty()) options.td_id = uuid4();
    base = options.prefix + ":{" + options.td_id + "}:";
  }

  const std::string& td_id() const { return options.td_id; }
  std::string key(std::string_view suffix) const { return base + std::string(suffix); }
  std::string data_key(std::string_view p) const { return key("d:" + std::string(p)); }
  std::string idx_key(std::string_view p) const { return key("d:" + std::string(p) + ":idx"); }
  std::string meta_key(std::string_view p) const { return key("m:" + std::string(p)); }
  std::string name() const { return "LazyStackedTensorDictStore " + options.td_id; }

  void clear() {
    std::lock_guard lock(mu);
    ensure_loaded();
    Batch b;
    std::vector<std::string_view> del{"DEL"};
    for (const char* s : {"__keys__", "__type__", "__count__", "__stack_dim__",
                          "__inner_batch_size__", "__device__"})
      del.push_back(b.own(key(s)));
    for (const auto& [p, info] : keys) {
      del.push_back(b.own(data_key(p)));
      del.push_back(b.own(idx_key(p)));
      del.push_back(b.own(meta_key(p)));
    }
    b.add(std::move(del));
    conn.send(b, "clearing " + name());
    keys.clear();
    empty_levels.clear();
  }

  /// Parses m:<path> (HGETALL) and d:<path>:idx (GET); FormatError naming
  /// the server key.
  KeyInfo parse(const std::string& p, const ReplyView& meta, const ReplyView& idx) const {
    const std::string where = "'" + meta_key(p) + "'";
    if (!meta.is_array() || meta.array(where).empty())
      throw FormatError(name() + ": leaf '" + p + "' has no metadata hash " + where);
    std::map<std::string, std::string> f = meta.hash(where);
    if (!f.count("shape") || !f.count("dtype"))
      throw FormatError("Redis metadata " + where +
                        ": no shape or dtype field (the lazy-stack "
                        "store holds tensors only)");
    KeyInfo info;
    try {
      info.dtype = dtype_from_string(f["dtype"]);
    } catch (const Error&) {
      throw FormatError("Redis metadata " + where + ": unknown dtype '" + f["dtype"] + "'");
    }
    const std::vector<int64_t> shape =
        parse_sizes(f["shape"], "Redis metadata " + where + ": shape");
    // Every byte count below (element, whole leaf) fits in int64.
    const int64_t leaf_bytes = checked_nbytes(shape, info.dtype, "Redis metadata " + where);
    (void)leaf_bytes;
    const std::string homogeneous = f.count("homogeneous") ? f["homogeneous"] : "1";
    if (homogeneous != "1" && homogeneous != "0")
      throw FormatError("Redis metadata " + where + ": homogeneous is '" + homogeneous +
                        "' (expected \"1\" or \"0\")");
    info.homogeneous = homogeneous == "1";
    const std::string layout = f.count("layout") ? f["layout"] : "";
    if (!layout.empty() && layout != "stack" && layout != "batch")
      throw FormatError("Redis metadata " + where + ": layout is '" + layout +
                        "' (expected \"stack\" or \"batch\")");
    if (info.homogeneous && batch_first(shape, layout)) {
      // Python's set() of a whole leaf: the stacked tensor's own bytes.
      info.batch_layout = true;
      info.count = count;
      info.first = shape;
      info.first.erase(info.first.begin() + stack_dim);
      info.lead = numel_of(at::IntArrayRef(shape).slice(0, static_cast<std::size_t>(stack_dim)));
      return info;
    }
    if (shape.empty() || shape[0] != count)
      throw FormatError("Redis metadata " + where + ": shape " + f["shape"] +
                        " does not start with the element count " + std::to_string(count));
    info.first.assign(shape.begin() + 1, shape.end());
    check_inner(where, info.first);
    if (info.homogeneous) return info;
    const auto bad_shapes = [&] {
      return FormatError("Redis metadata " + where +
                         ": a heterogeneous leaf needs 'shapes', a JSON list of element shapes");
    };
    if (!f.count("shapes")) throw bad_shapes();
    const json all = parse_stored_json(f["shapes"], "Redis metadata " + where + ": shapes");
    if (!all.is_array()) throw bad_shapes();
    for (const auto& one : all) {
      info.shapes.push_back(parse_sizes(one.dump(), "Redis metadata " + where + ": shapes"));
      check_inner(where, info.shapes.back());
    }
    if (static_cast<int64_t>(info.shapes.size()) != count)
      throw FormatError("Redis metadata " + where + ": 'shapes' has " +
                        std::to_string(info.shapes.size()) + " entries for " +
                        std::to_string(count) + " elements");
    const std::string ik = "'" + idx_key(p) + "'";
    const std::string_view table = idx.is_text() ? idx.text(ik) : std::string_view();
    if (!idx.is_text() || table.size() != static_cast<std::size_t>(count + 1) * sizeof(int64_t))
      throw FormatError("Redis store: offset table " + ik + " is missing or not " +
                        std::to_string(count + 1) + " int64 offsets");
    info.offsets.resize(static_cast<std::size_t>(count) + 1);
    // Little-endian hosts (docs/formats.md, "Byte order").
    std::memcpy(info.offsets.data(), table.data(), table.size());
    // Each offset is the sum of the sizes before it, computed without
    // overflow (the stored values may be anything).
    int64_t expected = 0;
    for (int64_t i = 0; i <= count; ++i) {
      if (info.offsets[i] != expected)
        throw FormatError("Redis store: offset table " + ik + " disagrees with the shape " +
                          show(info.shapes[i > 0 ? i - 1 : 0]) + " of element " +
                          std::to_string(i > 0 ? i - 1 : 0));
      if (i == count) break;
      const int64_t n = checked_nbytes(info.shapes[i], info.dtype, "Redis metadata " + where);
      if (__builtin_add_overflow(expected, n, &expected))
        throw FormatError("Redis metadata " + where + ": the elements hold more than 2^63 bytes");
    }
    return info;
  }

  /// FormatError unless an element's leaf `shape` starts with the elements'
  /// batch size.
  void check_inner(const std::string& where, const std::vector<int64_t>& shape) const {
    if (shape.size() < inner.size() || !std::equal(inner.begin(), inner.end(), shape.begin()))
      throw FormatError("Redis metadata " + where + ": element shape " + show(shape) +
                        " does not start with the elements' batch size " + show(inner));
  }

  /// Whether a homogeneous leaf of stored `shape` and `layout` field holds
  /// the stacked tensor in batch order (Python's "batch" layout) rather than
  /// element after element ("stack"). Python's rule: the two are the same
  /// when the stack dim is 0; else the shape decides when it fits only one
  /// of them, and the field when it fits both. A leaf without the field
  /// whose shape fits both (written before the field existed) is read
  /// element after element, as from_lazy_stack and this library wrote it.
  bool batch_first(const std::vector<int64_t>& shape, const std::string& layout) const {
    if (stack_dim == 0 || shape.size() < batch.size()) return false;
    const std::vector<int64_t> prefix(shape.begin(),
                                      shape.begin() + static_cast<std::ptrdiff_t>(batch.size()));
    const bool as_stack = prefix == with_dim(inner, 0, count);
    const bool as_batch = prefix == batch;
    if (as_stack != as_batch) return as_batch;
    return as_batch && layout == "batch";
  }

  /// Re-reads the leaf paths and their metadata (two round trips).
  void load() {
    std::vector<std::string> paths = leaf_paths(conn, key("__keys__"));
    Batch b;
    for (const auto& p : paths) {
      b.add({"HGETALL", b.own(meta_key(p))});
      b.add({"GET", b.own(idx_key(p))});
    }
    auto r = conn.send(b, "reading the metadata of " + name());
    std::map<std::string, KeyInfo> fresh;
    for (std::size_t i = 0; i < paths.size(); ++i)
      fresh[paths[i]] = parse(paths[i], r[2 * i], r[2 * i + 1]);
    keys = std::move(fresh);
    loaded = true;
  }
  /// Whether the cached metadata still gives leaf `p` this dtype and these
  /// bytes (used after load(): was the leaf replaced?).
  bool same_bytes(const std::string& p, at::ScalarType dtype, int64_t bytes) const {
    const auto it = keys.find(p);
    return it != keys.end() && it->second.dtype == dtype && it->second.total(count) == bytes;
  }
  void ensure_loaded() {
    if (!loaded) load();
  }
  const KeyInfo& info(const std::string& p) const {
    auto it = keys.find(p);
    if (it == keys.end()) throw KeyError(name() + ": no leaf '" + p + "'");
    return it->second;
  }
  bool has_level(const std::string& level) const {
    auto it = keys.lower_bound(level);
    return (it != keys.end() && it->first.compare(0, level.size(), level) == 0) ||
           empty_levels.count(level);
  }
  std::vector<int64_t> stacked_shape(const KeyInfo& k) const {
    return with_dim(k.first, stack_dim, count);
  }

  Connection conn;
  storage::Redis options;
  std::string base;
  std::recursive_mutex mu;
  int64_t count = 0;
  int64_t stack_dim = 0;
  std::vector<int64_t> inner;
  std::vector<int64_t> batch;  // inner with count at stack_dim
  std::optional<at::Device> device;
  bool loaded = false;
  std::map<std::string, KeyInfo> keys;  // sorted, as Python lists them
  std::set<std::string> empty_levels;   // "a.b.": known to this process only
};

namespace {

// The bytes of some elements of one leaf, read in one pipeline with others.
struct Fetch {
  std::string path;
  const KeyInfo* info = nullptr;
  std::vector<int64_t> elements;  // in the order wanted (repeats allowed)
  std::string bytes;              // filled: the elements' bytes in that order
};

// Byte runs (offset, length) of `elements`, adjacent ones merged.
ByteRuns runs_of(const KeyInfo& k, const std::vector<int64_t>& elements) {
  ByteRuns out;
  for (int64_t e : elements)
    k.for_ranges(e, [&](int64_t off, int64_t len) { add_run(out, off, len); });
  return out;
}

// For send_checked: reads the metadata again and says whether it still
// gives each of `paths` the dtype and bytes it gave before.
bool reload_unchanged(LazyStackState& s, const std::vector<std::string>& paths) {
  std::vector<std::pair<at::ScalarType, int64_t>> before;
  for (const auto& p : paths) {
    const auto it = s.keys.find(p);
    before.emplace_back(it == s.keys.end() ? at::kFloat : it->second.dtype,
                        it == s.keys.end() ? -1 : it->second.total(s.count));
  }
  s.load();
  for (std::size_t i = 0; i < paths.size(); ++i)
    if (!s.same_bytes(paths[i], before[i].first, before[i].second)) return false;
  return true;
}

// One round trip: per leaf a STRLEN (its size, checked against the
// metadata) and a GETRANGE per run of elements.
// With `count_keys`, also SCARD __keys__ in the same round trip: false when
// the server holds another number of leaves than the cache (another process
// added or removed one), so that the caller reloads and asks again.
bool fetch(LazyStackState& s, std::vector<Fetch>& fetches, bool count_keys = false) {
  Batch b;
  if (count_keys) b.add({"SCARD", b.own(s.key("__keys__"))});
  CheckedReads reads("Redis store");
  for (auto& f : fetches)
    reads.leaf(b, b.own(s.data_key(f.path)), f.info->total(s.count), runs_of(*f.info, f.elements));
  auto replies = s.conn.send(b, "reading elements of " + s.name(), s.options.transaction);
  if (count_keys && replies[0].integer(s.key("__keys__")) != static_cast<long long>(s.keys.size()))
    return false;
  for (std::size_t i = 0; i < fetches.size(); ++i) {
    auto& f = fetches[i];
    if (reads.empty(i)) continue;
    const auto conflict = [&](const std::string& message) {
      const at::ScalarType dtype = f.info->dtype;
      const int64_t want = f.info->total(s.count);
      s.load();  // replaced or removed by another process: refresh the cache
      throw_size_mismatch(message, s.same_bytes(f.path, dtype, want));
    };
    if (auto message = reads.size_mismatch(i, replies)) conflict(*message);
    f.bytes.resize(static_cast<std::size_t>(reads.bytes(i)));
    if (auto message = reads.copy(i, replies, f.bytes.data())) conflict(*message);
  }
  return true;
}

// The fetched elements of one leaf as one tensor [E, *shape]; ShapeError
// naming the key when they differ in shape.
at::Tensor stacked(const LazyStackState& s, const Fetch& f) {
  const KeyInfo& k = *f.info;
  std::vector<int64_t> shape = f.elements.empty() ? k.first : k.shape_of(f.elements[0]);
  for (int64_t e : f.elements)
    if (k.shape_of(e) != shape) {
      std::string list;
      for (int64_t x : f.elements) list += (list.empty() ? "" : ", ") + show(k.shape_of(x));
      throw ShapeError("LazyStackedTensorDictStore " + s.options.td_id + ": the entry '" + f.path +
                       "' has shapes " + list +
                       " in the selected elements; read them with td::redis::elements(), "
                       "element() or to_lazy_stack()");
    }
  shape.insert(shape.begin(), static_cast<int64_t>(f.elements.size()));
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(k.dtype));
  if (!f.bytes.empty()) std::memcpy(t.data_ptr(), f.bytes.data(), f.bytes.size());
  return t;
}

// One tensor per fetched element.
std::vector<at::Tensor> split(const Fetch& f) {
  std::vector<at::Tensor> out;
  std::size_t pos = 0;
  for (int64_t e : f.elements) {
    at::Tensor t = at::empty(f.info->shape_of(e), at::TensorOptions().dtype(f.info->dtype));
    const auto n = static_cast<std::size_t>(f.info->length(e));
    if (n > 0) std::memcpy(t.data_ptr(), f.bytes.data() + pos, n);
    pos += n;
    out.push_back(std::move(t));
  }
  return out;
}

// Adds the SETRANGEs writing `value` ([E, *element shape], the leaf's dtype)
// into `elements`. ShapeError naming the key when an element's shape differs
// (an element's size cannot change: heterogeneous offsets are fixed).
// The ranges go to `writes` (a CheckedWrite script when it is checked).
void add_writes(const LazyStackState& s, Batch& b, const std::string& p, const KeyInfo& k,
                const std::vector<int64_t>& elements, const at::Tensor& value,
                RangeWrites& writes) {
  // The batch refers to the value's bytes, which must outlive it: a value
  // that is not contiguous (an expanded scalar) is copied into the batch, not
  // into a tensor that would be freed before the batch is sent.
  const auto vshape = value.sizes().slice(1).vec();
  for (int64_t e : elements)
    if (k.shape_of(e) != vshape)
      throw ShapeError("LazyStackedTensorDictStore " + s.options.td_id + ": element " +
                       std::to_string(e) + " of '" + p + "' has shape " + show(k.shape_of(e)) +
                       ", the value written has " + show(vshape) +
                       " (the size of a stored element cannot change)");
  const char* data = nullptr;
  if (value.is_contiguous()) {
    data = static_cast<const char*>(value.data_ptr());
  } else {
    const at::Tensor copy = value.contiguous();
    data = b.own(std::string(static_cast<const char*>(copy.data_ptr()), copy.nbytes())).data();
  }
  // Consecutive elements (in value order) that are adjacent on the server go
  // in one SETRANGE.
  writes.key(b, b.own(s.data_key(p)), k.total(s.count));
  writes.runs(b, runs_of(k, elements), data);
}

// Commands creating a homogeneous leaf of `element` shape, zero-filled by
// the server (SETRANGE at its last byte: no zeros sent).
void add_stacked_allocation(const LazyStackState& s, Batch& b, const std::string& p,
                            const KeyInfo& k) {
  b.add({"DEL", b.own(s.data_key(p)), b.own(s.idx_key(p)), b.own(s.meta_key(p))});
  add_zeroed(b, b.own(s.data_key(p)), k.total(s.count));
  b.add({"HSET", b.own(s.meta_key(p)), "shape", b.own(json_list(with_dim(k.first, 0, s.count))),
         "dtype", b.own(dtype_to_string(k.dtype)), "homogeneous", "1", "layout", "stack"});
  b.add({"SADD", b.own(s.key("__keys__")), b.own(p)});
}

int64_t wrap(const LazyStackState& s, int64_t i) {
  const int64_t j = i < 0 ? i + s.count : i;
  if (j < 0 || j >= s.count)
    throw IndexError("index " + std::to_string(i) + " is out of range for the " +
                     std::to_string(s.count) + " elements of " + s.name());
  return j;
}

std::vector<int64_t> all_elements(const LazyStackState& s) {
  std::vector<int64_t> out(static_cast<std::size_t>(s.count));
  for (int64_t i = 0; i < s.count; ++i) out[static_cast<std::size_t>(i)] = i;
  return out;
}

// How a RowSelection maps onto elements. `whole`: the selection is a list of
// whole elements (stack dim 0, Rows or a Box on dim 0 only); `local`: the
// indices applied to the fetched [E, ...] tensor afterwards.
struct ElementPlan {
  std::vector<int64_t> elements;
  bool by_element = false;  // false: every element, rows applied to the stacked leaf
  bool whole = false;
  std::vector<at::indexing::TensorIndex> local;
  std::vector<int64_t> rows_shape;  // Rows: the leading dims of the result
};

ElementPlan plan_of(const LazyStackState& s, const RowSelection& rows) {
  using at::indexing::Slice;
  ElementPlan plan;
  if (s.stack_dim == 0 && rows.kind() == RowSelection::Kind::Rows) {
    at::Tensor r = rows.rows().to(at::kLong).contiguous();
    plan.elements.assign(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
    plan.rows_shape = r.sizes().vec();
    plan.by_element = plan.whole = true;
    return plan;
  }
  if (s.stack_dim == 0 && rows.kind() == RowSelection::Kind::Box) {
    const auto ranges = rows.ranges();
    const RowRange& r0 = ranges[0];
    for (int64_t i = r0.start; i < r0.stop; i += r0.step) plan.elements.push_back(i);
    plan.by_element = true;
    plan.whole = ranges.size() == 1;
    plan.local.emplace_back(r0.drop ? at::indexing::TensorIndex(0)
                                    : at::indexing::TensorIndex(Slice()));
    for (std::size_t d = 1; d < ranges.size(); ++d) {
      const auto& r = ranges[d];
      plan.local.emplace_back(r.drop ? at::indexing::TensorIndex(r.start)
                                     : at::indexing::TensorIndex(Slice(r.start, r.stop, r.step)));
    }
    return plan;
  }
  plan.elements = all_elements(s);
  return plan;
}

/// The key path of a store path ("n.note" is ('n', 'note')).
NestedKey key_of(const std::string& relative) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t dot; (dot = relative.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(relative.substr(start, dot - start));
  parts.push_back(relative.substr(start));
  return NestedKey(parts);
}

}  // namespace

class LazyStackStoreNode final : public StoreNode {
 public:
  LazyStackStoreNode(std::shared_ptr<LazyStackState> s, std::string level)
      : s_(std::move(s)), level_(std::move(level)) {}

  // What the generic td::redis functions (td_id, clear, round_trips...) need.
  Connection& client() const override { return s_->conn; }
  std::recursive_mutex& mutex() const override { return s_->mu; }
  const std::string& id() const override { return s_->options.td_id; }
  std::string server_key(const std::string& suffix) const override { return s_->key(suffix); }
  void clear_all() override { s_->clear(); }

  LazyStackState& state() const { return *s_; }
  const std::string& level() const { return level_; }
  std::string path(std::string_view key) const { return level_ + std::string(key); }
  bool owns(const Node* n) const override {
    auto* o = dynamic_cast<const LazyStackStoreNode*>(n);
    return o != nullptr && o->s_ == s_;
  }

  std::string type_name() const override { return "LazyStackedTensorDictStore"; }
  at::IntArrayRef batch_size() const override { return s_->batch; }
  void set_batch_size(std::vector<int64_t>) override {
    throw ShapeError(
        "Modifying the batch size of a LazyStackedTensorDictStore is not permitted (its "
        "elements' batch size is stored); read it with to_tensordict() first");
  }
  std::optional<at::Device> device() const override { return s_->device; }
  void set_device(std::optional<at::Device> device) override {
    std::lock_guard lock(s_->mu);
    if (device && !device->is_cpu())
      throw DeviceError(s_->name() + ": only the CPU device (or none) is supported, got " +
                        device->str());
    s_->conn.call({"SET", s_->key("__device__"), device ? device->str() : std::string()},
                  "writing the device");
    s_->device = device;
  }

  std::vector<std::string> keys() const override {
    std::lock_guard lock(s_->mu);
    s_->ensure_loaded();
    std::set<std::string> parts;  // sorted, as Python's keys view
    auto take = [&](const std::string& p) {
      if (p.compare(0, level_.size(), level_) != 0 || p.size() == level_.size()) return;
      std::string part = p.substr(level_.size());
      parts.insert(part.substr(0, part.find('.')));
    };
    for (const auto& [p, info] : s_->keys) take(p);
    for (const auto& l : s_->empty_levels) take(l.substr(0, l.size() - 1));
    return {parts.begin(), parts.end()};
  }
  std::size_t size() const override { return keys().size(); }

  std::optional<EntryKind> kind(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    s_->ensure_loaded();
    if (auto k = kind_cached(key)) return k;
    s_->load();  // a miss: another process may have added it
    return kind_cached(key);
  }
  std::optional<TensorMeta> tensor_meta(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    if (kind(key) != EntryKind::Tensor) return std::nullopt;
    const KeyInfo& k = s_->info(path(key));
    return TensorMeta{s_->stacked_shape(k), k.dtype, at::kCPU};
  }

  std::optional<Value> find(std::string_view key) const override {
    std::lock_guard lock(s_->mu);
    auto k = kind(key);
    if (!k) return std::nullopt;
    if (*k == EntryKind::TensorDict)
      return Value(nested_level(std::make_shared<LazyStackStoreNode>(s_, path(key) + ".")));
    return Value(read_at(key, RowSelection::all(s_->batch)));
  }

  void read_leaves(const RowSelection& rows, std::span<LeafRead> leaves) const override {
    std::lock_guard lock(s_->mu);
    const std::vector<LeafRead*> mine =
        own(leaves, [&](LeafRead& l) { Node::read_leaves(rows, std::span<LeafRead>(&l, 1)); });
    if (mine.empty()) return;
    const ElementPlan plan = plan_of(*s_, rows);
    std::vector<Fetch> fetches;
    for (auto* l : mine) {
      const std::string p = static_cast<const LazyStackStoreNode*>(l->node)->path(l->key());
      fetches.push_back(Fetch{p, &s_->info(p), plan.elements, {}});
    }
    fetch(*s_, fetches);
    for (std::size_t i = 0; i < mine.size(); ++i)
      mine[i]->out = shape_result(fetches[i], plan, rows);
  }

  void write(std::string_view key, Value value) override {
    std::lock_guard lock(s_->mu);
    s_->ensure_loaded();
    const std::string p = path(key);
    Batch b;
    std::vector<at::Tensor> keep;
    std::vector<std::pair<std::string, KeyInfo>> added;
    // Replacing a nested level or a leaf: drop what was there.
    std::vector<std::string> old;
    for (const auto& [lp, info] : s_->keys)
      if (lp == p || lp.compare(0, p.size() + 1, p + ".") == 0) old.push_back(lp);
    for (const auto& lp : old) add_removal(b, lp);
    add_full(b, p, value, keep, added);
    // Always MULTI/EXEC: a write the server refuses (out of memory) leaves
    // the old value as it was.
    s_->conn.send(b, "writing '" + p + "'", /*transaction=*/true);
    for (const auto& lp : old) s_->keys.erase(lp);
    for (auto& [ap, info] : added) s_->keys[ap] = std::move(info);
  }

  void write_leaves_(const RowSelection& rows, std::span<const LeafWrite> leaves) override {
    std::lock_guard lock(s_->mu);
    const std::vector<const LeafWrite*> mine = own(leaves, [&](const LeafWrite& l) {
      Node::write_leaves_(rows, std::span<const LeafWrite>(&l, 1));
    });
    if (mine.empty()) return;
    const ElementPlan plan = plan_of(*s_, rows);
    std::vector<std::string> paths;
    std::vector<at::Tensor> values;  // [E, *element] per leaf
    for (const auto* l : mine) {
      paths.push_back(static_cast<const LazyStackStoreNode*>(l->node)->path(l->key()));
      const KeyInfo& k = s_->info(paths.back());
      values.push_back(l->value.detach().to(at::kCPU).to(k.dtype));
    }
    if (plan.by_element && plan.whole) {
      // Whole elements: the value's rows go straight to their slots.
      for (std::size_t i = 0; i < mine.size(); ++i) {
        at::Tensor& v = values[i];
        if (!plan.local.empty() && plan.local[0].is_integer()) v = v.unsqueeze(0);
        const auto lead = static_cast<int64_t>(plan.rows_shape.size());
        if (lead > 1) v = v.flatten(0, lead - 1);
        if (lead == 0 && plan.local.empty()) v = v.unsqueeze(0);
        v = v.contiguous();  // add_writes sends these bytes
      }
    } else {
      // Parts of elements: read them, patch here, write them back (two round
      // trips).
      std::vector<Fetch> fetches;
      fetches.reserve(paths.size());
      for (const auto& p : paths) fetches.push_back(Fetch{p, &s_->info(p), plan.elements, {}});
      fetch(*s_, fetches);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        at::Tensor current = stacked(*s_, fetches[i]);  // [E, *element]
        if (plan.by_element) {
          current.index_put_(plan.local, values[i]);
        } else {
          at::Tensor full = current.movedim(0, s_->stack_dim);
          rows.put(full, values[i]);
          current = full.movedim(s_->stack_dim, 0);
        }
        values[i] = current.contiguous();
      }
    }
    Batch b;
    // With a transaction, one CheckedWrite: every leaf or none.
    RangeWrites writes(s_->options.transaction);
    for (std::size_t i = 0; i < mine.size(); ++i)
      add_writes(*s_, b, paths[i], s_->info(paths[i]), plan.elements, values[i], writes);
    writes.finish(b);
    send_checked(s_->conn, b, "writing elements of " + std::to_string(mine.size()) + " leaves",
                 [&] { return reload_unchanged(*s_, paths); });
  }

  void create_leaves(std::span<const LeafCreate> leaves) override {
    std::lock_guard lock(s_->mu);
    Batch b;
    std::vector<std::pair<std::string, KeyInfo>> added;
    for (const auto& l : leaves) {
      if (!owns(l.node)) {
        Node::create_leaves(std::span<const LeafCreate>(&l, 1));
        continue;
      }
      const std::string p = static_cast<const LazyStackStoreNode*>(l.node)->path(l.key());
      KeyInfo k;
      k.dtype = l.options.dtype().toScalarType();
      k.first = l.shape;
      k.first.erase(k.first.begin() + s_->stack_dim);
      add_stacked_allocation(*s_, b, p, k);
      added.emplace_back(p, std::move(k));
    }
    try {
      s_->conn.send(b, "allocating " + std::to_string(added.size()) + " leaves",
                    s_->options.transaction);
    } catch (const StorageError&) {
      // Remove the leaves the server did allocate (it does not roll back).
      Batch undo;
      for (const auto& [p, k] : added) add_removal(undo, p);
      discard_errors([&] { s_->conn.send(undo, "removing leaves not allocated"); });
      throw;
    }
    for (auto& [p, k] : added) s_->keys[p] = std::move(k);
  }

  TensorDictBase create_nested(std::string_view key, at::IntArrayRef,
                               std::optional<at::Device>) override {
    std::lock_guard lock(s_->mu);
    const std::string level = path(key) + ".";
    s_->empty_levels.insert(level);
    return TensorDictBase(std::make_shared<LazyStackStoreNode>(s_, level));
  }

  void remove(std::string_view key) override {
    std::lock_guard lock(s_->mu);
    const std::string p = path(key);
    std::vector<std::string> gone;
    for (const auto& [lp, info] : s_->keys)
      if (lp == p || lp.compare(0, p.size() + 1, p + ".") == 0) gone.push_back(lp);
    Batch b;
    for (const auto& lp : gone) add_removal(b, lp);
    s_->conn.send(b, "removing '" + p + "'", s_->options.transaction);
    for (const auto& lp : gone) s_->keys.erase(lp);
    for (auto it = s_->empty_levels.begin(); it != s_->empty_levels.end();)
      it = it->compare(0, p.size() + 1, p + ".") == 0 ? s_->empty_levels.erase(it) : std::next(it);
  }

  std::shared_ptr<LazyStackState> state_ptr() const { return s_; }

 private:
  std::optional<EntryKind> kind_cached(std::string_view key) const {
    const std::string p = path(key);
    if (s_->keys.count(p)) return EntryKind::Tensor;
    if (s_->has_level(p + ".")) return EntryKind::TensorDict;
    return std::nullopt;
  }

  void add_removal(Batch& b, const std::string& lp) const {
    b.add({"DEL", b.own(s_->data_key(lp)), b.own(s_->idx_key(lp)), b.own(s_->meta_key(lp))});
    b.add({"SREM", b.own(s_->key("__keys__")), b.own(lp)});
  }

  // A whole stacked value at `p` (a tensor of the stack's batch size, or a
  // tensordict of them): element-major bytes, homogeneous.
  void add_full(Batch& b, const std::string& p, const Value& value, std::vector<at::Tensor>& keep,
                std::vector<std::pair<std::string, KeyInfo>>& added) const {
    if (value.is_tensordict()) {
      for (const auto& [k, v] : value.tensordict().items())
        add_full(b, p + "." + k.back(), v, keep, added);
      return;
    }
    if (!value.is_tensor())
      throw TypeError(s_->name() + ": entry " + key_of(p).repr() + " is a " +
                      to_string(value.kind()) +
                      "; a LazyStackedTensorDictStore stores tensors only");
    at::Tensor t = value.tensor().detach().to(at::kCPU).movedim(s_->stack_dim, 0).contiguous();
    keep.push_back(t);
    KeyInfo k;
    k.dtype = t.scalar_type();
    k.first = t.sizes().slice(1).vec();
    add_stacked_allocation(*s_, b, p, k);
    if (t.nbytes() > 0)
      b.add({"SETRANGE", b.own(s_->data_key(p)), "0",
             std::string_view(static_cast<const char*>(t.data_ptr()), t.nbytes())});
    added.emplace_back(p, std::move(k));
  }

  // The fetched [E, *element] bytes of one leaf shaped as the selection asks.
  at::Tensor shape_result(const Fetch& f, const ElementPlan& plan, const RowSelection& rows) const {
    at::Tensor t = stacked(*s_, f);
    if (plan.by_element) {
      if (!plan.rows_shape.empty()) {
        std::vector<int64_t> shape = plan.rows_shape;
        const auto rest = t.sizes().slice(1);
        shape.insert(shape.end(), rest.begin(), rest.end());
        return t.view(shape);
      }
      return t.index(plan.local).clone();
    }
    t = t.movedim(0, s_->stack_dim);
    return rows.is_all() ? t.contiguous() : rows.apply(t).clone();
  }

  std::shared_ptr<LazyStackState> s_;
  std::string level_;  // "" for the root, "a.b." for nested levels
};

namespace {

const LazyStackStoreNode& node_of(const TensorDictBase& td) {
  auto* n = td.defined() ? dynamic_cast<const LazyStackStoreNode*>(&td.node()) : nullptr;
  if (n == nullptr) throw TypeError("not a LazyStackedTensorDictStore (a Redis lazy-stack store)");
  return *n;
}

std::shared_ptr<LazyStackState> open_state(const storage::Redis& options) {
  if (options.prefix.empty()) throw ValueError("Redis store: the key prefix must not be empty");
  return std::make_shared<LazyStackState>(options);
}

// The leaf paths below `level` ("" or "a.b.").
std::vector<std::string> paths_under(const LazyStackState& s, const std::string& level) {
  std::vector<std::string> out;
  for (const auto& [p, info] : s.keys)
    if (p.compare(0, level.size(), level) == 0) out.push_back(p);
  return out;
}

}  // namespace
}  // namespace detail::redis

namespace redis {
using detail::redis::Batch;
using detail::redis::Fetch;
using detail::redis::KeyInfo;
using detail::redis::LazyStackState;
using detail::redis::LazyStackStoreNode;

LazyStackedTensorDictStore from_lazy_stack(const LazyStackedTensorDict& stack,
                                           const storage::Redis& storage) {
  const auto& members = stack.tensordicts();
  if (members.empty()) throw ValueError("redis::from_lazy_stack: the lazy stack has no member");
  const std::vector<int64_t> inner = members[0].batch_size().vec();
  for (std::size_t m = 1; m < members.size(); ++m)
    if (members[m].batch_size().vec() != inner)
      throw ShapeError("redis::from_lazy_stack: member " + std::to_string(m) + " has batch size " +
                       detail::redis::json_list(members[m].batch_size()) + ", member 0 has " +
                       detail::redis::json_list(inner) +
                       "; a LazyStackedTensorDictStore holds elements of one batch size");
  auto dev = stack.device();
  if (dev && !dev->is_cpu())
    throw DeviceError("redis::from_lazy_stack: only the CPU device (or none) is supported, got " +
                      dev->str());
  // The leaves of every member, checked before anything is sent.
  std::vector<std::vector<std::pair<NestedKey, at::Tensor>>> leaves(members.size());
  for (std::size_t m = 0; m < members.size(); ++m)
    for (auto& [key, value] : members[m].items(
             KeysOptions{.include_nested = true, .leaves_only = true, .non_tensor_leaves = true})) {
      if (value.is_tensordict()) continue;  // an empty nested level
      if (!value.is_tensor())
        throw TypeError("redis::from_lazy_stack: entry " + key.repr() + " of member " +
                        std::to_string(m) + " is a " + to_string(value.kind()) +
                        "; a LazyStackedTensorDictStore stores tensors only (exclude() it first)");
      leaves[m].emplace_back(key, value.tensor().detach().to(at::kCPU).contiguous());
    }
  std::map<NestedKey, std::size_t> index;
  for (std::size_t j = 0; j < leaves[0].size(); ++j) index[leaves[0][j].first] = j;
  for (std::size_t m = 1; m < members.size(); ++m) {
    std::set<NestedKey> seen;
    for (const auto& [key, t] : leaves[m]) {
      if (!index.count(key))
        throw KeyError("redis::from_lazy_stack: entry " + key.repr() + " is in member " +
                       std::to_string(m) +
                       " but not in member 0; every element of a "
                       "LazyStackedTensorDictStore holds the same keys");
      seen.insert(key);
    }
    for (const auto& [key, j] : index)
      if (!seen.count(key))
        throw KeyError("redis::from_lazy_stack: entry " + key.repr() +
                       " is in member 0 but not in member " + std::to_string(m) +
                       "; every element of a LazyStackedTensorDictStore holds the same keys");
  }
  auto s = detail::redis::open_state(storage);
  std::lock_guard lock(s->mu);
  s->count = static_cast<int64_t>(members.size());
  s->stack_dim = stack.stack_dim();
  s->inner = inner;
  s->batch = detail::redis::with_dim(inner, s->stack_dim, s->count);
  s->device = dev;
  Batch b;
  b.add({"SET", b.own(s->key("__type__")), detail::redis::kLazyStackType});
  b.add({"SET", b.own(s->key("__count__")), b.own(std::to_string(s->count))});
  b.add({"SET", b.own(s->key("__stack_dim__")), b.own(std::to_string(s->stack_dim))});
  b.add({"SET", b.own(s->key("__inner_batch_size__")), b.own(detail::redis::json_list(inner))});
  b.add({"SET", b.own(s->key("__device__")), b.own(dev ? dev->str() : std::string())});
  std::map<std::string, KeyInfo> infos;
  for (const auto& [key, j] : index) {
    const std::string p = key.join(".");
    KeyInfo k;
    k.dtype = leaves[0][j].second.scalar_type();
    k.first = leaves[0][j].second.sizes().vec();
    std::vector<const at::Tensor*> ts;
    for (std::size_t m = 0; m < members.size(); ++m) {
      const at::Tensor* t = nullptr;
      for (const auto& [mk, mt] : leaves[m])
        if (mk == key) t = &mt;
      if (t->scalar_type() != k.dtype)
        throw TypeError("redis::from_lazy_stack: entry " + key.repr() + " is " +
                        dtype_to_string(k.dtype) + " in member 0 and " +
                        dtype_to_string(t->scalar_type()) + " in member " + std::to_string(m) +
                        "; the elements of a leaf share one dtype");
      if (t->sizes().vec() != k.first) k.homogeneous = false;
      ts.push_back(t);
    }
    if (!k.homogeneous) {
      k.offsets.push_back(0);
      for (const auto* t : ts) {
        k.shapes.push_back(t->sizes().vec());
        k.offsets.push_back(k.offsets.back() + static_cast<int64_t>(t->nbytes()));
      }
    }
    const std::string dk = s->data_key(p);
    b.add({"DEL", b.own(dk), b.own(s->idx_key(p)), b.own(s->meta_key(p))});
    for (int64_t c = 0; c < s->count; c += detail::redis::kUploadChunk) {
      const int64_t end = std::min(s->count, c + detail::redis::kUploadChunk);
      std::string chunk;
      chunk.reserve(static_cast<std::size_t>(k.offset(end) - k.offset(c)));
      for (int64_t m = c; m < end; ++m)
        chunk.append(static_cast<const char*>(ts[m]->data_ptr()), ts[m]->nbytes());
      if (!chunk.empty())
        b.add({"SETRANGE", b.own(dk), b.own(std::to_string(k.offset(c))), b.own(std::move(chunk))});
    }
    const std::string shape =
        detail::redis::json_list(detail::redis::with_dim(k.first, 0, s->count));
    if (k.homogeneous) {
      b.add({"HSET", b.own(s->meta_key(p)), "shape", b.own(shape), "dtype",
             b.own(dtype_to_string(k.dtype)), "homogeneous", "1", "layout", "stack"});
    } else {
      std::string table(k.offsets.size() * sizeof(int64_t), '\0');
      std::memcpy(table.data(), k.offsets.data(), table.size());  // "<q": little-endian hosts
      std::string shapes = "[";
      for (std::size_t m = 0; m < k.shapes.size(); ++m)
        shapes += (m ? ", " : "") + detail::redis::json_list(k.shapes[m]);
      shapes += "]";
      b.add({"SET", b.own(s->idx_key(p)), b.own(std::move(table))});
      b.add({"HSET", b.own(s->meta_key(p)), "shape", b.own(shape), "dtype",
             b.own(dtype_to_string(k.dtype)), "homogeneous", "0", "shapes", b.own(shapes), "layout",
             "stack"});
    }
    b.add({"SADD", b.own(s->key("__keys__")), b.own(p)});
    infos[p] = std::move(k);
  }
  s->conn.send(b, "uploading " + s->name(), s->options.transaction);
  s->keys = std::move(infos);
  s->loaded = true;
  return LazyStackedTensorDictStore(std::make_shared<LazyStackStoreNode>(s, ""));
}

LazyStackedTensorDictStore from_lazy_stack_store(const storage::Redis& storage) {
  if (storage.td_id.empty()) throw ValueError("redis::from_lazy_stack_store: td_id is required");
  auto s = detail::redis::open_state(storage);
  std::lock_guard lock(s->mu);
  Batch b;
  for (const char* k :
       {"__type__", "__count__", "__stack_dim__", "__inner_batch_size__", "__device__"})
    b.add({"GET", b.own(s->key(k))});
  auto r = s->conn.send(b, "attaching to " + s->name());
  if (r[0].is_nil())
    throw KeyError("no LazyStackedTensorDictStore with td_id '" + storage.td_id + "' (prefix '" +
                   storage.prefix + "') at " + s->conn.where() + ": key '" + s->key("__type__") +
                   "' is missing");
  auto str = [&](std::size_t i, const char* k) -> std::string {
    if (r[i].is_nil()) throw FormatError(s->name() + ": key '" + s->key(k) + "' is missing");
    return std::string(r[i].text(s->key(k)));
  };
  const std::string type = str(0, "__type__");
  if (type != detail::redis::kLazyStackType)
    throw FormatError(s->name() + ": '" + s->key("__type__") + "' is '" + type +
                      "', expected 'lazy_stack'");
  auto integer = [&](std::size_t i, const char* k) {
    const std::string v = str(i, k);
    try {
      std::size_t used = 0;
      const int64_t n = std::stoll(v, &used);
      if (used != v.size() || n < 0) throw std::invalid_argument(v);
      return n;
    } catch (const std::exception&) {
      throw FormatError(s->name() + ": '" + s->key(k) + "' is '" + v +
                        "', not a non-negative decimal integer");
    }
  };
  s->count = integer(1, "__count__");
  if (s->count > detail::redis::kMaxElements)
    throw FormatError(s->name() + ": '" + s->key("__count__") + "' is " + std::to_string(s->count) +
                      " elements, more than the " + std::to_string(detail::redis::kMaxElements) +
                      " a lazy stack may hold");
  s->stack_dim = integer(2, "__stack_dim__");
  const std::string ibs = str(3, "__inner_batch_size__");
  s->inner =
      detail::redis::parse_sizes(ibs, s->name() + ": '" + s->key("__inner_batch_size__") + "'");
  if (s->stack_dim > static_cast<int64_t>(s->inner.size()))
    throw FormatError(s->name() + ": stack dim " + std::to_string(s->stack_dim) +
                      " is out of range for elements of batch size " + ibs);
  s->batch = detail::redis::with_dim(s->inner, s->stack_dim, s->count);
  const std::string dev = r[4].is_nil() ? "" : str(4, "__device__");
  s->device = detail::redis::stored_device(dev, "'" + s->key("__device__") + "'");
  s->load();
  return LazyStackedTensorDictStore(std::make_shared<LazyStackStoreNode>(s, ""));
}

bool is_lazy_stack_store(const TensorDictBase& td) {
  return td.defined() && dynamic_cast<const LazyStackStoreNode*>(&td.node()) != nullptr;
}
int64_t count(const TensorDictBase& store) { return detail::redis::node_of(store).state().count; }
int64_t stack_dim(const TensorDictBase& store) {
  return detail::redis::node_of(store).state().stack_dim;
}
std::vector<int64_t> inner_batch_size(const TensorDictBase& store) {
  return detail::redis::node_of(store).state().inner;
}

std::vector<std::vector<int64_t>> element_shapes(const TensorDictBase& store,
                                                 const NestedKey& key) {
  const auto& node = detail::redis::node_of(store);
  auto& s = node.state();
  std::lock_guard lock(s.mu);
  s.ensure_loaded();
  const std::string p = node.level() + key.join(".");
  if (!s.keys.count(p)) s.load();
  const KeyInfo& k = s.info(p);
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < s.count; ++i) out.push_back(k.shape_of(i));
  return out;
}

std::vector<TensorDict> elements(const TensorDictBase& store, const std::vector<int64_t>& indices) {
  const auto& node = detail::redis::node_of(store);
  auto& s = node.state();
  std::lock_guard lock(s.mu);
  s.ensure_loaded();
  std::vector<int64_t> which;
  which.reserve(indices.size());
  for (int64_t i : indices) which.push_back(detail::redis::wrap(s, i));
  std::vector<Fetch> fetches;
  // One round trip; a second (and a reload) only when another process added
  // or removed a leaf since this object last looked.
  for (int attempt = 0;; ++attempt) {
    fetches.clear();
    for (const auto& p : detail::redis::paths_under(s, node.level()))
      fetches.push_back(Fetch{p, &s.info(p), which, {}});
    if (detail::redis::fetch(s, fetches, /*count_keys=*/true) || attempt == 1) break;
    s.load();
  }
  std::vector<TensorDict> out;
  for (std::size_t e = 0; e < which.size(); ++e) out.emplace_back(s.inner, s.device);
  for (const auto& f : fetches) {
    auto parts = detail::redis::split(f);
    const NestedKey key = detail::redis::key_of(f.path.substr(node.level().size()));
    for (std::size_t e = 0; e < which.size(); ++e) out[e].set(key, parts[e]);
  }
  return out;
}

TensorDict element(const TensorDictBase& store, int64_t i) {
  return std::move(elements(store, {i}).front());
}

void set_element(const TensorDictBase& store, int64_t i, const TensorDictBase& value) {
  const auto& node = detail::redis::node_of(store);
  auto& s = node.state();
  std::lock_guard lock(s.mu);
  s.ensure_loaded();
  const int64_t e = detail::redis::wrap(s, i);
  std::map<std::string, at::Tensor> given;
  for (auto& [key, v] : value.items(
           KeysOptions{.include_nested = true, .leaves_only = true, .non_tensor_leaves = true})) {
    if (v.is_tensordict()) continue;
    if (!v.is_tensor())
      throw TypeError(s.name() + ": entry " + key.repr() + " is a " + to_string(v.kind()) +
                      "; a LazyStackedTensorDictStore stores tensors only");
    given[node.level() + key.join(".")] = v.tensor().detach().to(at::kCPU);
  }
  std::string missing;
  for (const auto& p : detail::redis::paths_under(s, node.level()))
    if (!given.count(p))
      missing += (missing.empty() ? "'" : ", '") + p.substr(node.level().size()) + "'";
  if (!missing.empty())
    throw KeyError(s.name() + ": the value for element " + std::to_string(e) + " lacks " + missing +
                   " (an element is written whole)");
  Batch b;
  std::vector<std::pair<std::string, KeyInfo>> added;
  std::vector<at::Tensor> keep;
  // Into existing leaves only (the usual case), with a transaction: one
  // CheckedWrite, every leaf or none. A new leaf is allocated and written
  // in one MULTI/EXEC instead.
  bool adds = false;
  for (const auto& [p, t] : given) adds = adds || !s.keys.count(p);
  const bool checked = s.options.transaction && !adds;
  detail::redis::RangeWrites writes(checked), plain(false);
  for (auto& [p, t] : given) {
    auto it = s.keys.find(p);
    if (it == s.keys.end()) {  // a new leaf: zero in the other elements
      KeyInfo k;
      k.dtype = t.scalar_type();
      k.first = t.sizes().vec();
      detail::redis::add_stacked_allocation(s, b, p, k);
      keep.push_back(t.unsqueeze(0).contiguous());
      detail::redis::add_writes(s, b, p, k, {e}, keep.back(), plain);
      added.emplace_back(p, std::move(k));
      continue;
    }
    keep.push_back(t.to(it->second.dtype).unsqueeze(0).contiguous());
    detail::redis::add_writes(s, b, p, it->second, {e}, keep.back(), checked ? writes : plain);
  }
  writes.finish(b);
  std::vector<std::string> written;
  written.reserve(given.size());
  for (const auto& [p, t] : given) written.push_back(p);
  detail::redis::send_checked(
      s.conn, b, "writing element " + std::to_string(e) + " of " + s.name(),
      [&] { return detail::redis::reload_unchanged(s, written); },
      s.options.transaction && !checked);
  for (auto& [p, k] : added) s.keys[p] = std::move(k);
}

LazyStackedTensorDict to_lazy_stack(const TensorDictBase& store) {
  const auto& s = detail::redis::node_of(store).state();
  std::vector<TensorDictBase> members;
  for (auto& e : elements(store, detail::redis::all_elements(s))) members.push_back(std::move(e));
  return lazy_stack(std::move(members), s.stack_dim);
}

}  // namespace redis
// ---- the handle ------------------------------------------------------------------

LazyStackedTensorDictStore::LazyStackedTensorDictStore(std::shared_ptr<Node> node)
    : TensorDictStore(std::move(node)) {}
bool LazyStackedTensorDictStore::is_node(const Node& node) noexcept {
  return dynamic_cast<const detail::redis::LazyStackStoreNode*>(&node) != nullptr;
}
LazyStackedTensorDictStore LazyStackedTensorDictStore::from_lazy_stack(
    const LazyStackedTensorDict& stack, const storage::Redis& storage) {
  return redis::from_lazy_stack(stack, storage);
}
LazyStackedTensorDictStore LazyStackedTensorDictStore::from_store(const storage::Redis& storage) {
  return redis::from_lazy_stack_store(storage);
}
int64_t LazyStackedTensorDictStore::count() const { return redis::count(*this); }
int64_t LazyStackedTensorDictStore::stack_dim() const { return redis::stack_dim(*this); }
std::vector<int64_t> LazyStackedTensorDictStore::inner_batch_size() const {
  return redis::inner_batch_size(*this);
}
std::vector<std::vector<int64_t>> LazyStackedTensorDictStore::element_shapes(
    const NestedKey& key) const {
  return redis::element_shapes(*this, key);
}
TensorDict LazyStackedTensorDictStore::element(int64_t i) const { return redis::element(*this, i); }
std::vector<TensorDict> LazyStackedTensorDictStore::elements(
    const std::vector<int64_t>& indices) const {
  return redis::elements(*this, indices);
}
void LazyStackedTensorDictStore::set_element(int64_t i, const TensorDictBase& value) const {
  redis::set_element(*this, i, value);
}
LazyStackedTensorDict LazyStackedTensorDictStore::to_lazy_stack() const {
  return redis::to_lazy_stack(*this);
}

}  // namespace tensordict
