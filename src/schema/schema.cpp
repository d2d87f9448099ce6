// Schema and from_schema: pre-allocated, zero-filled tensordicts of any
// registered storage.
#include "core/internal.h"
#include "io/json_io.h"

#include <tensordict/schema.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <exception>
#include <limits>
#include <mutex>
#include <new>

namespace tensordict {

using detail::format_shape;

// ---- Schema -------------------------------------------------------------------

Schema::Schema(std::initializer_list<Entry> entries) {
  for (const auto& [k, spec] : entries) add(k, spec);
}

// The specs are moved out of `entries` through the structured binding, which
// clang-tidy 14 does not follow.
Schema::Schema(std::vector<Entry> entries) {  // NOLINT(performance-unnecessary-value-param)
  for (auto& [k, spec] : entries) add(k, std::move(spec));
}

Schema& Schema::add(const NestedKey& key, FieldSpec spec) {
  if (key.empty()) throw SchemaError("schema: an entry has an empty key");
  for (const auto& part : key)
    if (part.empty()) throw SchemaError("schema: the key " + key.repr() + " has an empty part");
  for (auto d : spec.shape)
    if (d < 0)
      throw SchemaError("schema: the entry " + key.repr() + " has a negative size in shape " +
                        format_shape(spec.shape));
  for (const auto& [k, _] : entries_) {
    if (k == key) throw SchemaError("schema: the key " + key.repr() + " is listed twice");
    // A leaf cannot also be a nested level ("a" and ("a", "b")).
    const auto& shorter = k.size() < key.size() ? k : key;
    const auto& longer = k.size() < key.size() ? key : k;
    if (std::equal(shorter.begin(), shorter.end(), longer.begin()))
      throw SchemaError("schema: " + shorter.repr() + " is a leaf and cannot hold " +
                        longer.repr());
  }
  entries_.emplace_back(key, std::move(spec));
  return *this;
}

bool Schema::contains(const NestedKey& key) const {
  for (const auto& [k, _] : entries_)
    if (k == key) return true;
  return false;
}

const FieldSpec& Schema::at(const NestedKey& key) const {
  for (const auto& [k, spec] : entries_)
    if (k == key) return spec;
  throw KeyError("schema: no entry " + key.repr());
}

bool Schema::operator==(const Schema& other) const {
  if (entries_.size() != other.entries_.size()) return false;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& [ka, a] = entries_[i];
    const auto& [kb, b] = other.entries_[i];
    if (!(ka == kb) || a.shape != b.shape || a.dtype != b.dtype) return false;
  }
  return true;
}

namespace {

template <class Json>
at::ScalarType parse_dtype(const Json& j, const NestedKey& key) {
  if (!j.is_string())
    throw SchemaError("schema: the dtype of " + key.repr() +
                      " must be a string such as "
                      "\"torch.float32\" or \"float32\"");
  std::string s = j.template get<std::string>();
  if (s.rfind("torch.", 0) != 0) s = "torch." + s;
  try {
    return detail::dtype_from_string(s);
  } catch (const FormatError&) {
    throw SchemaError("schema: unknown dtype \"" + j.template get<std::string>() + "\" for " +
                      key.repr());
  }
}

template <class Json>
std::vector<int64_t> parse_shape(const Json& j, const NestedKey& key) {
  if (!j.is_array())
    throw SchemaError("schema: the shape of " + key.repr() + " must be a list of sizes");
  std::vector<int64_t> out;
  for (const auto& d : j) {
    if (!d.is_number_integer() || d.template get<int64_t>() < 0)
      throw SchemaError("schema: the shape of " + key.repr() +
                        " must be a list of non-negative integers");
    out.push_back(d.template get<int64_t>());
  }
  return out;
}

template <class Json>
void parse_level(const Json& j, const NestedKey& path, Schema& out) {
  if (!j.is_object()) throw SchemaError("schema: expected a JSON object of entries");
  for (auto it = j.begin(); it != j.end(); ++it) {
    NestedKey key = path.empty() ? NestedKey(it.key()) : path.child(it.key());
    const auto& v = it.value();
    if (v.is_array()) {  // [shape, dtype]
      if (v.size() != 2)
        throw SchemaError("schema: the entry " + key.repr() + " must be [shape, dtype]");
      out.add(key, FieldSpec{parse_shape(v[0], key), parse_dtype(v[1], key)});
    } else if (v.is_object() && v.contains("shape")) {
      if (!v.contains("dtype"))
        throw SchemaError("schema: the entry " + key.repr() + " has no \"dtype\"");
      out.add(key, FieldSpec{parse_shape(v["shape"], key), parse_dtype(v["dtype"], key)});
    } else if (v.is_object()) {
      parse_level(v, key, out);
    } else {
      throw SchemaError("schema: the entry " + key.repr() +
                        " must be {\"shape\": [...], \"dtype\": ...}, [shape, dtype] or a "
                        "nested object");
    }
  }
}

}  // namespace

