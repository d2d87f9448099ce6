// The structure of a tensordict as transfers see it, its flat buffer and its
// non-tensor values (layout.h).

#include "distributed/layout.h"

#include "io/json_io.h"

#include <tensordict/errors.h>

#include <ATen/MemoryOverlap.h>

#include <algorithm>
#include <cstring>
#include <deque>

namespace tensordict::detail::distributed {

namespace {

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

}  // namespace

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
    EntryDesc e;
    e.key = std::move(f.key);
    e.kind = value.kind();
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

EntryList entries_of(const Layout& layout) {
  EntryList out;
  out.reserve(layout.entries.size());
  for (const EntryDesc& e : layout.entries) out.emplace_back(e.key, e.what());
  return out;
}

json parse_received(const std::string& text, const std::string& invalid_prefix) {
  auto invalid = [&](const std::string& why) { return FormatError(invalid_prefix + why); };
  // The parser itself keeps its levels on the heap; the callback stops it at
  // the first level past the limit, before the rest is read.
  const json::parser_callback_t bounded = [&](int depth, json::parse_event_t event, json&) {
    if (depth >= kMaxNestingDepth &&
        (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start))
      throw invalid("nested deeper than " + std::to_string(kMaxNestingDepth) +
                    " levels (the limit of this library, docs/errors.md)");
    return true;
  };
  try {
    return json::parse(text, bounded);
  } catch (const json::exception& e) {  // not JSON, or not UTF-8
    throw invalid(e.what());
  }
}

EntryList entries_of(const std::string& what, const std::string& from,
                     const std::string& description) {
  const std::string invalid = what + ": the structure received from " + from + " is not valid: ";
  const json entries = parse_received(description, invalid);
  EntryList out;
  try {
    for (const json& entry : entries.get_ref<const json::array_t&>())
      out.emplace_back(NestedKey(entry.at(0).get<std::vector<std::string>>()),
                       entry.at(1).get<std::string>());
  } catch (const json::exception& e) {
    throw FormatError(invalid + e.what());
  } catch (const Error& e) {  // a key that is not valid
    throw FormatError(invalid + e.what());
  }
  return out;
}

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
  throw_mismatch(what, entries_of(what, "this rank", here), there_name,
                 entries_of(what, there_name, there));
}

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

std::vector<NonTensorValue> read_non_tensors(const std::string& what, const TensorDictBase& td,
                                             const Layout& layout, const std::string& payload) {
  std::vector<NonTensorValue> out;
  if (layout.non_tensors.empty() && payload.empty()) return out;
  auto invalid = [&](const std::string& why) {
    return FormatError(what + ": the non-tensor values received are not valid: " + why);
  };
  const json items =
      parse_received(payload, what + ": the non-tensor values received are not valid: ");
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

void apply_non_tensors(const TensorDictBase& td, const std::vector<NonTensorValue>& values) {
  if (values.empty() || td.is_locked()) return;
  TensorDictBase target = td;
  for (const NonTensorValue& v : values) {
    if (td.get_non_tensor(v.key) == v.json) continue;  // only where it differs
    target.set(v.key, v.value);
  }
}

std::string unreceivable(const std::string& what, const Layout& layout) {
  for (const Leaf& leaf : layout.leaves)
    if (at::has_internal_overlap(leaf.tensor) == at::MemOverlap::Yes)
      return what + ": the leaf " + leaf.key.repr() + " (shape " + shape_string(leaf.shape) +
             ", strides " + shape_string(leaf.tensor.strides()) +
             ") is expanded: its elements share memory, so it cannot receive in place; "
             "make it contiguous first (nothing was written)";
  return {};
}

TransferMode choose_mode(const Layout& layout, const TransferOptions& options) {
  if (options.mode != TransferMode::Auto) return options.mode;
  return layout.flat_bytes <= options.flat_max_bytes ? TransferMode::Consolidated
                                                     : TransferMode::PerLeaf;
}

at::Tensor contiguous_cpu(const at::Tensor& t) {
  return t.device().is_cpu() ? t.contiguous() : t.to(at::kCPU).contiguous();
}

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

const at::Tensor* own_memory(const Leaf& leaf, const TensorDictBase& td) {
  const at::Tensor* own =
      detail::find_memory_tensor(td.node_ptr().get(), leaf.key.parts().data(), leaf.key.size());
  if (own && own->is_contiguous() && own->device().is_cpu() && own->scalar_type() == leaf.dtype)
    return own;
  return nullptr;
}

void unpack_leaf(const Leaf& leaf, uint8_t* base, const TensorDictBase& td) {
  if (leaf.nbytes == 0) return;
  if (const at::Tensor* own = own_memory(leaf, td)) {
    std::memcpy(own->data_ptr(), base + leaf.offset, leaf.nbytes);
    return;
  }
  TensorDictBase target = td;
  target.set_(leaf.key,
              at::from_blob(base + leaf.offset, leaf.shape, at::TensorOptions().dtype(leaf.dtype)));
}

void unpack(const Layout& layout, uint8_t* base, const TensorDictBase& td) {
  for (const Leaf& leaf : layout.leaves) unpack_leaf(leaf, base, td);
}

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

}  // namespace tensordict::detail::distributed
