// Whole tensordicts over a c10d process group. The wire protocol is described
// in docs/distributed.md ("Protocol"); in short, a point-to-point transfer is
//   receiver -> expectation (8 x int64: its structure's hash, sizes, mode)
//   sender   -> a 64-byte header (status), with the flat buffer behind it (or
//               the header alone, then one message per leaf), [non-tensor JSON]
// where every message fits the receive it lands in; a mismatch makes both
// sides exchange their structures and name the first differing entry.
// Collectives check structures with one allreduce.

#include <tensordict/distributed.h>
#include <tensordict/dtype.h>
#include <tensordict/stack.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace tensordict {
namespace {

// Protocol 3 (2 plus the listening receive, see Listeners). The receiver's
// expectation and the sender's headers have magic numbers of their own, so
// that either side tells an expectation from a header when both call the same
// side (send and send, recv and recv).
constexpr int64_t kMagic = 0x0054'4443'5431'0003;        // "TDCT1": the sender's headers
constexpr int64_t kExpectMagic = 0x0054'4443'5445'0003;  // "TDCTE": the expectation
constexpr int64_t kAlign = 16;
// init_remote formats (header mode field).
constexpr int64_t kInitConsolidated = 0;
constexpr int64_t kInitLayout = 1;
// The header that starts the first message of a send() or init_remote():
// its kind, the length of the message after it (non-tensor JSON, or
// init_remote's structure), the sender's structure and its mode (init_remote:
// its format). The flat buffer, if any, follows in the same message.
// Eager transfers (StructureCheck::Receiver) put the sender's structure
// between the header and the data.
enum : int {
  kHMagic,
  kHKind,
  kHExtraBytes,
  kHHash,
  kHFlatBytes,
  kHLeaves,
  kHMode,
  kHDescBytes,  // an eager header's structure length (see send_eager)
  kHCount = 8
};
constexpr int64_t kHeaderBytes = kHCount * 8;

using json = nlohmann::json;

struct Leaf {
  NestedKey key;
  at::Tensor tensor;  // the sender's data (or the receiver's current value)
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t nbytes = 0;
  int64_t offset = 0;  // in the flat buffer
};

struct NonTensorEntry {
  NestedKey key;
  bool stack = false;
};

std::string shape_string(at::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// One entry of a structure: its key, kind and, for a tensor or a tensordict,
// its dtype and dims.
struct EntryDesc {
  NestedKey key;
  EntryKind kind = EntryKind::Tensor;
  at::ScalarType dtype = at::ScalarType::Undefined;  // a tensor's
  std::vector<int64_t> dims;                         // a tensor's shape, a tensordict's batch size
  int64_t leaf = -1;  // index in Layout::leaves (an index: layouts are moved)

  // How messages name it: "Tensor(dtype=torch.float32, shape=[3, 4])",
  // "TensorDict(batch=[3])", "root batch [3]" (the root, whose key is empty),
  // "NonTensorData", "NonTensorStack". Formatted only for messages: describe()
  // runs on every transfer.
  std::string what() const {
    if (key.empty()) return "root batch " + shape_string(dims);
    switch (kind) {
      case EntryKind::Tensor:
        return "Tensor(dtype=" + dtype_to_string(dtype) + ", shape=" + shape_string(dims) + ")";
      case EntryKind::TensorDict:
        return "TensorDict(batch=" + shape_string(dims) + ")";
      case EntryKind::NonTensor:
        return "NonTensorData";
      case EntryKind::NonTensorStack:
        return "NonTensorStack";
    }
    return "?";
  }
};

// The structure of one tensordict, in sorted key order. The JSON description
// (for messages naming a difference, and init_remote's layout format) is only
// built when needed.
struct Layout {
  std::vector<Leaf> leaves;
  std::vector<NonTensorEntry> non_tensors;
  std::vector<EntryDesc> entries;  // entries[0] is the root
  int64_t hash = 0;
  int64_t flat_bytes = 0;

  // [[key parts, what, {"batch"|"dtype","shape","offset"}], ...]
  json description() const {
    json d = json::array();
    for (const EntryDesc& e : entries) {
      json info = json::object();
      if (e.kind == EntryKind::TensorDict) info = json{{"batch", e.dims}};
      if (e.leaf >= 0)
        info = json{{"dtype", dtype_to_string(e.dtype)},
                    {"shape", e.dims},
                    {"offset", leaves[e.leaf].offset}};
      d.push_back(json::array({e.key.to_vector(), e.what(), std::move(info)}));
    }
    return d;
  }
  std::string text() const { return description().dump(); }
};

// FNV-1a, 64 bits.
class Fnv1a {
 public:
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 1099511628211ULL;
  }
  void text(std::string_view s) {
    value(static_cast<uint32_t>(s.size()));  // length first: "a" "bc" is not "ab" "c"
    bytes(s.data(), s.size());
  }
  template <class T>
  void value(T v) {
    bytes(&v, sizeof v);
  }
  uint64_t get() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ULL;
};

// An entry found by collect(): its "."-joined key (the sort order), key and value.
struct Found {
  std::string joined;
  NestedKey key;
  const Value* value;
};

// Every entry of `node` and below, each level's entries before what they
// hold. Values are looked at in place where the node holds them; storages
// that do not (lazy stacks, memmap, ...) read theirs into `owned`, which
// keeps them for the caller.
void collect(const Node& node, const NestedKey& path, const std::string& joined,
             std::vector<Found>& out, std::deque<Value>& owned) {
  for (const std::string& k : node.keys()) {
    const Value* v = nullptr;
    if (node.holds_values()) {
      v = node.peek(k);
    } else if (auto found = node.find(k)) {
      owned.push_back(std::move(*found));
      v = &owned.back();
    }
    if (v == nullptr) continue;
    out.push_back(
        {joined.empty() ? k : joined + "." + k, path.empty() ? NestedKey(k) : path.child(k), v});
    if (v->kind() == EntryKind::TensorDict) {
      const Found level = out.back();  // a copy: `out` grows below
      collect(v->tensordict().node(), level.key, level.joined, out, owned);
    }
  }
}

// The structure of `td`: its entries sorted by their "."-joined keys (stable:
// the order of keys(sort = true)), its leaves at 16-byte aligned offsets of
// the flat buffer in that order, and a hash of it all. Runs on both sides of
// every transfer, so it copies no value and formats no text.
Layout describe(const TensorDictBase& td) {
  if (!td.defined()) throw ValueError("distributed transfer of a null tensordict handle");
  std::vector<Found> found;
  std::deque<Value> owned;
  collect(td.node(), NestedKey(), std::string(), found, owned);
  std::vector<std::size_t> order(found.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return found[a].joined < found[b].joined; });

  Layout out;
  out.entries.reserve(found.size() + 1);
  out.entries.push_back(
      {NestedKey(), EntryKind::TensorDict, at::ScalarType::Undefined, td.batch_size().vec()});
  Fnv1a h;
  auto hash_entry = [&](const EntryDesc& e) {
    h.value(static_cast<uint32_t>(e.key.size()));
    for (const auto& part : e.key) h.text(part);
    h.value(static_cast<uint8_t>(e.kind));
    h.value(static_cast<int8_t>(e.dtype));
    h.value(static_cast<uint32_t>(e.dims.size()));
    if (!e.dims.empty()) h.bytes(e.dims.data(), e.dims.size() * sizeof(int64_t));
  };
  hash_entry(out.entries.front());
  for (std::size_t i : order) {
    Found& f = found[i];
    const Value& value = *f.value;
    EntryDesc e{std::move(f.key), value.kind()};
    switch (e.kind) {
      case EntryKind::Tensor: {
        const at::Tensor& t = value.tensor();
        e.dtype = t.scalar_type();
        e.dims = t.sizes().vec();
        e.leaf = static_cast<int64_t>(out.leaves.size());
        const int64_t nbytes = t.numel() * static_cast<int64_t>(t.element_size());
        out.flat_bytes = (out.flat_bytes + kAlign - 1) / kAlign * kAlign;
        out.leaves.push_back({e.key, t, e.dtype, e.dims, nbytes, out.flat_bytes});
        out.flat_bytes += nbytes;
        break;
      }
      case EntryKind::TensorDict:
        // The class is not part of the structure: a lazy stack and a
        // TensorDict of the same shape exchange data.
        e.dims = value.tensordict().batch_size().vec();
        break;
      case EntryKind::NonTensor:
      case EntryKind::NonTensorStack:
        out.non_tensors.push_back({e.key, e.kind == EntryKind::NonTensorStack});
        break;
    }
    hash_entry(e);
    out.entries.push_back(std::move(e));
  }
  // Positive, so that {h, -h} under MAX detects any disagreement.
  out.hash = static_cast<int64_t>(h.get() >> 1);
  return out;
}

