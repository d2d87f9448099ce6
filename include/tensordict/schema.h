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

#include <ATen/core/TensorBody.h>
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

/// The factory registry (for storage components).
namespace detail {
using StorageFactory = std::function<TensorDictBase(
    const Schema&, const std::vector<int64_t>&, const StorageOptions&)>;
/// Registers `name` (replacing an earlier registration of the same name).
void register_storage(const std::string& name, StorageFactory factory);
}  // namespace detail

/// The storage names from_schema accepts in this program, sorted.
std::vector<std::string> available_storages();

}  // namespace tensordict
