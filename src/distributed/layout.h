#pragma once
// The structure of a tensordict as transfers see it (its entries in sorted key
// order, a hash of them, its leaves at offsets of one flat buffer), the flat
// buffer itself, the non-tensor values that travel as JSON, and the
// StructureError naming the first entry where two structures differ.

#include <tensordict/distributed.h>
#include <tensordict/dtype.h>
#include <tensordict/errors.h>
#include <tensordict/nested_key.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::detail::distributed {

using json = nlohmann::json;

constexpr int64_t kAlign = 16;  // leaves' offsets in the flat buffer

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

inline std::string shape_string(at::IntArrayRef shape) {
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

// The structure of `td`: its entries sorted by their "."-joined keys (stable:
// the order of keys(sort = true)), its leaves at 16-byte aligned offsets of
// the flat buffer in that order, and a hash of it all. Runs on both sides of
// every transfer, so it copies no value and formats no text.
Layout describe(const TensorDictBase& td);

// A structure as (key, what) pairs in sorted key order: what two sides
// compare to name the first difference (the offsets follow from these).
using EntryList = std::vector<std::pair<NestedKey, std::string>>;

EntryList entries_of(const Layout& layout);
// From Layout::text() received from `from` ("rank 1"): FormatError naming
// the transfer and the peer when it is not such a description.
EntryList entries_of(const std::string& what, const std::string& from,
                     const std::string& description);
// The StructureError naming the first entry where `a` (here) and `b` differ.
[[noreturn]] void throw_mismatch(const std::string& what, const EntryList& a,
                                 const std::string& there_name, const EntryList& b);
// `there` is the description received from `there_name`.
[[noreturn]] void throw_mismatch(const std::string& what, const std::string& here,
                                 const std::string& there_name, const std::string& there);

// JSON received from a peer (a structure, non-tensor values), parsed with its
// nesting bounded by kMaxNestingDepth: the copies, comparisons and dumps that
// follow recurse once per level. Text that is not JSON, not UTF-8 or nested
// deeper is a FormatError whose message is `invalid` followed by why.
json parse_received(const std::string& text, const std::string& invalid);

// The most JSON (non-tensor values, structures) one message carries: a
// receiver allocates what the peer announces, so a corrupt or hostile size
// must not become a huge allocation.
constexpr int64_t kMaxJsonBytes = int64_t{1} << 30;

// The non-tensor values of `td` as JSON ([[key parts, is stack, value], ...];
// empty without any); ValueError above kMaxJsonBytes.
std::string non_tensor_payload(const std::string& what, const TensorDictBase& td,
                               const Layout& layout);

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
                                             const Layout& layout, const std::string& payload);
// Replaces the non-tensor values that differ. A locked tensordict (a memmap
// one included) keeps its own: their storage is fixed, and the tensors have
// been received already.
void apply_non_tensors(const TensorDictBase& td, const std::vector<NonTensorValue>& values);

// The receiving side's check, before any message: a leaf whose elements share
// memory (an expanded, stride-0 tensor) cannot be written in place. The
// ValueError naming its key, or "" when every leaf can receive.
std::string unreceivable(const std::string& what, const Layout& layout);
inline void check_receivable(const std::string& what, const Layout& layout) {
  if (std::string error = unreceivable(what, layout); !error.empty()) throw ValueError(error);
}

TransferMode choose_mode(const Layout& layout, const TransferOptions& options);
at::Tensor contiguous_cpu(const at::Tensor& t);
// A 1-D uint8 alias of a contiguous CPU tensor: Gloo moves bytes of any
// dtype this way (its broadcast refuses bool, complex and bfloat16 tensors).
at::Tensor bytes_of(const at::Tensor& t);
// The leaves into a flat buffer at `base` (Layout::flat_bytes bytes), or a new one.
void pack_into(const Layout& layout, uint8_t* base);
at::Tensor pack(const Layout& layout);
// Writes the leaves of `buffer` into `td`: a memcpy into an in-memory
// contiguous leaf, set_ otherwise (so every storage keeps its own: a memmap
// receives into its files, a lazy stack into its members).
void unpack(const Layout& layout, uint8_t* base, const TensorDictBase& td);
// The same for one leaf.
void unpack_leaf(const Leaf& leaf, uint8_t* base, const TensorDictBase& td);
// Whether a receive can write `leaf` straight into `td`'s own memory (an
// in-memory contiguous CPU tensor), and that memory.
const at::Tensor* own_memory(const Leaf& leaf, const TensorDictBase& td);

at::Tensor bytes_tensor(const std::string& s);
// The bytes of a uint8 tensor, up to the first NUL (all_gather pads with them).
std::string tensor_string(const at::Tensor& t);

}  // namespace tensordict::detail::distributed