// The most JSON (non-tensor values, structures) one message carries: a
// receiver allocates what the peer announces, so a corrupt or hostile size
// must not become a huge allocation.
constexpr int64_t kMaxJsonBytes = int64_t{1} << 30;

std::string non_tensor_payload(const std::string& what, const TensorDictBase& td,
                               const Layout& layout) {
  if (layout.non_tensors.empty()) return {};
  json values = json::array();
  for (const auto& e : layout.non_tensors)
    values.push_back(json::array({e.key.to_vector(), e.stack, td.get_non_tensor(e.key)}));
  std::string out = values.dump();
  if (static_cast<int64_t>(out.size()) > kMaxJsonBytes)
    throw ValueError(what + ": the non-tensor values take " + std::to_string(out.size()) +
                     " bytes of JSON, more than the " + std::to_string(kMaxJsonBytes) +
                     " a transfer carries");
  return out;
}

// The non-tensor values a transfer carries, read and checked against the
// receiver's structure before any of its data is written: a payload that is
// not what a sender of the same structure sends (invalid JSON, other keys, a
// stack that does not fit its batch size) is a FormatError and writes nothing.
struct NonTensorValue {
  NestedKey key;
  nlohmann::json json;  // as sent, to skip the values that are equal already
  Value value;          // NonTensorData or NonTensorStack, built here
};

std::vector<NonTensorValue> read_non_tensors(const std::string& what, const TensorDictBase& td,
                                             const Layout& layout, const std::string& payload) {
  std::vector<NonTensorValue> out;
  if (layout.non_tensors.empty() && payload.empty()) return out;
  auto invalid = [&](const std::string& why) {
    return FormatError(what + ": the non-tensor values received are not valid: " + why);
  };
  json items;
  try {
    items = json::parse(payload);
  } catch (const json::exception& e) {
    throw invalid(e.what());
  }
  if (!items.is_array() || items.size() != layout.non_tensors.size())
    throw invalid("expected a list of " + std::to_string(layout.non_tensors.size()) + " entries");
  for (std::size_t i = 0; i < items.size(); ++i) {
    const NonTensorEntry& expected = layout.non_tensors[i];
    const json& item = items[i];
    if (!item.is_array() || item.size() != 3 || !item[0].is_array() || !item[1].is_boolean())
      throw invalid("entry " + std::to_string(i) + " is not [key parts, is stack, value]");
    std::vector<std::string> parts;
    for (const json& part : item[0]) {
      if (!part.is_string())
        throw invalid("entry " + std::to_string(i) + " has a key part that is not a string");
      parts.push_back(part.get<std::string>());
    }
    if (parts != expected.key.to_vector() || item[1].get<bool>() != expected.stack)
      throw invalid("entry " + std::to_string(i) + " is not " + expected.key.repr() +
                    (expected.stack ? " (a NonTensorStack)" : " (a NonTensorData)"));
    if (!expected.stack) {
      out.push_back({expected.key, item[2], Value(NonTensorData(item[2]))});
      continue;
    }
    // A stack takes the batch size of the level that holds it.
    std::vector<int64_t> batch = layout.entries.front().dims;
    const NestedKey parent = expected.key.parent();
    for (const EntryDesc& e : layout.entries)
      if (e.kind == EntryKind::TensorDict && e.key == parent) batch = e.dims;
    try {
      out.push_back({expected.key, item[2], Value(NonTensorStack(item[2], batch, td.device()))});
    } catch (const Error& e) {
      throw invalid(expected.key.repr() + ": " + e.what());
    }
  }
  return out;
}

// Replaces the non-tensor values that differ. A locked tensordict (a memmap
// one included) keeps its own: their storage is fixed, and the tensors have
// been received already.
void apply_non_tensors(const TensorDictBase& td, const std::vector<NonTensorValue>& values) {
  if (values.empty() || td.is_locked()) return;
  TensorDictBase target = td;
  for (const NonTensorValue& v : values) {
    if (td.get_non_tensor(v.key) == v.json) continue;  // only where it differs
    target.set(v.key, v.value);
  }
}

TransferMode choose_mode(const Layout& layout, const TransferOptions& options) {
  if (options.mode != TransferMode::Auto) return options.mode;
  return layout.flat_bytes <= options.flat_max_bytes ? TransferMode::Consolidated
                                                     : TransferMode::PerLeaf;
}

at::Tensor contiguous_cpu(const at::Tensor& t) {
  return t.device().is_cpu() ? t.contiguous() : t.to(at::kCPU).contiguous();
}

// A 1-D uint8 alias of a contiguous CPU tensor: Gloo moves bytes of any
// dtype this way (its broadcast refuses bool, complex and bfloat16 tensors).
at::Tensor bytes_of(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), {t.numel() * t.element_size()}, at::kByte);
}

void pack_into(const Layout& layout, uint8_t* base) {
  for (const Leaf& leaf : layout.leaves) {
    if (leaf.nbytes == 0) continue;
    at::Tensor t = contiguous_cpu(leaf.tensor);
    std::memcpy(base + leaf.offset, t.data_ptr(), leaf.nbytes);
  }
}

at::Tensor pack(const Layout& layout) {
  at::Tensor buffer = at::empty({layout.flat_bytes}, at::kByte);
  pack_into(layout, static_cast<uint8_t*>(buffer.data_ptr()));
  return buffer;
}

// Writes the leaves of `buffer` into `td`: a memcpy into an in-memory
// contiguous leaf, set_ otherwise (so every storage keeps its own: a memmap
// receives into its files, a lazy stack into its members).
void unpack(const Layout& layout, uint8_t* base, const TensorDictBase& td) {
  TensorDictBase target = td;
  for (const Leaf& leaf : layout.leaves) {
    if (leaf.nbytes == 0) continue;
    const at::Tensor* own =
        detail::find_memory_tensor(td.node_ptr().get(), leaf.key.parts().data(), leaf.key.size());
    if (own && own->is_contiguous() && own->device().is_cpu() && own->scalar_type() == leaf.dtype) {
      std::memcpy(own->data_ptr(), base + leaf.offset, leaf.nbytes);
      continue;
    }
    at::Tensor view =
        at::from_blob(base + leaf.offset, leaf.shape, at::TensorOptions().dtype(leaf.dtype));
    target.set_(leaf.key, view);
  }
}

// ---- message buffers kept between transfers -----------------------------------
// One-buffer transfers reuse their message buffers: a fresh buffer of many
// megabytes is mapped anew by malloc and page-faulted in on every transfer
// (3x the hand-written floor, which sends from a preallocated one, at 100 MB). A buffer is only
// bytes, packed or received in full each time, so the pool is keyed by size alone (the structure is
// checked on every transfer regardless). A transfer takes a buffer out of the pool (concurrent
// isend/irecv never share one) and gives it back only once every message that used it has
// completed; after an error the buffer is dropped, since the group may still hold it.
constexpr int64_t kPoolMaxBytes = int64_t{256} << 20;
constexpr std::size_t kPoolMaxBuffers = 16;

