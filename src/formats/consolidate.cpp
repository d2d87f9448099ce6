// The consolidated single-buffer format (docs/formats.md, "Consolidated buffers and files"):
// consolidate(), the consolidated file, from_consolidated(), and the metadata
// of a consolidated tensordict.
#include "core/internal.h"
#include "io/json_io.h"
#include "storage/lazy_stack/lazy_ops.h"
#include "storage/memmap/mapped_file.h"

#include <tensordict/storage/memmap.h>

#include <ATen/ATen.h>

#include <unistd.h>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace tensordict {

using detail::as_lazy_stack;
using detail::format_shape;

namespace {

static_assert(std::endian::native == std::endian::little,
              "the consolidated format is written little-endian");

constexpr const char* kReserved[] = {"cls", "non_tensors", "leaves", "cls_metadata", "size"};
constexpr const char* kTensorDictCls = "TensorDict";
constexpr const char* kLazyStackCls = "LazyStackedTensorDict";
constexpr const char* kNonTensorStackCls = "NonTensorStack";
// Limits of a NonTensorStack read from metadata (docs/state_dict.md): its
// batch dims (one per nested NonTensorStack node) and its values (a
// NonTensorData member with a batch size is repeated over it).
constexpr int kMaxStackDims = 64;
constexpr int64_t kMaxStackValues = int64_t{1} << 24;

int64_t pad_of(int64_t nbytes) { return (8 - nbytes % 8) % 8; }
int64_t nbytes_of(const at::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

NestedKey child_key(const NestedKey& path, const std::string& k) {
  return path.empty() ? NestedKey(k) : path.child(k);
}

// A leaf of `dtype` and `shape` at byte `start` of `buffer` (1-D uint8), as a
// view of the buffer's storage. A start that is not a multiple of the element
// size (a complex128 leaf at 8 mod 16: at::Tensor counts storage offsets in
// elements) gets a tensor over the same memory that keeps the storage alive.
at::Tensor leaf_view(const at::Tensor& buffer, int64_t start, at::ScalarType dtype,
                     at::IntArrayRef shape) {
  const auto item = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t byte_offset = buffer.storage_offset() + start;
  const auto strides = c10::contiguous_strides(shape);
  const auto options = buffer.options().dtype(dtype);
  if (byte_offset % item == 0)
    return at::empty({0}, options).set_(buffer.storage(), byte_offset / item, shape, strides);
  return at::from_blob(
      static_cast<std::uint8_t*>(buffer.data_ptr()) + start, shape, strides,
      [keep = buffer.storage()](void*) {}, options);
}

// ---- writing: the layout of the buffer ------------------------------------------------

// The tensor leaves in buffer order: depth-first in key order, a lazy stack
// member by member. Checks the reserved names and the device on the way.
void collect_leaves(const TensorDictBase& td, const NestedKey& path,
                    std::vector<at::Tensor>& leaves) {
  if (const auto* ls = as_lazy_stack(td)) {
    for (std::size_t i = 0; i < ls->members().size(); ++i)
      collect_leaves(ls->members()[i], child_key(path, std::to_string(i)), leaves);
    return;
  }
  for (const auto& [k, v] : td.items()) {
    const NestedKey key = child_key(path, k.front());
    if (v.is_tensor()) {
      const at::Tensor& t = v.tensor();
      if (!t.device().is_cpu())
        throw DeviceError("consolidate: the leaf " + key.repr() + " is on " + t.device().str() +
                          "; only CPU tensors can be consolidated");
      if (t.is_nested())
        throw ValueError("consolidate: the leaf " + key.repr() +
                         " is a nested tensor, which is not supported");
      if (t.layout() != at::kStrided)
        throw TypeError("consolidate: the leaf " + key.repr() + " is a " + c10::str(t.layout()) +
                        " tensor; only dense (strided) tensors can be "
                        "consolidated (call to_dense() first)");
      leaves.push_back(t);
    } else if (v.is_tensordict() || v.is_non_tensor_stack()) {
      // Both are nodes of the metadata, keyed by their name beside its fields.
      for (const char* r : kReserved)
        if (k.front() == r)
          throw KeyError(std::string("consolidate: the ") +
                         (v.is_tensordict() ? "nested tensordict " : "NonTensorStack ") +
                         key.repr() +
                         " cannot be consolidated: 'cls', 'non_tensors', 'leaves', "
                         "'cls_metadata' and 'size' are reserved names in the consolidated "
                         "metadata (tensor and NonTensorData entries may use them)");
      if (v.is_tensordict()) collect_leaves(v.tensordict(), key, leaves);
    }
  }
}

struct Layout {
  std::vector<at::Tensor> leaves;
  std::vector<int64_t> starts;
  int64_t size = 0;  // bytes of the buffer
};

Layout plan_layout(const TensorDictBase& td) {
  Layout layout;
  collect_leaves(td, NestedKey(), layout.leaves);
  for (const auto& t : layout.leaves) {
    layout.starts.push_back(layout.size);
    const int64_t n = nbytes_of(t);
    layout.size += n + pad_of(n);
  }
  return layout;
}

// The bytes of `t` in C order (conjugate and negative bits resolved).
at::Tensor materialized(const at::Tensor& t) { return t.resolve_conj().resolve_neg().contiguous(); }

// A copy of `td` whose leaves are views of `buffer` at the layout's starts.
TensorDictBase rebuild_on(const TensorDictBase& td, const at::Tensor& buffer, const Layout& layout,
                          std::size_t& next) {
  if (const auto* ls = as_lazy_stack(td)) {
    std::vector<TensorDictBase> members;
    for (const auto& m : ls->members()) members.push_back(rebuild_on(m, buffer, layout, next));
    return detail::make_lazy(std::move(members), ls->stack_dim(), ls->member_batch());
  }
  TensorDict out = detail::make_tensordict(td.batch_size().vec(), td.device());
  for (const auto& [k, v] : td.items()) {
    const std::string& name = k.front();
    switch (v.kind()) {
      case EntryKind::Tensor: {
        const at::Tensor& t = v.tensor();
        out.node().write(name, leaf_view(buffer, layout.starts[next], t.scalar_type(), t.sizes()));
        ++next;
        break;
      }
      case EntryKind::TensorDict:
        out.node().write(name, rebuild_on(v.tensordict(), buffer, layout, next));
        break;
      case EntryKind::NonTensor:
        out.node().write(name, v.non_tensor());
        break;
      case EntryKind::NonTensorStack:  // kept out of the buffer, like NonTensorData
        out.node().write(name, v.non_tensor_stack());
        break;
    }
  }
  return out;
}

TensorDictBase views_over(const TensorDictBase& td, const at::Tensor& buffer,
                          const Layout& layout) {
  std::size_t next = 0;
  TensorDictBase out = rebuild_on(td, buffer, layout, next);
  out.lock_();
  return out;
}

// ---- the metadata (docs/formats.md, "Consolidated metadata") ----------------------------

// The node of a NonTensorStack, as Python writes one built from a nested
// list: stacked along dim 0, one member per index of the first dim, numbered
// "0", "1", ...; a 1-D stack lists its values as NonTensorData members (batch
// size [], in "non_tensors"), a deeper one holds a NonTensorStack node per
// row, after "cls_metadata". `values` is the stack's row-major values from
// `first`.
ojson stack_metadata(const std::vector<nlohmann::json>& values, std::size_t first,
                     at::IntArrayRef batch, const ojson& device, bool locked) {
  ojson md = ojson::object();
  md["cls"] = kNonTensorStackCls;
  ojson non_tensors = ojson::object();
  std::vector<std::pair<std::string, ojson>> rows;
  const at::IntArrayRef inner = batch.slice(1);
  std::size_t row_size = 1;
  for (int64_t d : inner) row_size *= static_cast<std::size_t>(d);
  for (int64_t i = 0; i < batch[0]; ++i) {
    const std::size_t start = first + static_cast<std::size_t>(i) * row_size;
    if (inner.empty())
      non_tensors[std::to_string(i)] = ojson::array({ojson(values[start]), ojson::array(), device});
    else
      rows.emplace_back(std::to_string(i), stack_metadata(values, start, inner, device, locked));
  }
  md["non_tensors"] = std::move(non_tensors);
  md["leaves"] = ojson::object();
  md["cls_metadata"] = ojson{{"stack_dim", 0}, {"stack_dim_name", nullptr}, {"is_locked", locked}};
  for (auto& [name, row] : rows) md[name] = std::move(row);
  return md;
}

ojson node_metadata(const TensorDictBase& td, const std::vector<int64_t>& starts,
                    std::size_t& next) {
  ojson md = ojson::object();
  if (const auto* ls = as_lazy_stack(td)) {
    md["cls"] = kLazyStackCls;
    md["non_tensors"] = ojson::object();
    md["leaves"] = ojson::object();
    md["cls_metadata"] = ojson{
        {"stack_dim", ls->stack_dim()}, {"stack_dim_name", nullptr}, {"is_locked", td.is_locked()}};
    for (std::size_t i = 0; i < ls->members().size(); ++i)
      md[std::to_string(i)] = node_metadata(ls->members()[i], starts, next);
    return md;
  }
  ojson non_tensors = ojson::object();
  ojson leaves = ojson::object();
  std::vector<std::pair<std::string, ojson>> nested;
  for (const auto& [k, v] : td.items()) {
    const std::string& name = k.front();
    switch (v.kind()) {
      case EntryKind::Tensor: {
        const at::Tensor& t = v.tensor();
        const int64_t n = nbytes_of(t), start = starts[next++];
        leaves[name] = ojson::array({detail::dtype_to_string(t.scalar_type()), t.sizes().vec(),
                                     start, start + n + pad_of(n), pad_of(n)});
        break;
      }
      case EntryKind::TensorDict:
        nested.emplace_back(name, node_metadata(v.tensordict(), starts, next));
        break;
      case EntryKind::NonTensor: {
        const NonTensorData& nt = v.non_tensor();
        non_tensors[name] =
            ojson::array({ojson(nt.data()), nt.batch_size().vec(),
                          nt.device() ? ojson(nt.device()->str()) : ojson(nullptr)});
        break;
      }
      case EntryKind::NonTensorStack: {
        const NonTensorStack& s = v.non_tensor_stack();
        const ojson dev = s.device() ? ojson(s.device()->str()) : ojson(nullptr);
        nested.emplace_back(name,
                            stack_metadata(s.values(), 0, s.batch_size(), dev, td.is_locked()));
        break;
      }
    }
  }
  md["cls"] = kTensorDictCls;
  md["non_tensors"] = std::move(non_tensors);
  md["leaves"] = std::move(leaves);
  const auto device = td.device();
  ojson names = ojson::array();  // no dim names in C++: one null per batch dim
  for (int64_t d = 0; d < td.batch_dims(); ++d) names.push_back(nullptr);
  md["cls_metadata"] = ojson{{"device", device ? ojson(device->str()) : ojson(nullptr)},
                             {"names", names},
                             {"batch_size", td.batch_size().vec()},
                             {"is_locked", td.is_locked()}};
  for (auto& [name, sub] : nested) md[name] = std::move(sub);
  return md;
}

ojson metadata_of(const TensorDictBase& td, const std::vector<int64_t>& starts) {
  std::size_t next = 0;
  return node_metadata(td, starts, next);
}

std::string dump_metadata(const ojson& metadata) {
  try {
    return metadata.dump();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(std::string("consolidate: the metadata cannot be written as JSON: ") +
                     e.what());
  }
}

// ---- a tensordict already consolidated -----------------------------------------------------

struct Analysis {
  std::string problem;  // empty when consolidated
  std::vector<int64_t> starts;
  at::Tensor storage;  // 1-D uint8, the buffer
};

Analysis analyze(const TensorDictBase& td) {
  Analysis a;
  std::vector<at::Tensor> leaves;
  std::vector<NestedKey> keys;
  // collect_leaves without the reserved-name check would name no key; walk
  // with keys here (the same order).
  std::function<void(const TensorDictBase&, const NestedKey&)> walk =
      [&](const TensorDictBase& node, const NestedKey& path) {
        if (const auto* ls = as_lazy_stack(node)) {
          for (std::size_t i = 0; i < ls->members().size(); ++i)
            walk(ls->members()[i], child_key(path, std::to_string(i)));
          return;
        }
        for (const auto& [k, v] : node.items()) {
          if (v.is_tensor()) {
            leaves.push_back(v.tensor());
            keys.push_back(child_key(path, k.front()));
          } else if (v.is_tensordict()) {
            walk(v.tensordict(), child_key(path, k.front()));
          }
        }
      };
  walk(td, NestedKey());
  // The buffer: the storage with the lowest address among the leaves'.
  const c10::Storage* base = nullptr;
  for (const auto& t : leaves) {
    const auto& s = t.storage();
    if (s.data() && (!base || s.data() < base->data())) base = &s;
  }
  const auto* base_ptr = base ? static_cast<const std::uint8_t*>(base->data()) : nullptr;
  const int64_t base_bytes = base ? static_cast<int64_t>(base->nbytes()) : 0;
  std::vector<std::pair<int64_t, std::size_t>> ranges;  // (start, leaf)
  int64_t size = 0;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const at::Tensor& t = leaves[i];
    const int64_t n = nbytes_of(t);
    if (!t.device().is_cpu() || !t.is_contiguous() || t.is_conj() || t.is_neg()) {
      a.problem = "the leaf " + keys[i].repr() + " is not a contiguous CPU view";
      return a;
    }
    int64_t start = 0;
    if (base_ptr) {
      const auto* ptr = static_cast<const std::uint8_t*>(t.data_ptr());
      const bool inside = ptr >= base_ptr && ptr - base_ptr + n + pad_of(n) <= base_bytes;
      if (inside) start = ptr - base_ptr;
      // An empty leaf holds no bytes: it is at home anywhere (start 0 if it
      // is not a view of the buffer).
      if (n > 0 && (!inside || start % 8 != 0)) {
        a.problem = "the leaf " + keys[i].repr() +
                    " is not an 8-byte aligned view inside the buffer of the other leaves";
        return a;
      }
    }
    a.starts.push_back(start);
    if (n > 0) ranges.emplace_back(start, i);
    size = std::max(size, start + n + pad_of(n));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t r = 1; r < ranges.size(); ++r) {
    const auto& [prev_start, prev] = ranges[r - 1];
    const int64_t prev_n = nbytes_of(leaves[prev]);
    if (prev_start + prev_n + pad_of(prev_n) > ranges[r].first) {
      a.problem = "the leaves " + keys[prev].repr() + " and " + keys[ranges[r].second].repr() +
                  " overlap in the buffer";
      return a;
    }
  }
  if (base)
    a.storage = at::empty({0}, at::TensorOptions().dtype(at::kByte)).set_(*base, 0, {size}, {1});
  else
    a.storage = at::empty({0}, at::TensorOptions().dtype(at::kByte));
  return a;
}

Analysis analyze_or_throw(const TensorDictBase& td) {
  Analysis a = analyze(td);
  if (!a.problem.empty()) throw ValueError("the tensordict is not consolidated: " + a.problem);
  return a;
}

// ---- reading (docs/formats.md, "Consolidated file") -------------------------------------------

struct Reader {
  std::string context;  // "consolidated file 'x'" or "consolidated metadata"
  at::Tensor storage;   // 1-D uint8