namespace {
template <class Json>
void check_depth(const Json& j) {
  // parse_level recurses once per level.
  if (detail::json_depth(j) > detail::kMaxNestingDepth)
    throw SchemaError("schema: the JSON is nested deeper than " +
                      std::to_string(detail::kMaxNestingDepth) +
                      " levels (the limit of this library, docs/errors.md)");
}
}  // namespace

Schema Schema::from_json(const nlohmann::json& j) {
  check_depth(j);
  Schema out;
  parse_level(j, NestedKey(), out);
  return out;
}

Schema Schema::from_json(const nlohmann::ordered_json& j) {
  check_depth(j);
  Schema out;
  parse_level(j, NestedKey(), out);
  return out;
}

nlohmann::ordered_json Schema::to_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [k, spec] : entries_) {
    nlohmann::ordered_json* level = &out;
    for (std::size_t i = 0; i + 1 < k.size(); ++i) level = &(*level)[k[i]];
    (*level)[k.back()] = {{"shape", spec.shape}, {"dtype", detail::dtype_to_string(spec.dtype)}};
  }
  return out;
}

// ---- from_schema ------------------------------------------------------------------

namespace {

std::vector<int64_t> full_shape(const std::vector<int64_t>& batch, const FieldSpec& spec) {
  std::vector<int64_t> out = batch;
  out.insert(out.end(), spec.shape.begin(), spec.shape.end());
  return out;
}

// Every leaf's byte count must fit an int64 (before any storage sees it).
void check_batch(const std::vector<int64_t>& batch_size, const Schema& schema) {
  for (auto d : batch_size)
    if (d < 0) throw SchemaError("from_schema: invalid batch size " + format_shape(batch_size));
  for (const auto& [k, spec] : schema.entries()) {
    const auto shape = full_shape(batch_size, spec);
    int64_t bytes = static_cast<int64_t>(c10::elementSize(spec.dtype));
    for (auto d : shape) {
      if (d != 0 && bytes > std::numeric_limits<int64_t>::max() / d)
        throw SchemaError("from_schema: the entry " + k.repr() + " of shape " +
                          format_shape(shape) + " holds more bytes than an int64 counts");
      bytes *= d;
    }
  }
}

// A tensordict whose leaves are one zero each, expanded to the full shapes:
// the source of memmap_like, which then allocates nothing in RAM.
TensorDict expanded_zeros(const Schema& schema, const std::vector<int64_t>& batch) {
  TensorDict out(batch);
  for (const auto& [k, spec] : schema.entries())
    out.set(k,
            at::zeros({}, at::TensorOptions().dtype(spec.dtype)).expand(full_shape(batch, spec)));
  return out;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, StorageFactory> factories;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: used from static initializers
    reg->factories["memory"] = [](const Schema& s, const std::vector<int64_t>& b,
                                  const StorageOptions& o) {
      check_storage_options(o, "memory", {"device"});
      storage::Memory m;
      auto dev = storage_option<std::string>(o, "memory", "device", "");
      if (!dev.empty()) {
        try {
          m.device = at::Device(dev);
        } catch (const c10::Error&) {
          throw SchemaError("from_schema: unknown device '" + dev + "'");
        }
      }
      return from_schema(s, b, m);
    };
    reg->factories["memmap"] = [](const Schema& s, const std::vector<int64_t>& b,
                                  const StorageOptions& o) {
      check_storage_options(o, "memmap", {"prefix", "existsok", "num_threads", "durable"});
      storage::Memmap m;
      m.prefix = storage_option<std::string>(o, "memmap", "prefix", "");
      m.existsok = storage_option<bool>(o, "memmap", "existsok", true);
      m.num_threads = storage_option<int>(o, "memmap", "num_threads", 0);
      m.durable = storage_option<bool>(o, "memmap", "durable", false);
      return from_schema(s, b, m);
    };
    reg->factories["shared"] = [](const Schema& s, const std::vector<int64_t>& b,
                                  const StorageOptions& o) {
      check_storage_options(o, "shared", {});
      return from_schema(s, b, storage::Shared{});
    };
    return reg;
  }();
  return *r;
}

}  // namespace