class BufferPool {
 public:
  // A buffer of exactly `nbytes` (from the pool, or new).
  at::Tensor take(int64_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
        if (it->numel() != nbytes) continue;
        at::Tensor t = std::move(*it);
        buffers_.erase(it);
        bytes_ -= nbytes;
        return t;
      }
    }
    return at::empty({nbytes}, at::kByte);
  }
  // Keeps `buffer` for a later take(); the least recently given back go
  // first when the pool is full.
  void give(at::Tensor buffer) {
    const int64_t n = buffer.numel();
    if (n == 0 || n > kPoolMaxBytes) return;
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.push_front(std::move(buffer));
    bytes_ += n;
    while (bytes_ > kPoolMaxBytes || buffers_.size() > kPoolMaxBuffers) {
      bytes_ -= buffers_.back().numel();
      buffers_.pop_back();
    }
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.clear();
    bytes_ = 0;
  }
  int64_t bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }

 private:
  std::mutex mutex_;
  std::list<at::Tensor> buffers_;  // most recently given back first
  int64_t bytes_ = 0;
};

BufferPool& pool() {
  static BufferPool* p = new BufferPool();  // never destroyed: isend threads may outlive main
  return *p;
}

// A message buffer for one transfer: from the pool when the options allow,
// back into it by done() (only after its messages completed).
class MessageBuffer {
 public:
  MessageBuffer(int64_t nbytes, bool reuse)
      : reuse_(reuse), tensor_(reuse ? pool().take(nbytes) : at::empty({nbytes}, at::kByte)) {}
  const at::Tensor& tensor() const { return tensor_; }
  uint8_t* data() const { return static_cast<uint8_t*>(tensor_.data_ptr()); }
  void done() {
    if (reuse_) pool().give(std::move(tensor_));
    tensor_ = at::Tensor();
  }

 private:
  bool reuse_;
  at::Tensor tensor_;
};

at::Tensor bytes_tensor(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string tensor_string(const at::Tensor& t) {
  const auto* p = static_cast<const char*>(t.data_ptr());
  std::string s(p, p + t.numel());
  // all_gather pads descriptions with NULs.
  if (auto nul = s.find('\0'); nul != std::string::npos) s.resize(nul);
  return s;
}

bool contains_ci(std::string haystack, const char* needle) {
  std::transform(haystack.begin(), haystack.end(), haystack.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return haystack.find(needle) != std::string::npos;
}

// Messages of one operation over the group, with c10d/Gloo failures turned
// into tensordict errors naming the operation.
class Channel {
  // c10d/Gloo errors out of `f` as tensordict errors (defined first: its
  // return type is deduced).
  template <class F>
  decltype(auto) guarded(F&& f) {
    try {
      return f();
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      translate(e.what_without_backtrace());
    } catch (const std::exception& e) {
      translate(e.what());
    }
  }

 public:
  Channel(c10d::ProcessGroup& pg, const TransferOptions& options, std::string what)
      : pg_(pg), options_(options), what_(std::move(what)) {}

  c10::intrusive_ptr<c10d::Work> send(const at::Tensor& t, int dst) {
    std::vector<at::Tensor> v{t};
    return guarded([&] { return pg_.send(v, dst, options_.tag); });
  }
  c10::intrusive_ptr<c10d::Work> recv(const at::Tensor& t, int src) {
    std::vector<at::Tensor> v{t};
    return guarded([&] { return pg_.recv(v, src, options_.tag); });
  }
  void wait(const c10::intrusive_ptr<c10d::Work>& work) {
    guarded([&] {
      if (options_.timeout.count() > 0)
        work->wait(options_.timeout);
      else
        work->wait();
      return 0;
    });
  }
  void wait_all(std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
    for (auto& w : works) wait(w);
    works.clear();
  }
  void send_now(const at::Tensor& t, int dst) { wait(send(t, dst)); }
  void recv_now(const at::Tensor& t, int src) { wait(recv(t, src)); }

  // `size` bytes the peer announced (checked: at most kMaxJsonBytes).
  std::string recv_string(int64_t size, int src) {
    if (size < 0 || size > kMaxJsonBytes)
      throw FormatError(what_ + ": the peer announces a message of " + std::to_string(size) +
                        " bytes, outside [0, " + std::to_string(kMaxJsonBytes) + "]");
    if (size == 0) return {};
    at::Tensor t = at::empty({size}, at::kByte);
    recv_now(t, src);
    return tensor_string(t);
  }
  // A collective op, waited for.
  template <class F>
  void collective(F&& post) {
    wait(guarded(std::forward<F>(post)));
  }

  const std::string& what() const { return what_; }
  c10d::ProcessGroup& pg() { return pg_; }
  const TransferOptions& options() const { return options_; }

 private:
  [[noreturn]] void translate(const std::string& error) const {
    const std::string msg = what_ + ": " + error;
    if (contains_ci(error, "timed out") || contains_ci(error, "timeout")) throw TimeoutError(msg);
    if (contains_ci(error, "connection") || contains_ci(error, "closed by peer"))
      throw ConnectionError(msg);
    throw StorageError(msg);
  }

  c10d::ProcessGroup& pg_;
  TransferOptions options_;
  std::string what_;
};

void check_peer(c10d::ProcessGroup& pg, int peer, const char* op, const char* role) {
  if (peer < 0 || peer >= pg.getSize() || peer == pg.getRank())
    throw ValueError(std::string(op) + ": " + role + " rank " + std::to_string(peer) +
                     " is not another rank of the group (rank " + std::to_string(pg.getRank()) +
                     " of " + std::to_string(pg.getSize()) + ")");
}

// A structure as (key, what) pairs in sorted key order: what two sides
// compare to name the first difference (the offsets follow from these).
using EntryList = std::vector<std::pair<NestedKey, std::string>>;

EntryList entries_of(const Layout& layout) {
  EntryList out;
  out.reserve(layout.entries.size());
  for (const EntryDesc& e : layout.entries) out.emplace_back(e.key, e.what());
  return out;
}

// From Layout::text() (a description received from a peer).
EntryList entries_of(const std::string& description) {
  EntryList out;
  for (const json& entry : json::parse(description))
    out.emplace_back(NestedKey(entry[0].get<std::vector<std::string>>()),
                     entry[1].get<std::string>());
  return out;
}

// The StructureError naming the first entry where `here` and `there` differ.
[[noreturn]] void throw_mismatch(const std::string& what, const EntryList& a,
                                 const std::string& there_name, const EntryList& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto text = [](const std::pair<NestedKey, std::string>& e) {
    return e.first.repr() + ": " + e.second;
  };
  std::string mine = i < a.size() ? text(a[i]) : std::string("nothing more");
  std::string theirs = i < b.size() ? text(b[i]) : std::string("nothing more");
  NestedKey key;
  if (i < a.size() && i < b.size())
    key = a[i].first.join() <= b[i].first.join() ? a[i].first : b[i].first;
  else if (i < a.size())
    key = a[i].first;
  else if (i < b.size())
    key = b[i].first;
  throw StructureError(what + ": the tensordicts differ; first differing entry: here " + mine +
                           ", on " + there_name + " " + theirs,
                       std::move(key));
}

[[noreturn]] void throw_mismatch(const std::string& what, const std::string& here,
                                 const std::string& there_name, const std::string& there) {
  throw_mismatch(what, entries_of(here), there_name, entries_of(there));
}

// ---- point to point ------------------------------------------------------------
// Receiver-driven: the receiver first tells the sender what it expects (its
// structure's hash, flat size, leaf count, mode) and posts the receive of the
// sender's first message: a header, with room for its own flat buffer behind
// it. The sender waits for the expectation and answers with messages that fit
// what the receiver posted, so that a mismatch never gives Gloo a message
// larger than its receive (which aborts the process) and never leaves a
// receive pending. Both messages that can come first (the expectation, the
// header) are at least 64 bytes and have magic numbers of their own, so two
// ranks that both call recv() (or from_remote_init()) each find the other's
// expectation where the header should be, and both throw.

// Declared kinds of the receiver's expectation.
constexpr int64_t kExpectRecv = 1;  // recv(): the data of an existing structure
constexpr int64_t kExpectInit = 2;  // from_remote_init(): structure and data
// kEFirstBytes: 0, or the size of the receive the sender's first message lands
// in when it is a listening receive (see Listeners).
enum : int { kEMagic, kEKind, kEHash, kEFlatBytes, kEMode, kELeaves, kEFirstBytes, kECount = 8 };
// Kinds of the sender's header.
constexpr int64_t kSendOk = 1;        // send(): data in the receiver's mode
constexpr int64_t kSendMismatch = 2;  // send(): the structures differ
constexpr int64_t kSendRefused = 3;   // send() answering from_remote_init()
constexpr int64_t kInitHeader = 4;    // init_remote(): structure and buffer follow
constexpr int64_t kInitRefused = 5;   // init_remote() answering recv()

// After a mismatch: each side sends its description (length first), and
// gets the other's.
std::string exchange_descriptions(Channel& ch, const std::string& mine, int peer) {
  auto sent_len = ch.send(at::full({1}, static_cast<int64_t>(mine.size()), at::kLong), peer);
  at::Tensor mine_t = bytes_tensor(mine);
  auto sent = ch.send(mine_t, peer);
  at::Tensor len = at::empty({1}, at::kLong);
  ch.recv_now(len, peer);
  std::string theirs = ch.recv_string(len.item<int64_t>(), peer);
  ch.wait(sent_len);
  ch.wait(sent);
  return theirs;
}

// ---- the listening receive -------------------------------------------------------
// A send() waits for the receiver's expectation, and Gloo moves a message only
// once its receive is posted. Posted when send() is called, the expectation's
// receive puts a round trip on the critical path (its "ready" notification to
// the receiver, then the expectation back), although the receiver, usually
// waiting already, has sent it long before. So a rank that sent (send,
// init_remote) leaves a receive posted for the peer's next first message on
// that tag, once every message of the transfer has been matched, and the next
// point-to-point call between the two on that tag takes it as its first
// receive: a send or init_remote finds the expectation there, often arrived
// already; a recv or from_remote_init (the roles swapped) the sender's header,
// with a one-buffer transfer of up to 4 MiB behind it. The receive holds
// kListenBytes; the expectation says so (kEFirstBytes), and a larger
// one-buffer transfer then sends its header alone first, the buffer after it.
constexpr int64_t kListenBytes = kHeaderBytes + (int64_t{4} << 20);

struct Listening {
  c10::weak_intrusive_ptr<c10d::ProcessGroup> group;  // the entry goes with the group
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor buffer;  // kListenBytes
};

// The listening receives of this process, by (group, peer, tag). A receive
// posted in a group that lives must stay posted (Gloo stalls the connection
// when a message arrives for a receive whose buffer is gone), so an entry
// leaves only when a transfer takes it or once its group is destroyed. Its
// weak reference keeps the group's memory, so no group made later has the
// address of a destroyed one while its entry is here.
class Listeners {
 public:
  std::optional<Listening> take(const c10d::ProcessGroup& pg, int peer, int tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired_locked();
    auto it = posted_.find({&pg, peer, tag});
    if (it == posted_.end()) return std::nullopt;
    Listening out = std::move(it->second);
    posted_.erase(it);
    return out;
  }
  void put(const c10d::ProcessGroup& pg, int peer, int tag, Listening listening) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired_locked();
    posted_.insert_or_assign(Key{&pg, peer, tag}, std::move(listening));
  }
  // The receives of destroyed groups go, with the Gloo contexts they hold.
  void drop_expired() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired_locked();
  }

 private:
  using Key = std::tuple<const c10d::ProcessGroup*, int, int>;
  void drop_expired_locked() {
    std::erase_if(posted_, [](const auto& entry) { return entry.second.group.expired(); });
  }
  std::mutex mutex_;
  std::map<Key, Listening> posted_;
};