  [[noreturn]] void fail(const NestedKey& path, const std::string& what) const {
    throw FormatError(context + ": " + (path.empty() ? std::string("root") : path.repr()) + ": " +
                      what);
  }

  const ojson& field(const ojson& node, const char* name, const NestedKey& path,
                     bool object) const {
    auto it = node.find(name);
    if (it == node.end()) fail(path, std::string("missing \"") + name + "\"");
    if (object && !it->is_object())
      fail(path, std::string("\"") + name + "\" is not a JSON object");
    return *it;
  }

  int64_t integer(const ojson& j, const NestedKey& path, const std::string& what) const {
    if (!j.is_number_integer()) fail(path, what + " is not an integer: " + j.dump());
    if (j.is_number_unsigned() &&
        j.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, what + " is out of range: " + j.dump());
    return j.get<int64_t>();
  }

  std::vector<int64_t> shape(const ojson& j, const NestedKey& path, const std::string& what) const {
    if (!j.is_array()) fail(path, what + " is not a list: " + j.dump());
    std::vector<int64_t> out;
    for (const auto& d : j) {
      int64_t v = integer(d, path, what);
      if (v < 0) fail(path, what + " has a negative size: " + j.dump());
      out.push_back(v);
    }
    return out;
  }

  std::optional<at::Device> device(const ojson& j, const NestedKey& path) const {
    if (j.is_null()) return std::nullopt;
    if (!j.is_string()) fail(path, "device is not a string or null: " + j.dump());
    try {
      return at::Device(j.get<std::string>());
    } catch (const c10::Error&) {
      fail(path, "invalid device '" + j.get<std::string>() + "'");
    }
  }