void check_storage_options(const StorageOptions& options, const std::string& storage,
                           std::initializer_list<const char*> accepted) {
  for (const auto& [name, _] : options) {
    bool ok = false;
    for (const char* a : accepted) ok = ok || name == a;
    if (!ok) {
      std::vector<std::string> names(accepted.begin(), accepted.end());
      throw SchemaError(fmt::format(
          "from_schema: unknown option '{}' for storage '{}' (accepted: {})", name, storage,
          names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))));
    }
  }
}

void allocate_schema(const TensorDictBase& td, const Schema& schema) {
  const std::vector<int64_t> batch = td.batch_size().vec();
  const auto device = td.device().value_or(at::Device(at::kCPU));
  std::vector<LeafCreate> leaves;
  std::vector<std::shared_ptr<Node>> levels;  // alive until create_leaves
  leaves.reserve(schema.size());
  for (const auto& [k, spec] : schema.entries()) {
    if (td.contains(k))
      throw SchemaError("from_schema: " + k.repr() + " already exists in the tensordict");
    auto parent = detail::walk_parent(td.node_ptr(), k, /*create=*/true, "from_schema");
    leaves.push_back(LeafCreate{parent.get(), k, full_shape(batch, spec),
                                at::TensorOptions().dtype(spec.dtype).device(device)});
    levels.push_back(std::move(parent));
  }
  if (device.type() != at::kCPU && device.type() != at::kMeta) {
    // A device this build or machine lacks (CUDA without CUDA): a
    // DeviceError here rather than LibTorch's error from the first leaf.
    try {
      (void)at::empty({0}, at::TensorOptions().device(device));
    } catch (const c10::Error& e) {
      throw DeviceError("from_schema: the device " + device.str() +
                        " is not available: " + e.what_without_backtrace());
    }
  }
  try {
    td.node().create_leaves(leaves);
  } catch (const StorageError&) {
    detail::rethrow_storage_error(NestedKey(), "from_schema: allocating the leaves of");
  } catch (const c10::Error& e) {
    // The allocator's refusal (a petabyte in RAM).
    std::throw_with_nested(StorageError(std::string("from_schema: cannot allocate the leaves: ") +
                                        e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    std::throw_with_nested(StorageError("from_schema: cannot allocate the leaves: out of memory"));
  }
}

TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const storage::Memory& storage) {
  check_batch(batch_size, schema);
  TensorDict out(batch_size, storage.device);
  allocate_schema(out, schema);
  return out;
}

TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const storage::Memmap& storage) {
  check_batch(batch_size, schema);
  if (storage.prefix.empty())
    throw SchemaError("from_schema: storage::Memmap needs a prefix (the directory to create)");
  MemmapOptions opt;
  opt.existsok = storage.existsok;
  opt.num_threads = storage.num_threads;
  opt.durable = storage.durable;
  return expanded_zeros(schema, batch_size).memmap_like(storage.prefix, opt);
}

TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const storage::Shared&) {
  check_batch(batch_size, schema);
  TensorDictBase out = from_schema(schema, batch_size, storage::Memory{});
  out.share_memory_();
  return out;
}

TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const std::string& storage, const StorageOptions& options) {
  StorageFactory factory;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.factories.find(storage);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string names;
    for (const auto& n : available_storages()) names += (names.empty() ? "" : ", ") + n;
    std::string hint;
    if (storage == "h5" || storage == "hdf5")
      hint =
          " The HDF5 storage comes with the CMake component tensordict::hdf5 "
          "(-DTENSORDICT_WITH_HDF5=ON, link tensordict::hdf5).";
    else if (storage == "redis" || storage == "dragonfly" || storage == "keydb")
      hint =
          " The Redis storage comes with the CMake component tensordict::redis "
          "(-DTENSORDICT_WITH_REDIS=ON, link tensordict::redis).";
    else
      hint =
          " Other storages come with CMake components: \"h5\" with tensordict::hdf5, "
          "\"redis\" and \"dragonfly\" with tensordict::redis.";
    throw SchemaError("Unknown storage backend '" + storage +
                      "'. Available in this program: " + names + "." + hint);
  }
  return factory(schema, batch_size, options);
}

void register_storage(const std::string& name, StorageFactory factory) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> available_storages() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& [name, _] : r.factories) out.push_back(name);
  return out;
}

}  // namespace tensordict