Listeners* g_listeners = nullptr;  // never destroyed: live groups keep their receives

Listeners& listeners() {
  static Listeners* l = g_listeners = new Listeners();
  return *l;
}

// At exit, the receives of groups destroyed already go before the libraries
// they use, so that their Gloo threads end.
struct DropListenersAtExit {
  ~DropListenersAtExit() {
    if (g_listeners) g_listeners->drop_expired();
  }
} drop_listeners_at_exit;

// A weak reference to `pg` when an intrusive_ptr owns it (as c10d's groups are
// made); a group that none owns (on the stack) gets no listening receive.
std::optional<c10::weak_intrusive_ptr<c10d::ProcessGroup>> weak_ref(c10d::ProcessGroup& pg) {
  if (c10::raw::intrusive_ptr::use_count(&pg) == 0) return std::nullopt;
  return c10::weak_intrusive_ptr<c10d::ProcessGroup>(
      c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(&pg));
}

// Leaves the receive of `peer`'s next first message posted (in `buffer` when
// it has kListenBytes).
void listen(Channel& ch, int peer, at::Tensor buffer) {
  auto group = weak_ref(ch.pg());
  if (!group) return;
  if (!buffer.defined() || buffer.numel() != kListenBytes)
    buffer = at::empty({kListenBytes}, at::kByte);
  auto work = ch.recv(buffer, peer);
  listeners().put(ch.pg(), peer, ch.options().tag,
                  Listening{std::move(*group), std::move(work), std::move(buffer)});
}

// The receive of the peer's first message of a transfer: the listening one, or
// one posted now of `nbytes` (from the buffer pool when `pooled`).
class FirstReceive {
 public:
  FirstReceive(Channel& ch, int peer, int64_t nbytes, bool pooled) {
    if (auto l = listeners().take(ch.pg(), peer, ch.options().tag)) {
      listened_ = std::move(l->buffer);
      work_ = std::move(l->work);
      return;
    }
    posted_.emplace(nbytes, pooled);
    work_ = ch.recv(posted_->tensor(), peer);
  }
  bool listened() const { return listened_.defined(); }
  const c10::intrusive_ptr<c10d::Work>& work() const { return work_; }
  uint8_t* data() const {
    return listened() ? static_cast<uint8_t*>(listened_.data_ptr()) : posted_->data();
  }
  const int64_t* words() const { return reinterpret_cast<const int64_t*>(data()); }
  // The buffer, for the next listening receive.
  at::Tensor release() {
    at::Tensor out = listened() ? std::move(listened_) : posted_->tensor();
    posted_.reset();
    return out;
  }
  // Gives a pooled buffer back (its messages completed).
  void done() {
    if (posted_) posted_->done();
    listened_ = at::Tensor();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  at::Tensor listened_;
  std::optional<MessageBuffer> posted_;
};

// A one-buffer transfer whose receiver's first receive (kEFirstBytes, 0 when
// it made room for it) is smaller than the header and the buffer: the header
// goes alone, the buffer in a message of its own after it.
bool split_flat(int64_t first_bytes, int64_t flat_bytes) {
  return first_bytes > 0 && kHeaderBytes + flat_bytes > first_bytes;
}

[[noreturn]] void throw_bad_magic(const Channel& ch) {
  throw FormatError(ch.what() + ": the message is not a tensordict transfer (bad magic number)");
}

struct Header {
  int64_t kind = 0;
  int64_t extra_bytes = 0;
  int64_t hash = 0, flat_bytes = 0, leaves = 0;  // the sender's structure
  int64_t mode = 0;
  int64_t desc_bytes = 0;

  Header(int64_t kind_, int64_t extra_bytes_ = 0) : kind(kind_), extra_bytes(extra_bytes_) {}
  Header(int64_t kind_, int64_t extra_bytes_, const Layout& layout, int64_t mode_)
      : kind(kind_),
        extra_bytes(extra_bytes_),
        hash(layout.hash),
        flat_bytes(layout.flat_bytes),
        leaves(static_cast<int64_t>(layout.leaves.size())),
        mode(mode_) {}