  at::Tensor leaf(const std::string& name, const ojson& entry, const NestedKey& key) const {
    if (name.rfind("<NJT", 0) == 0) fail(key, "jagged nested tensors are not supported");
    if (!entry.is_array() || (entry.size() != 5 && entry.size() != 6))
      fail(key, "a leaf entry must be [dtype, shape, start, stop, pad], got " + entry.dump());
    if (!entry[0].is_string()) fail(key, "the dtype is not a string: " + entry[0].dump());
    at::ScalarType dtype;
    try {
      dtype = detail::dtype_from_string(entry[0].get<std::string>());
    } catch (const FormatError&) {
      fail(key, "unknown dtype " + entry[0].dump());
    }
    const auto sizes = shape(entry[1], key, "the shape");
    const int64_t start = integer(entry[2], key, "start");
    const int64_t stop = integer(entry[3], key, "stop");
    const int64_t pad = integer(entry[4], key, "pad");
    const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
    int64_t nbytes = item;
    for (auto s : sizes) {
      if (s != 0 && nbytes > std::numeric_limits<int64_t>::max() / s)
        fail(key, "the shape " + format_shape(sizes) + " is too large");
      nbytes *= s;
    }
    const int64_t size = storage.numel();
    if (start < 0 || stop < start || stop > size)
      fail(key, "the leaf's bytes [" + std::to_string(start) + ", " + std::to_string(stop) +
                    ") are outside the buffer of " + std::to_string(size) + " bytes");
    if (pad < 0 || pad >= 8 || stop - start != nbytes + pad)
      fail(key, "the leaf's range [" + std::to_string(start) + ", " + std::to_string(stop) +
                    ") with pad " + std::to_string(pad) + " does not hold " +
                    std::to_string(nbytes) + " bytes of " + format_shape(sizes) + " " +
                    detail::dtype_to_string(dtype) + " (expected stop - start = bytes + pad)");
    return leaf_view(storage, start, dtype, sizes);
  }

