#pragma once
/// @file schema.h
/// Schema and from_schema: pre-allocate a zero-filled tensordict of any
/// storage from `{key: (element shape, dtype)}` (Python's
/// TensorDictBase.from_schema).
///
/// @code
///   namespace td = tensordict;
///   td::Schema schema{{"obs", {{84, 84, 3}, torch::kUInt8}},
///                     {"action", {{4}, torch::kFloat32}},
///                     {{"next", "obs"}, {{84, 84, 3}, torch::kUInt8}}};
///   auto buffer = td::from_schema(schema, {100'000}, td::storage::Memmap{.prefix = dir});
///   buffer.index_put_({i}, transition);   // one row, in place
/// @endcode
///
/// File storages allocate nothing in RAM (the files are created sparse).
/// Storages register themselves with the factory by name, so linking the HDF5
/// or Redis component is what makes "h5" or "redis" available.

#include <tensordict/nested_key.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tensordict {

/// Shape (without the batch dims) and dtype of one schema entry.
struct FieldSpec {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
};

/// An ordered list of key -> (element shape, dtype). Keys may be nested.
class Schema {
 public:
  using Entry = std::pair<NestedKey, FieldSpec>;

  Schema() = default;
  Schema(std::initializer_list<Entry> entries);
  explicit Schema(std::vector<Entry> entries);

  /// From JSON: {"obs": {"shape": [84, 84, 3], "dtype": "torch.uint8"}, ...}
  /// or the Python-like {"obs": [[84, 84, 3], "uint8"]}; a nested object
  /// without "shape" is a nested level. SchemaError names the bad entry.
  /// With nlohmann::json the entries come in its (sorted) key order; parse
  /// an nlohmann::ordered_json to keep the file's order.
  static Schema from_json(const nlohmann::json& j);
  static Schema from_json(const nlohmann::ordered_json& j);
  /// The first JSON form above ("torch.float32" dtype names), nested keys as
  /// nested objects, in the schema's order.
  nlohmann::ordered_json to_json() const;

  /// Adds an entry (SchemaError when the key is already present, or when it
  /// would put a leaf under a leaf).
  Schema& add(const NestedKey& key, FieldSpec spec);

  const std::vector<Entry>& entries() const noexcept { return entries_; }
  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  bool contains(const NestedKey& key) const;
  const FieldSpec& at(const NestedKey& key) const;

  bool operator==(const Schema& other) const;

 private:
  std::vector<Entry> entries_;
};

/// The storage a from_schema call pre-allocates, one options struct per
/// backend.
namespace storage {

/// In RAM: a TensorDict of zeros.
struct Memory {
  std::optional<at::Device> device = std::nullopt;
};

/// A memmap directory (Python's "memmap"): a locked, memmapped TensorDict.
/// An empty prefix is refused (Python's anonymous memmap has no C++ form).
struct Memmap {
  std::string prefix;
  /// Overwrite (and zero) leaf files already at the prefix; when false an
  /// existing file is a StorageError and nothing is written. (Python's
  /// existsok=True keeps the old contents instead.)
  bool existsok = true;
  int num_threads = 0;
  /// fsync the files and directories before returning (MemmapOptions::durable).
  bool durable = false;
};

/// Shared memory (/dev/shm): a locked, shared TensorDict, attachable by name
/// from another process (see attach_shared).
struct Shared {};

}  // namespace storage

/// Key/value options of a storage named by a string (config-driven code):
/// {"prefix": "/data/buf"}, {"host": "127.0.0.1"}, {"port": 6379}...
using StorageOptions = std::map<std::string, nlohmann::json>;

/// A zero-filled tensordict of the given batch size in the given storage:
/// every schema entry becomes a leaf of shape [*batch_size, *shape].
TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const storage::Memory& storage = {});
TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const storage::Memmap& storage);
TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const storage::Shared& storage);
/// By name ("memory", "memmap", "shared", and whatever linked components
/// registered: "h5", "redis"...). SchemaError for an unknown name or option,
/// listing the storages available and the CMake component of the others.
TensorDictBase from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                           const std::string& storage, const StorageOptions& options = {});

/// Pre-allocates every entry of `schema` in `td`, whose batch size is used:
/// missing levels are created with Node::create_nested and all the leaves
/// with one Node::create_leaves call on td's storage (zero-filled, and not
/// sent as zeros by storages that can avoid it). What a storage's from_schema
/// calls after creating its empty root. SchemaError when an entry exists.
void allocate_schema(const TensorDictBase& td, const Schema& schema);

/// Builds a tensordict of a storage from a schema and string options.
using StorageFactory = std::function<TensorDictBase(const Schema&, const std::vector<int64_t>&,
                                                    const StorageOptions&)>;

/// Makes `name` available to from_schema(schema, batch, name, options),
/// replacing an earlier registration of the same name. Thread-safe; storage
/// components call it from a static initializer (see
/// TENSORDICT_REGISTER_STORAGE and docs/storage_backends.md).
void register_storage(const std::string& name, StorageFactory factory);

/// Helpers for a factory's string options: the option `name` of `storage`
/// as a T (`fallback` when absent; SchemaError naming it when of another
/// type), and a check that every option given is in `accepted`.
template <class T>
T storage_option(const StorageOptions& options, const std::string& storage, const std::string& name,
                 T fallback) {
  auto it = options.find(name);
  if (it == options.end()) return fallback;
  try {
    return it->second.get<T>();
  } catch (const nlohmann::json::exception&) {
    throw SchemaError("from_schema: the option '" + name + "' of storage '" + storage +
                      "' has the wrong type: " + it->second.dump());
  }
}
void check_storage_options(const StorageOptions& options, const std::string& storage,
                           std::initializer_list<const char*> accepted);

namespace detail {
using StorageFactory = tensordict::StorageFactory;
/// Older spelling of tensordict::register_storage.
inline void register_storage(const std::string& name, StorageFactory factory) {
  tensordict::register_storage(name, std::move(factory));
}
}  // namespace detail

/// The storage names from_schema accepts in this program, sorted.
std::vector<std::string> available_storages();

}  // namespace tensordict

/// Registers the storage `name` (a string literal) with `factory` (a
/// tensordict::StorageFactory) when the program starts. Put it in a source
/// file of a storage component built as a CMake OBJECT library (the recipe
/// tensordict_add_storage_component does): its objects always reach the
/// link, so the registration is there in static and shared builds alike.
#define TENSORDICT_REGISTER_STORAGE(name, factory)                                  \
  static const bool TENSORDICT_REGISTER_CONCAT_(tensordict_registered_, __LINE__) = \
      (::tensordict::register_storage(name, factory), true)
#define TENSORDICT_REGISTER_CONCAT_(a, b) TENSORDICT_REGISTER_CONCAT2_(a, b)
#define TENSORDICT_REGISTER_CONCAT2_(a, b) a##b