  void write(uint8_t* at) const {
    const int64_t h[kHCount] = {kMagic,     kind,   extra_bytes, hash,
                                flat_bytes, leaves, mode,        desc_bytes};
    std::memcpy(at, h, kHeaderBytes);
  }
  at::Tensor message() const {
    at::Tensor msg = at::empty({kHeaderBytes}, at::kByte);
    write(msg.data_ptr<uint8_t>());
    return msg;
  }
};

bool same_structure(const Layout& layout, int64_t hash, int64_t flat_bytes, int64_t leaves) {
  return hash == layout.hash && flat_bytes == layout.flat_bytes &&
         leaves == static_cast<int64_t>(layout.leaves.size());
}

[[noreturn]] void throw_called(const Channel& ch, int peer, const char* what) {
  throw ValueError(ch.what() + ": rank " + std::to_string(peer) + " called " + what);
}

// What the peer called, by the first message it sent (an expectation or a header).
const char* peer_call(const int64_t* first) {
  if (first[kEMagic] == kExpectMagic)
    return first[kEKind] == kExpectInit ? "from_remote_init(), which pairs with init_remote()"
                                        : "recv(), which pairs with send()";
  return first[kHKind] == kInitHeader || first[kHKind] == kInitRefused
             ? "init_remote(), which pairs with from_remote_init()"
             : "send(), which pairs with recv()";
}

// The first 8 int64 of the sender's first message, in recv() and
// from_remote_init(). A peer that receives too sent its expectation there
// (and took ours): both throw.
void read_first(Channel& ch, const uint8_t* first, int peer,
                const c10::intrusive_ptr<c10d::Work>& announced, int64_t* h) {
  std::memcpy(h, first, kHeaderBytes);
  if (h[kHMagic] == kMagic) return;
  ch.wait(announced);
  if (h[kEMagic] == kExpectMagic) throw_called(ch, peer, peer_call(h));
  throw_bad_magic(ch);
}

[[noreturn]] void mismatch(Channel& ch, const Layout& layout, int peer) {
  const std::string mine = layout.text();
  const std::string theirs = exchange_descriptions(ch, mine, peer);
  throw_mismatch(ch.what(), mine, "rank " + std::to_string(peer), theirs);
}

void send_eager(Channel& ch, const TensorDictBase& td, const Layout& layout, int dst);
void recv_eager(Channel& ch, const TensorDictBase& td, int src);
TransferOptions eager_options(const TransferOptions& options, const char* op);

// The messages of a send after its first (posted in `works`): the non-tensor
// JSON, then, per leaf, one message per non-empty leaf; waits for all.
void send_rest_and_wait(Channel& ch, const Layout& layout, const std::string& extra, bool per_leaf,
                        int dst, std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  at::Tensor extra_t = bytes_tensor(extra);
  if (!extra.empty()) works.push_back(ch.send(extra_t, dst));
  std::vector<at::Tensor> keep;  // contiguous copies must outlive their sends
  if (per_leaf) {
    for (const Leaf& leaf : layout.leaves) {
      if (leaf.nbytes == 0) continue;
      keep.push_back(contiguous_cpu(leaf.tensor));
      works.push_back(ch.send(bytes_of(keep.back()), dst));
    }
  }
  ch.wait_all(works);
}

void send_impl(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
               const TransferOptions& options) {
  check_peer(pg, dst, "send", "destination");
  if (options.check == StructureCheck::Receiver) {
    Channel ch(pg, eager_options(options, "send"), "send to rank " + std::to_string(dst));
    send_eager(ch, td, describe(td), dst);
    return;
  }
  Channel ch(pg, options, "send to rank " + std::to_string(dst));
  const Layout layout = describe(td);
  // The expectation lands in the listening receive (often it is there
  // already), or in one posted now; when this side would send one buffer (the
  // receiver's mode, unless their options differ), the data is packed
  // meanwhile, so the copy overlaps the expectation's wait.
  FirstReceive expected(ch, dst, kHeaderBytes, false);
  std::optional<MessageBuffer> packed;
  if (choose_mode(layout, options) == TransferMode::Consolidated) {
    try {
      packed.emplace(kHeaderBytes + layout.flat_bytes, options.reuse_buffers);
      pack_into(layout, packed->data() + kHeaderBytes);
    } catch (...) {
      ch.wait(expected.work());  // a receive left posted would take a later message
      throw;
    }
  }
  ch.wait(expected.work());
  int64_t e[kECount];
  std::memcpy(e, expected.data(), sizeof e);
  if (e[kEMagic] != kExpectMagic) throw_bad_magic(ch);
  if (e[kEKind] == kExpectInit) {
    ch.send_now(Header(kSendRefused).message(), dst);
    listen(ch, dst, expected.release());
    throw_called(ch, dst, "from_remote_init(), which pairs with init_remote()");
  }
  if (!same_structure(layout, e[kEHash], e[kEFlatBytes], e[kELeaves])) {
    ch.send_now(Header(kSendMismatch).message(), dst);
    const std::string mine = layout.text();
    const std::string theirs = exchange_descriptions(ch, mine, dst);
    listen(ch, dst, expected.release());
    throw_mismatch(ch.what(), mine, "rank " + std::to_string(dst), theirs);
  }
  // The receiver's mode decides (they agree unless the options differ).
  const bool flat = e[kEMode] == static_cast<int64_t>(TransferMode::Consolidated);
  const std::string extra = non_tensor_payload(ch.what(), td, layout);
  const int64_t extra_bytes = static_cast<int64_t>(extra.size());
  const Header header(kSendOk, extra_bytes, layout, e[kEMode]);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::optional<MessageBuffer> message;
  if (flat) {
    if (!packed) {
      packed.emplace(kHeaderBytes + layout.flat_bytes, options.reuse_buffers);
      pack_into(layout, packed->data() + kHeaderBytes);
    }
    message = std::move(packed);
    header.write(message->data());
    if (split_flat(e[kEFirstBytes], layout.flat_bytes)) {
      works.push_back(ch.send(message->tensor().narrow(0, 0, kHeaderBytes), dst));
      works.push_back(ch.send(message->tensor().narrow(0, kHeaderBytes, layout.flat_bytes), dst));
    } else {
      works.push_back(ch.send(message->tensor(), dst));
    }
  } else {
    if (packed) packed->done();  // never sent: back to the pool
    works.push_back(ch.send(header.message(), dst));
  }
  // The receiver sends nothing more in this transfer.
  listen(ch, dst, expected.release());
  send_rest_and_wait(ch, layout, extra, !flat, dst, works);
  if (message) message->done();
}

// A buffer of `nbytes` the peer announced: an allocation that fails is a
// StorageError naming the transfer, not LibTorch's.
at::Tensor peer_sized_buffer(const Channel& ch, int64_t nbytes) {
  try {
    return at::empty({nbytes}, at::kByte);
  } catch (const std::exception&) {
    throw StorageError(ch.what() + ": cannot allocate the " + std::to_string(nbytes) +
                       " bytes the peer announces");
  }
}

// Receives the leaves of a per-leaf transfer into scratch buffers and drops
// them: a receiver that throws first takes the sender's messages, so the
// group stays in step.
void take_leaves(Channel& ch, const std::vector<int64_t>& nbytes, int src) {
  std::vector<at::Tensor> scratch;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (int64_t n : nbytes) {
    if (n == 0) continue;
    scratch.push_back(peer_sized_buffer(ch, n));
    works.push_back(ch.recv(scratch.back(), src));
  }
  ch.wait_all(works);
}

std::vector<int64_t> leaf_sizes(const Layout& layout) {
  std::vector<int64_t> out;
  for (const Leaf& leaf : layout.leaves) out.push_back(leaf.nbytes);
  return out;
}

// The non-tensor values of a transfer of `td`'s structure, `extra_bytes` of
// JSON, read before any data is written; when they are not valid and the data
// comes per leaf, the leaves are taken before the FormatError.
std::vector<NonTensorValue> recv_non_tensors(Channel& ch, const TensorDictBase& td,
                                             const Layout& layout, int64_t extra_bytes,
                                             bool per_leaf, int src) {
  try {
    return read_non_tensors(ch.what(), td, layout, ch.recv_string(extra_bytes, src));
  } catch (const FormatError&) {
    if (per_leaf) take_leaves(ch, leaf_sizes(layout), src);
    throw;
  }
}

// Receives one leaf per message, in place where the leaf is an in-memory
// contiguous tensor; otherwise into a temporary written with set_ (memmap,
// lazy stacks, other storages).
void recv_per_leaf(Channel& ch, const Layout& layout, const TensorDictBase& td, int src) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::pair<const Leaf*, at::Tensor>> staged;
  for (const Leaf& leaf : layout.leaves) {
    if (leaf.nbytes == 0) continue;
    const at::Tensor* own =
        detail::find_memory_tensor(td.node_ptr().get(), leaf.key.parts().data(), leaf.key.size());
    at::Tensor target;
    if (own && own->is_contiguous() && own->device().is_cpu()) {
      target = *own;
    } else {
      target = at::empty(leaf.shape, at::TensorOptions().dtype(leaf.dtype));
      staged.emplace_back(&leaf, target);
    }
    works.push_back(ch.recv(bytes_of(target), src));
  }
  ch.wait_all(works);
  TensorDictBase out = td;
  for (auto& [leaf, tensor] : staged) out.set_(leaf->key, tensor);
}