  void put(TensorDictBase& td, const std::string& name, Value value, const NestedKey& key) const {
    try {
      td.set(name, std::move(value));
    } catch (const Error& e) {
      fail(key, e.what());
    }
  }

  // A member index of a NonTensorStack node: "0", "1", ... (no sign, no
  // leading zero); -1 for any other name.
  static int64_t member_index(const std::string& name) {
    if (name.empty() || name.size() > 18 || (name.size() > 1 && name[0] == '0')) return -1;
    int64_t i = 0;
    for (char c : name) {
      if (c < '0' || c > '9') return -1;
      i = i * 10 + (c - '0');
    }
    return i;
  }

  // A NonTensorStack node (the layout of stack_metadata, or any Python
  // writes): members "0" to "n-1", NonTensorData entries in "non_tensors" or
  // NonTensorStack nodes, of one batch size, stacked along "stack_dim".
  // `hint` is the batch size the stack should start with (its parent's): a
  // stack without members does not record its inner dims, so it takes the
  // hint when that is empty along its first dim ([0] otherwise). `level`
  // counts the NonTensorStack nodes above this one.
  Value stack_node(const ojson& md, const NestedKey& path, at::IntArrayRef hint, int level) const {
    if (level >= kMaxStackDims)
      fail(path, "NonTensorStack nodes nested deeper than " + std::to_string(kMaxStackDims) +
                     " levels (a batch dim each; the limit of this library)");
    if (!md.is_object()) fail(path, "a NonTensorStack node is not a JSON object");
    const ojson& non_tensors = field(md, "non_tensors", path, true);
    const ojson& leaves = field(md, "leaves", path, true);
    const ojson& cls_metadata = field(md, "cls_metadata", path, true);
    if (!leaves.empty()) fail(path, "a NonTensorStack node holds tensor leaves");
    int64_t stack_dim = 0;  // Python's default when absent
    if (const auto sd = cls_metadata.find("stack_dim"); sd != cls_metadata.end())
      stack_dim = integer(*sd, path, "stack_dim");

    struct Member {
      std::string name;
      const ojson* entry;
      bool non_tensor;  // in "non_tensors" (else a node)
    };
    std::map<int64_t, Member> members;
    auto add = [&](const std::string& name, const ojson& entry, bool non_tensor) {
      const int64_t i = member_index(name);
      if (i < 0)
        fail(path, "the members of a NonTensorStack are numbered \"0\", \"1\", ...; found \"" +
                       name + "\"");
      if (!members.emplace(i, Member{name, &entry, non_tensor}).second)
        fail(path, "the NonTensorStack member \"" + name +
                       "\" is given twice (in \"non_tensors\" and as a node)");
    };
    for (auto it = non_tensors.begin(); it != non_tensors.end(); ++it)
      add(it.key(), it.value(), true);
    for (auto it = md.begin(); it != md.end(); ++it) {
      bool reserved = false;
      for (const char* r : kReserved) reserved = reserved || it.key() == r;
      if (!reserved) add(it.key(), it.value(), false);
    }
    const auto n = static_cast<int64_t>(members.size());
    if (n == 0) {
      std::vector<int64_t> batch{0};
      if (!hint.empty() && hint[0] == 0) batch = hint.vec();
      return NonTensorStack::from_flat({}, std::move(batch));
    }
    for (int64_t i = 0; i < n; ++i)
      if (!members.count(i))
        fail(path, "the NonTensorStack member \"" + std::to_string(i) + "\" is missing (" +
                       std::to_string(n) + " members, numbered up to \"" +
                       members.rbegin()->second.name + "\")");

    // The hint of a member: the stack's without the stack dim.
    std::vector<int64_t> member_hint = hint.vec();
    const int64_t hd = stack_dim < 0 ? stack_dim + static_cast<int64_t>(hint.size()) : stack_dim;
    if (hd >= 0 && hd < static_cast<int64_t>(hint.size()))
      member_hint.erase(member_hint.begin() + hd);
    else
      member_hint.clear();

    std::vector<Value> values;
    values.reserve(members.size());
    for (const auto& [i, m] : members) {
      const NestedKey key = child_key(path, m.name);
      if (m.non_tensor) {
        const ojson& e = *m.entry;
        if (!e.is_array() || (e.size() != 2 && e.size() != 3))
          fail(key, "a NonTensorData member must be [data, batch_size, device], got " + e.dump());
        values.emplace_back(NonTensorData(detail::to_plain(e[0]), shape(e[1], key, "batch_size"),
                                          e.size() == 3 ? device(e[2], key) : std::nullopt));
      } else {
        const ojson& sub = *m.entry;
        const auto cls = sub.is_object() ? sub.find("cls") : sub.end();
        if (cls == sub.end() || !cls->is_string() || cls->get<std::string>() != kNonTensorStackCls)
          fail(key,
               "a member of a NonTensorStack must be a NonTensorData entry or a "
               "NonTensorStack node, got " +
                   (cls == sub.end() ? std::string("a node without \"cls\"")
                                     : "a " + cls->dump() + " node"));
        values.push_back(stack_node(sub, key, member_hint, level + 1));
      }
    }
    const auto batch_of = [](const Value& v) {
      return v.is_non_tensor() ? v.non_tensor().batch_size() : v.non_tensor_stack().batch_size();
    };
    const at::IntArrayRef b0 = batch_of(values[0]);
    for (std::size_t i = 1; i < values.size(); ++i)
      if (!batch_of(values[i]).equals(b0))
        fail(path, "the NonTensorStack members differ in batch size: \"0\" is " + format_shape(b0) +
                       ", \"" + std::to_string(i) + "\" is " + format_shape(batch_of(values[i])));
    const auto dims = static_cast<int64_t>(b0.size()) + 1;
    if (dims > kMaxStackDims)
      fail(path, "a NonTensorStack of " + std::to_string(dims) + " batch dims (the limit of " +
                     "this library is " + std::to_string(kMaxStackDims) + ")");
    int64_t count = n;
    for (int64_t d : b0) {
      if (d != 0 && count > kMaxStackValues / d)
        fail(path, "a NonTensorStack of " + std::to_string(n) + " members of batch size " +
                       format_shape(b0) + " holds more than " + std::to_string(kMaxStackValues) +
                       " values (the limit of this library)");
      count *= d;
    }
    if (count > kMaxStackValues)
      fail(path, "a NonTensorStack holding more than " + std::to_string(kMaxStackValues) +
                     " values (the limit of this library)");
    if (stack_dim < -dims || stack_dim >= dims)
      fail(path, "stack_dim " + std::to_string(stack_dim) + " is out of range for members of " +
                     "batch size " + format_shape(b0));
    std::vector<const Value*> items;
    items.reserve(values.size());
    for (const auto& v : values) items.push_back(&v);
    try {
      return detail::stack_non_tensors(items, stack_dim < 0 ? stack_dim + dims : stack_dim,
                                       "NonTensorStack", path, /*collapse_equal=*/false);
    } catch (const Error& e) {
      fail(path, e.what());
    } catch (const c10::Error& e) {
      fail(path, e.what_without_backtrace());
    }
  }