void recv_impl(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
               const TransferOptions& options) {
  check_peer(pg, src, "recv", "source");
  if (options.check == StructureCheck::Receiver) {
    Channel ch(pg, eager_options(options, "recv"), "recv from rank " + std::to_string(src));
    recv_eager(ch, td, src);
    return;
  }
  Channel ch(pg, options, "recv from rank " + std::to_string(src));
  const Layout layout = describe(td);
  const TransferMode mode = choose_mode(layout, options);
  const bool flat = mode == TransferMode::Consolidated;
  // The sender's first message: the header, with room behind it for this
  // side's flat buffer (or the listening receive this side left posted).
  FirstReceive first(ch, src, kHeaderBytes + (flat ? layout.flat_bytes : 0),
                     options.reuse_buffers && flat);
  at::Tensor expectation = at::zeros({kECount}, at::kLong);
  int64_t* e = expectation.data_ptr<int64_t>();
  e[kEMagic] = kExpectMagic;
  e[kEKind] = kExpectRecv;
  e[kEHash] = layout.hash;
  e[kEFlatBytes] = layout.flat_bytes;
  e[kEMode] = static_cast<int64_t>(mode);
  e[kELeaves] = static_cast<int64_t>(layout.leaves.size());
  e[kEFirstBytes] = first.listened() ? kListenBytes : 0;
  auto announced = ch.send(expectation, src);
  ch.wait(first.work());
  int64_t h[kHCount];
  read_first(ch, first.data(), src, announced, h);
  if (h[kHKind] != kSendOk) {
    ch.wait(announced);  // the sender answered it
    if (h[kHKind] == kInitRefused) throw_called(ch, src, peer_call(h));
    if (h[kHKind] == kSendMismatch) mismatch(ch, layout, src);
    throw FormatError(ch.what() + ": unknown message kind " + std::to_string(h[kHKind]));
  }
  // The data comes in the mode this side asked for.
  if (flat && h[kHFlatBytes] != layout.flat_bytes)
    throw FormatError(ch.what() + ": the data message has " + std::to_string(h[kHFlatBytes]) +
                      " bytes where " + std::to_string(layout.flat_bytes) + " are expected");
  // A buffer larger than the listening receive comes in a message of its own,
  // before the non-tensor values.
  uint8_t* data = first.data() + kHeaderBytes;
  std::optional<MessageBuffer> separate;
  c10::intrusive_ptr<c10d::Work> separate_work;
  if (flat && split_flat(e[kEFirstBytes], layout.flat_bytes)) {
    separate.emplace(kHeaderBytes + layout.flat_bytes, options.reuse_buffers);
    separate_work = ch.recv(separate->tensor().narrow(0, kHeaderBytes, layout.flat_bytes), src);
    data = separate->data() + kHeaderBytes;
  }
  std::vector<NonTensorValue> non_tensors;
  try {
    non_tensors = recv_non_tensors(ch, td, layout, h[kHExtraBytes], !flat, src);
  } catch (const FormatError&) {
    if (separate_work) ch.wait(separate_work);  // a receive left posted would take a later message
    throw;
  }
  if (separate_work) ch.wait(separate_work);
  if (flat) unpack(layout, data, td);
  first.done();  // unpack copied everything out
  if (separate) separate->done();
  if (!flat) recv_per_leaf(ch, layout, td, src);
  apply_non_tensors(td, non_tensors);
  ch.wait(announced);
}

// ---- eager transfers: the receiver alone checks ---------------------------------
// StructureCheck::Receiver: the sender does not wait for an expectation, so a
// transfer is one message (plus the non-tensor JSON, and the leaves when per
// leaf). Its first message carries the sender's structure:
//   header (kind kSendEager, kHDescBytes) | entries | padding to 16 |
//     one buffer: the flat data / per leaf: each leaf's size (int64)
// The receiver posts kEagerFirstMessageBytes for it, which every eager first
// message fits (a larger transfer goes per leaf), checks the structure, and
// on a mismatch takes the sender's remaining messages before it throws, so
// the group stays in step. Eager messages use a tag slot of their own (tag |
// kEagerTagBit): a rank that checks on both sides never receives one (Gloo
// aborts the process on a message larger than the receive); mixed settings
// fail on both sides instead (a timeout, or the connection the other side
// closed on its timeout).
constexpr int64_t kSendEager = 6;
constexpr int kEagerTagBit = 1 << 30;
constexpr int64_t kEagerFirstMessageBytes = (int64_t{4} << 20) + (int64_t{64} << 10);

int64_t padded(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

TransferOptions eager_options(const TransferOptions& options, const char* op) {
  if (options.tag < 0 || options.tag >= kEagerTagBit)
    throw ValueError(std::string(op) + ": StructureCheck::Receiver needs a tag in [0, 2^30), not " +
                     std::to_string(options.tag));
  TransferOptions eager = options;
  eager.tag = options.tag | kEagerTagBit;
  return eager;
}

// The entries as the receiver compares them, in binary: per entry the number
// of key parts (uint32), each part (its uint32 length, then its bytes), the
// kind (uint8), the dtype (int8), the number of dims (uint32) and the dims
// (int64 each). The receiver formats them only to name a difference.
std::string encode_entries(const Layout& layout) {
  std::string out;
  auto put = [&](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (const EntryDesc& e : layout.entries) {
    put(static_cast<uint32_t>(e.key.size()));
    for (const auto& part : e.key) {
      put(static_cast<uint32_t>(part.size()));
      out += part;
    }
    put(static_cast<uint8_t>(e.kind));
    put(static_cast<int8_t>(e.dtype));
    put(static_cast<uint32_t>(e.dims.size()));
    for (int64_t d : e.dims) put(d);
  }
  return out;
}

EntryList decode_entries(const Channel& ch, const uint8_t* p, int64_t n) {
  EntryList out;
  int64_t at = 0;
  auto bad = [&](const std::string& why) {
    return FormatError(ch.what() + ": the sender's structure is " + why + " at byte " +
                       std::to_string(at) + " of " + std::to_string(n));
  };
  auto get = [&](auto& v) {
    if (n - at < static_cast<int64_t>(sizeof v)) throw bad("truncated");
    std::memcpy(&v, p + at, sizeof v);
    at += sizeof v;
  };
  while (at < n) {
    EntryDesc e;
    uint32_t parts = 0;
    get(parts);
    std::vector<std::string> key;
    for (uint32_t i = 0; i < parts; ++i) {  // each takes >= 4 bytes
      uint32_t len = 0;
      get(len);
      if (n - at < static_cast<int64_t>(len)) throw bad("truncated");
      key.emplace_back(reinterpret_cast<const char*>(p + at), len);
      at += len;
    }
    e.key = NestedKey(key);
    uint8_t kind = 0;
    int8_t dtype = 0;
    uint32_t ndims = 0;
    get(kind);
    get(dtype);
    get(ndims);
    if (kind > static_cast<uint8_t>(EntryKind::NonTensorStack)) throw bad("not valid (entry kind)");
    e.kind = static_cast<EntryKind>(kind);
    e.dtype = static_cast<at::ScalarType>(dtype);
    if (static_cast<int64_t>(ndims) > (n - at) / 8) throw bad("truncated");
    e.dims.resize(ndims);
    for (int64_t& d : e.dims) get(d);
    std::string what;
    try {
      if (e.kind == EntryKind::Tensor &&
          (dtype < 0 || dtype >= static_cast<int8_t>(at::ScalarType::NumOptions)))
        throw ValueError("dtype out of range");
      what = e.what();
    } catch (const std::exception&) {  // a dtype without a name
      throw bad("not valid (dtype " + std::to_string(dtype) + ")");
    }
    out.emplace_back(std::move(e.key), std::move(what));
  }
  return out;
}

void send_eager(Channel& ch, const TensorDictBase& td, const Layout& layout, int dst) {
  const TransferOptions& options = ch.options();
  const std::string entries = encode_entries(layout);
  const auto desc_bytes = static_cast<int64_t>(entries.size());
  const int64_t data_at = kHeaderBytes + padded(desc_bytes);
  const auto leaves = static_cast<int64_t>(layout.leaves.size());
  const bool flat = choose_mode(layout, options) == TransferMode::Consolidated &&
                    data_at + layout.flat_bytes <= kEagerFirstMessageBytes;
  const int64_t first_bytes = data_at + (flat ? layout.flat_bytes : 8 * leaves);
  if (first_bytes > kEagerFirstMessageBytes)
    throw ValueError(ch.what() + ": a structure of " + std::to_string(layout.entries.size()) +
                     " entries takes " + std::to_string(first_bytes) + " bytes, more than the " +
                     std::to_string(kEagerFirstMessageBytes) +
                     " of StructureCheck::Receiver's first message; use StructureCheck::BothSides");
  const std::string extra = non_tensor_payload(ch.what(), td, layout);
  MessageBuffer message(first_bytes, options.reuse_buffers);
  Header header(kSendEager, static_cast<int64_t>(extra.size()), layout,
                static_cast<int64_t>(flat ? TransferMode::Consolidated : TransferMode::PerLeaf));
  header.desc_bytes = desc_bytes;
  header.write(message.data());
  std::memcpy(message.data() + kHeaderBytes, entries.data(), entries.size());
  if (flat) {
    pack_into(layout, message.data() + data_at);
  } else {
    for (int64_t i = 0; i < leaves; ++i)
      std::memcpy(message.data() + data_at + 8 * i, &layout.leaves[i].nbytes, 8);
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(ch.send(message.tensor(), dst));
  send_rest_and_wait(ch, layout, extra, !flat, dst, works);
  message.done();
}

void recv_eager(Channel& ch, const TensorDictBase& td, int src) {
  // The receive is posted first and the structure described meanwhile: the
  // sender can start sending as soon as it is posted.
  if (!td.defined()) throw ValueError("distributed transfer of a null tensordict handle");
  MessageBuffer message(kEagerFirstMessageBytes, ch.options().reuse_buffers);
  auto received = ch.recv(message.tensor(), src);
  std::optional<Layout> described;
  try {
    described.emplace(describe(td));
  } catch (...) {
    ch.wait(received);  // a receive left posted would take a later message
    throw;
  }
  const Layout& layout = *described;
  ch.wait(received);
  int64_t h[kHCount];
  std::memcpy(h, message.data(), kHeaderBytes);
  if (h[kHMagic] != kMagic) throw_bad_magic(ch);
  if (h[kHKind] != kSendEager)
    throw FormatError(ch.what() + ": unknown message kind " + std::to_string(h[kHKind]));
  const int64_t desc_bytes = h[kHDescBytes], leaves = h[kHLeaves], flat_bytes = h[kHFlatBytes];
  const bool flat = h[kHMode] == static_cast<int64_t>(TransferMode::Consolidated);
  const int64_t limit = kEagerFirstMessageBytes;
  if (desc_bytes < 0 || desc_bytes > limit || leaves < 0 || leaves > limit / 8 || flat_bytes < 0 ||
      (flat && flat_bytes > limit) || h[kHExtraBytes] < 0 ||
      kHeaderBytes + padded(desc_bytes) + (flat ? flat_bytes : 8 * leaves) > limit)
    throw FormatError(ch.what() + ": the sender's header does not fit its message (" +
                      std::to_string(desc_bytes) + " bytes of structure, " +
                      std::to_string(leaves) + " leaves, " + std::to_string(flat_bytes) +
                      " bytes of data)");
  uint8_t* data = message.data() + kHeaderBytes + padded(desc_bytes);  // after the structure
  if (!same_structure(layout, h[kHHash], flat_bytes, leaves)) {
    // Take the sender's JSON and leaves (it does not wait to be told), then throw.
    ch.recv_string(h[kHExtraBytes], src);
    if (!flat) {
      std::vector<int64_t> sizes(leaves);
      for (int64_t i = 0; i < leaves; ++i) {
        std::memcpy(&sizes[i], data + 8 * i, 8);
        if (sizes[i] < 0)
          throw FormatError(ch.what() + ": the sender's leaf " + std::to_string(i) + " has " +
                            std::to_string(sizes[i]) + " bytes");
      }
      take_leaves(ch, sizes, src);
    }
    const EntryList theirs = decode_entries(ch, message.data() + kHeaderBytes, desc_bytes);
    message.done();
    throw_mismatch(ch.what(), entries_of(layout), "rank " + std::to_string(src), theirs);
  }
  // The sender's mode decides: the same structure, so the same sizes.
  const auto non_tensors = recv_non_tensors(ch, td, layout, h[kHExtraBytes], !flat, src);
  if (flat) {
    unpack(layout, data, td);
    message.done();
  } else {
    message.done();
    recv_per_leaf(ch, layout, td, src);
  }
  apply_non_tensors(td, non_tensors);
}

// ---- collectives -------------------------------------------------------------

// Strings of every rank (padded to the longest), in rank order.
std::vector<std::string> gather_strings(Channel& ch, const std::string& mine) {
  c10d::ProcessGroup& pg = ch.pg();
  std::vector<at::Tensor> len{at::full({1}, static_cast<int64_t>(mine.size()), at::kLong)};
  c10d::AllreduceOptions max_opts;
  max_opts.reduceOp = c10d::ReduceOp::MAX;
  ch.collective([&] { return pg.allreduce(len, max_opts); });
  const int64_t max_len = len[0].item<int64_t>();
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
// that every rank names the first rank and entry that differ.
void agree(Channel& ch, const Layout& layout, TransferMode mode, int root) {
  c10d::ProcessGroup& pg = ch.pg();
  at::Tensor check = at::empty({4}, at::kLong);
  int64_t* c = check.data_ptr<int64_t>();
  c[0] = layout.hash;
  c[1] = -layout.hash;
  c[2] = static_cast<int64_t>(mode);
  c[3] = -static_cast<int64_t>(mode);
  std::vector<at::Tensor> v{check};
  c10d::AllreduceOptions max_opts;
  max_opts.reduceOp = c10d::ReduceOp::MAX;
  ch.collective([&] { return pg.allreduce(v, max_opts); });
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

void release_transfer_buffers() { pool().clear(); }

int64_t transfer_buffer_bytes() { return pool().bytes(); }

// ---- Work ----------------------------------------------------------------------

void Work::wait() const {
  if (!future_.valid()) throw ValueError("Work::wait() on a default-constructed handle");
  future_.get();
}

bool Work::is_completed() const {
  return future_.valid() && future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// ---- point to point ------------------------------------------------------------

void send(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
          const TransferOptions& options) {
  send_impl(td, pg, dst, options);
}

void recv(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
          const TransferOptions& options) {
  recv_impl(td, pg, src, options);
}

namespace {
using Transfer = void (*)(const TensorDictBase&, c10d::ProcessGroup&, int, const TransferOptions&);

// `transfer` on a thread of its own (the arguments checked first, here).
Work run_async(Transfer transfer, const TensorDictBase& td, c10d::ProcessGroup& pg, int peer,
               const TransferOptions& options, const char* op, const char* role) {
  check_peer(pg, peer, op, role);
  c10d::ProcessGroup* group = &pg;
  return Work(std::async(std::launch::async, [transfer, td, group, peer, options] {
                transfer(td, *group, peer, options);
              }).share());
}
}  // namespace

Work isend(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
           const TransferOptions& options) {
  return run_async(send_impl, td, pg, dst, options, "isend", "destination");
}

Work irecv(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
           const TransferOptions& options) {
  return run_async(recv_impl, td, pg, src, options, "irecv", "source");
}

void init_remote(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                 const TransferOptions& options) {
  check_peer(pg, dst, "init_remote", "destination");
  Channel ch(pg, options, "init_remote to rank " + std::to_string(dst));
  const Layout layout = describe(td);
  FirstReceive expected(ch, dst, kHeaderBytes, false);
  ch.wait(expected.work());
  int64_t e[kECount];
  std::memcpy(e, expected.data(), sizeof e);
  if (e[kEMagic] != kExpectMagic) throw_bad_magic(ch);
  if (e[kEKind] != kExpectInit) {
    ch.send_now(Header(kInitRefused).message(), dst);
    listen(ch, dst, expected.release());
    throw_called(ch, dst, peer_call(e));
  }
  // Python's consolidated format keeps the class (a lazy stack stays one) but
  // has no NonTensorStack yet; then the structure travels as our own layout
  // (every level a TensorDict).
  const bool has_stack = std::any_of(layout.non_tensors.begin(), layout.non_tensors.end(),
                                     [](const NonTensorEntry& e) { return e.stack; });
  std::string structure;
  at::Tensor storage;
  int64_t format = kInitConsolidated;
  if (!has_stack) {
    const TensorDictBase consolidated = td.is_consolidated() ? td : td.consolidate();
    structure = consolidated.consolidated_metadata().dump();
    storage = consolidated.consolidated_storage();
  } else {
    format = kInitLayout;
    const std::string extra = non_tensor_payload(ch.what(), td, layout);
    structure = json{{"layout", layout.description()},
                     {"non_tensors", extra.empty() ? json() : json::parse(extra)}}
                    .dump();
    storage = pack(layout);
  }
  const int64_t nbytes = storage.defined() ? storage.numel() : 0;

  Header init(kInitHeader, static_cast<int64_t>(structure.size()));
  init.flat_bytes = nbytes;
  init.mode = format;
  const at::Tensor header = init.message();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(ch.send(header, dst));
  at::Tensor structure_t = bytes_tensor(structure);
  works.push_back(ch.send(structure_t, dst));
  if (nbytes > 0) {
    storage = storage.contiguous();
    works.push_back(ch.send(storage, dst));
  }
  listen(ch, dst, expected.release());  // the receiver sends nothing more
  ch.wait_all(works);
}

namespace {

// from_remote_init of the layout format: a TensorDict per level, leaves views
// of `storage`.
TensorDictBase build_from_layout(const json& structure, const at::Tensor& storage) {
  const json& entries = structure.at("layout");
  TensorDict out(entries.at(0).at(2).at("batch").get<std::vector<int64_t>>());
  for (std::size_t i = 1; i < entries.size(); ++i) {
    const json& e = entries[i];
    NestedKey key(e.at(0).get<std::vector<std::string>>());
    const json& info = e.at(2);
    if (info.contains("batch")) {
      if (!out.contains(key))
        out.set(key, TensorDict(info.at("batch").get<std::vector<int64_t>>()));
    } else if (info.contains("dtype")) {
      const auto dtype = dtype_from_string(info.at("dtype").get<std::string>());
      const auto shape = info.at("shape").get<std::vector<int64_t>>();
      const int64_t numel = c10::multiply_integers(shape);
      const int64_t nbytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
      at::Tensor leaf =
          nbytes == 0
              ? at::empty(shape, at::TensorOptions().dtype(dtype))
              : storage.narrow(0, info.at("offset").get<int64_t>(), nbytes).view(dtype).view(shape);
      out.set(key, leaf);
    }
  }
  if (!structure.at("non_tensors").is_null()) {
    for (const json& item : structure.at("non_tensors")) {
      NestedKey key(item[0].get<std::vector<std::string>>());
      if (item[1].get<bool>())
        out.set_non_tensor_stack(key, item[2]);
      else
        out.set_non_tensor(key, item[2]);
    }
  }
  return out;
}

}  // namespace

TensorDictBase from_remote_init(c10d::ProcessGroup& pg, int src, const TransferOptions& options) {
  check_peer(pg, src, "from_remote_init", "source");
  Channel ch(pg, options, "from_remote_init from rank " + std::to_string(src));
  at::Tensor expectation = at::zeros({kECount}, at::kLong);
  expectation.data_ptr<int64_t>()[kEMagic] = kExpectMagic;
  expectation.data_ptr<int64_t>()[kEKind] = kExpectInit;
  FirstReceive first(ch, src, kHeaderBytes, false);
  auto announced = ch.send(expectation, src);
  ch.wait(first.work());
  int64_t h[kHCount];
  read_first(ch, first.data(), src, announced, h);
  ch.wait(announced);
  if (h[kHKind] != kInitHeader) {
    if (h[kHKind] == kSendRefused)
      throw_called(ch, src, "send(), which pairs with recv() into an existing tensordict");
    throw FormatError(ch.what() + ": unknown message kind " + std::to_string(h[kHKind]));
  }
  if (h[kHFlatBytes] < 0 || h[kHExtraBytes] < 0)
    throw FormatError(ch.what() + ": the header gives negative sizes");
  const std::string structure = ch.recv_string(h[kHExtraBytes], src);
  at::Tensor storage = peer_sized_buffer(ch, h[kHFlatBytes]);
  if (h[kHFlatBytes] > 0) ch.recv_now(storage, src);
  try {
    json parsed = json::parse(structure);
    if (h[kHMode] == kInitLayout) return build_from_layout(parsed, storage);
    return TensorDict::from_consolidated(storage, nlohmann::ordered_json(parsed));
  } catch (const json::exception& e) {
    throw FormatError(ch.what() + ": the structure message is not valid: " + e.what());
  } catch (const c10::Error& e) {  // offsets or shapes outside the buffer
    throw FormatError(ch.what() + ": the structure message does not fit its buffer: " +
                      e.what_without_backtrace());
  }
}

// ---- collectives ------------------------------------------------------------------

void broadcast(const TensorDictBase& td, c10d::ProcessGroup& pg, int root,
               const TransferOptions& options) {
  if (root < 0 || root >= pg.getSize())
    throw ValueError("broadcast: root rank " + std::to_string(root) + " is not in the group of " +
                     std::to_string(pg.getSize()));
  Channel ch(pg, options, "broadcast from rank " + std::to_string(root));
  const Layout layout = describe(td);
  const TransferMode mode = choose_mode(layout, options);
  agree(ch, layout, mode, root);
  const bool is_root = pg.getRank() == root;

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
void reduce_leaves(const TensorDictBase& td, c10d::ProcessGroup& pg, c10d::ReduceOp op, int root,
                   const TransferOptions& options) {
  const std::string name = root < 0 ? "all_reduce" : "reduce";
  if (root >= pg.getSize())
    throw ValueError("reduce: destination rank " + std::to_string(root) +
                     " is not in the group of " + std::to_string(pg.getSize()));
  Channel ch(pg, options, root < 0 ? name : name + " to rank " + std::to_string(root));
  const Layout layout = describe(td);
  agree(ch, layout, TransferMode::Auto, std::max(root, 0));
  std::map<at::ScalarType, std::vector<const Leaf*>> groups;
  for (const Leaf& leaf : layout.leaves) {
    if (leaf.dtype == at::kBool)
      throw TypeError(name + ": the leaf " + leaf.key.repr() +
                      " is a bool tensor, which process groups do not reduce; cast it first");
    if (leaf.nbytes > 0) groups[leaf.dtype].push_back(&leaf);
  }
  const bool receives = root < 0 || pg.getRank() == root;
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

void all_reduce(const TensorDictBase& td, c10d::ProcessGroup& pg, c10d::ReduceOp op,
                const TransferOptions& options) {
  reduce_leaves(td, pg, op, -1, options);
}

void reduce(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst, c10d::ReduceOp op,
            const TransferOptions& options) {
  if (dst < 0)
    throw ValueError("reduce: destination rank " + std::to_string(dst) +
                     " is not in the group of " + std::to_string(pg.getSize()));
  reduce_leaves(td, pg, op, dst, options);
}

void gather_and_stack(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                      const TransferOptions& options) {
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
  Channel ch(pg, options, "all_gather");
  const Layout layout = describe(td);
  agree(ch, layout, TransferMode::Auto, 0);
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