  static bool is_stack_node(const ojson& md) {
    if (!md.is_object()) return false;
    const auto cls = md.find("cls");
    return cls != md.end() && cls->is_string() && cls->get<std::string>() == kNonTensorStackCls;
  }

  TensorDictBase node(const ojson& md, const NestedKey& path) const {
    if (!md.is_object()) fail(path, "a node is not a JSON object");
    const ojson& cls = field(md, "cls", path, false);
    const ojson& non_tensors = field(md, "non_tensors", path, true);
    const ojson& leaves = field(md, "leaves", path, true);
    const ojson& cls_metadata = field(md, "cls_metadata", path, true);
    if (!cls.is_string()) fail(path, "\"cls\" is not a class name: " + cls.dump());
    const auto cls_name = cls.get<std::string>();
    const auto locked_it = cls_metadata.find("is_locked");
    const bool locked =
        locked_it != cls_metadata.end() && locked_it->is_boolean() && locked_it->get<bool>();
    std::vector<std::pair<std::string, const ojson*>> subs;
    for (auto it = md.begin(); it != md.end(); ++it) {
      bool reserved = false;
      for (const char* r : kReserved) reserved = reserved || it.key() == r;
      if (!reserved) subs.emplace_back(it.key(), &it.value());
    }
    TensorDictBase out;
    if (cls_name == kLazyStackCls) {
      if (!non_tensors.empty() || !leaves.empty())
        fail(path, "a LazyStackedTensorDict node holds leaves or non-tensors");
      const auto sd = cls_metadata.find("stack_dim");
      if (sd == cls_metadata.end()) fail(path, "missing \"stack_dim\" in \"cls_metadata\"");
      const int64_t stack_dim = integer(*sd, path, "stack_dim");
      std::vector<TensorDictBase> members;
      for (std::size_t i = 0; i < subs.size(); ++i) {
        if (subs[i].first != std::to_string(i))
          fail(path, "the members of a LazyStackedTensorDict must be \"0\", \"1\", ...; found \"" +
                         subs[i].first + "\"");
        members.push_back(node(*subs[i].second, child_key(path, subs[i].first)));
      }
      if (members.empty()) fail(path, "a LazyStackedTensorDict without members");
      try {
        out = lazy_stack(std::move(members), stack_dim);
      } catch (const Error& e) {
        fail(path, e.what());
      }
    } else if (cls_name == kTensorDictCls) {
      const auto bs = cls_metadata.find("batch_size");
      if (bs == cls_metadata.end()) fail(path, "missing \"batch_size\" in \"cls_metadata\"");
      const auto dev = cls_metadata.find("device");
      TensorDict td =
          detail::make_tensordict(shape(*bs, path, "batch_size"),
                                  dev == cls_metadata.end() ? std::nullopt : device(*dev, path));
      out = td;
      for (auto it = non_tensors.begin(); it != non_tensors.end(); ++it) {
        const NestedKey key = child_key(path, it.key());
        const ojson& e = it.value();
        if (!e.is_array() || (e.size() != 2 && e.size() != 3))
          fail(key, "a non-tensor entry must be [data, batch_size, device], got " + e.dump());
        NonTensorData nt(detail::to_plain(e[0]), shape(e[1], key, "batch_size"),
                         e.size() == 3 ? device(e[2], key) : std::nullopt);
        put(out, it.key(), std::move(nt), key);
      }
      for (auto it = leaves.begin(); it != leaves.end(); ++it) {
        const NestedKey key = child_key(path, it.key());
        put(out, it.key(), leaf(it.key(), it.value(), key), key);
      }
      for (const auto& [name, sub] : subs) {
        const NestedKey key = child_key(path, name);
        if (is_stack_node(*sub))
          put(out, name, stack_node(*sub, key, out.batch_size(), 0), key);
        else
          put(out, name, node(*sub, key), key);
      }
    } else if (cls_name == kNonTensorStackCls) {
      fail(path,
           "class \"NonTensorStack\" is not supported here: a NonTensorStack node is an "
           "entry of a TensorDict node, not the root or a member of a "
           "LazyStackedTensorDict");
    } else {
      fail(path, "class \"" + cls_name +
                     "\" is not supported (TensorDict and LazyStackedTensorDict are)");
    }
    if (locked) out.lock_();
    return out;
  }
};

int64_t read_le_int64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

}  // namespace

// ---- TensorDictBase ----------------------------------------------------------------------------

TensorDictBase TensorDictBase::consolidate() const {
  const Layout layout = plan_layout(*this);
  at::Tensor buffer = at::zeros({layout.size}, at::TensorOptions().dtype(at::kByte));
  auto* dst = static_cast<std::uint8_t*>(buffer.data_ptr());
  for (std::size_t i = 0; i < layout.leaves.size(); ++i) {
    const at::Tensor src = materialized(layout.leaves[i]);
    if (const int64_t n = nbytes_of(src); n > 0)
      std::memcpy(dst + layout.starts[i], src.data_ptr(), static_cast<std::size_t>(n));
  }
  return views_over(*this, buffer, layout);
}

TensorDictBase TensorDictBase::consolidate(const std::string& path) const {
  const Layout layout = plan_layout(*this);
  const std::string text = dump_metadata(metadata_of(*this, layout.starts));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw StorageError("consolidate: cannot create " + tmp);
    static const char zeros[8] = {};
    for (const auto& leaf : layout.leaves) {
      const at::Tensor src = materialized(leaf);
      const int64_t n = nbytes_of(src);
      out.write(static_cast<const char*>(src.data_ptr()), n);
      out.write(zeros, pad_of(n));
    }
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::uint64_t m = text.size();
    char footer[8];
    for (int i = 0; i < 8; ++i) footer[i] = static_cast<char>((m >> (8 * i)) & 0xFF);
    out.write(footer, 8);
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw StorageError("consolidate: cannot write " + tmp);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    throw StorageError("consolidate: cannot rename " + tmp + " to " + path + ": " + ec.message());
  const int64_t total = layout.size + static_cast<int64_t>(text.size()) + 8;
  at::Tensor file = detail::map_file(path, at::kByte, {total}, /*writable=*/true, "");
  return views_over(*this, file.narrow(0, 0, layout.size), layout);
}

bool TensorDictBase::is_consolidated() const { return analyze(*this).problem.empty(); }

at::Tensor TensorDictBase::consolidated_storage() const { return analyze_or_throw(*this).storage; }

nlohmann::ordered_json TensorDictBase::consolidated_metadata() const {
  return metadata_of(*this, analyze_or_throw(*this).starts);
}

// ---- TensorDict::from_consolidated --------------------------------------------------------------

TensorDictBase TensorDict::from_consolidated(const std::string& path) {
  const std::string context = "consolidated file '" + path + "'";
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw FormatError(context + ": cannot read it: " + ec.message());
  if (size < 8)
    throw FormatError(context + ": " + std::to_string(size) +
                      " bytes, expected at least 8 (the int64 length of the metadata at its end)");
  at::Tensor file = detail::map_file(path, at::kByte, {static_cast<int64_t>(size)},
                                     /*writable=*/false, "");
  const auto* bytes = static_cast<const std::uint8_t*>(file.data_ptr());
  const int64_t m = read_le_int64(bytes + size - 8);
  const int64_t available = static_cast<int64_t>(size) - 8;
  if (m < 0 || m > available)
    throw FormatError(context + ": its last 8 bytes give a metadata length of " +
                      std::to_string(m) + " bytes, but only " + std::to_string(available) +
                      " bytes precede them (truncated, or not a consolidated file)");
  const int64_t s = available - m;
  ojson metadata;
  try {
    metadata = detail::parse_python_json(
        std::string(reinterpret_cast<const char*>(bytes + s), static_cast<std::size_t>(m)),
        context + ": the metadata");
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(context + ": the " + std::to_string(m) +
                      " bytes of metadata before the "
                      "length footer are not valid JSON (" +
                      e.what() + ")");
  }
  return Reader{context, file.narrow(0, 0, s)}.node(metadata, NestedKey());
}

TensorDictBase TensorDict::from_consolidated(const at::Tensor& storage,
                                             const nlohmann::ordered_json& metadata) {
  if (!storage.defined() || storage.dim() != 1 || storage.scalar_type() != at::kByte ||
      !storage.device().is_cpu() || !storage.is_contiguous())
    throw TypeError("from_consolidated: the storage must be a contiguous 1-D uint8 CPU tensor");
  // The reader recurses once per level.
  if (detail::json_depth(metadata) > detail::kMaxNestingDepth)
    throw FormatError("consolidated metadata: nested deeper than " +
                      std::to_string(detail::kMaxNestingDepth) +
                      " levels (the limit of this library, docs/errors.md)");
  return Reader{"consolidated metadata", storage}.node(metadata, NestedKey());
}

}  // namespace tensordict
