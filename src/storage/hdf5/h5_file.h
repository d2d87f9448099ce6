#pragma once
// One open HDF5 file, shared by every node (level) of a PersistentTensorDict:
// the file identifier, the dataset creation options, and the caches that keep
// metadata calls free of HDF5 work after the first (link listings, open
// datasets with their dataspaces and element types).
#include "storage/hdf5/h5_api.h"

#include <tensordict/non_tensor.h>
#include <tensordict/storage/hdf5.h>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tensordict::detail::h5 {

/// An open dataset.
struct Dataset {
  Hid id;
  /// The file dataspace, re-selected by each row operation.
  Hid space;
  std::vector<int64_t> shape;
  ElementInfo info;
  /// A string or opaque dataset tagged with the attribute
  /// "__tensordict_stack__" (Python tensordict's mark of a NonTensorStack):
  /// the stack's batch size. nullopt for every other dataset.
  std::optional<std::vector<int64_t>> stack_shape;
  /// "HDF5 file '<file>', /a/b", for messages.
  std::string where;
  /// Why the dataset cannot be read although its element type is known (a
  /// NULL dataspace, a shape whose bytes overflow int64, data in external
  /// files...); empty when it can. Set with info.element = Unsupported, so
  /// that batch-size inference skips it; reading it is a FormatError.
  std::string refused;
  /// A memory dataspace of `dims` (the last one made is kept: a row loop
  /// reuses it).
  hid_t memory_space(const std::vector<hsize_t>& dims);

 private:
  Hid mem_;
  std::vector<hsize_t> mem_dims_;
};

/// Identifies an HDF5 object within its file (its header address, or token
/// in HDF5 1.12+): two links to one group give the same ObjectId.
using ObjectId = std::string;
/// The ObjectId of an open object.
ObjectId object_id(hid_t object, const std::string& where);

/// A link of a group: a nested group or a dataset.
struct Entry {
  bool is_group = false;
  ObjectId group_id;                 // when is_group
  std::unique_ptr<Dataset> dataset;  // when !is_group
};

class File {
 public:
  /// Opens or creates `filename` (modes of H5OpenOptions). StorageError
  /// naming the file when it is missing, exists in mode "w-", or cannot be
  /// opened; FormatError when it is not HDF5 or is corrupt.
  File(const std::string& filename, const H5OpenOptions& options);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& filename() const noexcept { return filename_; }
  const std::string& mode() const noexcept { return mode_; }
  bool writable() const noexcept { return writable_; }
  bool is_open() const noexcept { return static_cast<bool>(file_); }
  const H5DatasetOptions& dataset_options() const noexcept { return dataset_options_; }

  /// StorageError when closed ("<file>: the file is closed").
  void check_open() const;
  /// StorageError when read-only, naming the file, `what` `path` and the mode.
  void check_writable(const char* what, const std::string& path) const;
  /// Flushes and closes the file; StorageError naming the file when HDF5
  /// fails to write what it buffered (a full disk) or to close. The file is
  /// closed for every handle either way.
  void close();
  /// StorageError naming the file when H5Fflush fails.
  void flush();

  // ---- SWMR (H5OpenOptions::swmr) --------------------------------------------
  bool swmr_read() const noexcept { return swmr_read_; }
  bool swmr_write() const noexcept { return swmr_write_; }
  /// H5Fstart_swmr_write; StorageError when the file was not created for SWMR.
  void start_swmr_write();
  /// StorageError while SWMR writing: HDF5 forbids new or removed objects.
  void check_structure_writable(const char* what, const std::string& path) const;
  /// Before a read in SWMR reading: H5Drefresh, so the writer's flushed rows
  /// (and late allocations) are seen.
  void refresh(const Dataset& d) const;
  /// After a write in SWMR writing: flushes, so readers see the rows.
  void written();

  /// "<file>:/a/b" for messages.
  std::string where(const std::string& path) const;

  // ---- structure (cached) ----------------------------------------------------
  /// The open group at `path` (created when `create` and missing).
  hid_t group(const std::string& path, bool create = false);
  /// The link names of the group at `path`, by name (HDF5's link order).
  const std::vector<std::string>& keys(const std::string& path);
  /// The entry `key` of the group at `path`, nullptr when missing.
  Entry* entry(const std::string& path, std::string_view key);
  /// Drops what is cached about `path/key` (and below it).
  void forget(const std::string& path, std::string_view key);
  /// Changes whenever a cached entry may have gone (forget, close): nodes
  /// keep Entry pointers while it stays the same.
  uint64_t generation() const noexcept { return generation_; }

  // ---- datasets ----------------------------------------------------------------
  /// Creates the dataset `key` in the group at `path`, without data (HDF5
  /// late allocation: reads as zeros until written).
  Dataset& create_tensor(const std::string& path, std::string_view key, at::IntArrayRef shape,
                         c10::ScalarType dtype);
  /// Creates the dataset and writes `value` (contiguous, CPU) into it.
  void write_tensor(const std::string& path, std::string_view key, const at::Tensor& value);
  /// A non-tensor value as Python tensordict writes it: a string as a scalar
  /// UTF-8 variable-length string marked with the attribute
  /// "__tensordict_str__" (h5py's bool True), anything else as an opaque
  /// "NUMPY:<dtype>" dataset. TypeError for what numpy would hold as objects
  /// (null, dicts, ragged or mixed lists).
  void write_non_tensor(const std::string& path, std::string_view key, const nlohmann::json& value);
  /// TypeError when `value` cannot be written as a non-tensor (checked
  /// before anything is removed).
  static void check_non_tensor(const nlohmann::json& value, const std::string& context);
  /// A NonTensorStack as Python tensordict writes it: one element per entry
  /// of a dataset of the stack's shape, strings as variable-length UTF-8
  /// strings, bools, ints or floats (one kind) as an opaque "NUMPY:<dtype>"
  /// array; the attribute "__tensordict_stack__" holds the shape (int64).
  void write_non_tensor_stack(const std::string& path, std::string_view key,
                              const NonTensorStack& stack);
  /// TypeError (mixed kinds, lists, null...) or ValueError (a string holding
  /// NUL) when `stack` cannot be written (checked before anything is removed).
  static void check_non_tensor_stack(const NonTensorStack& stack, const std::string& context);
  /// Reads a string or opaque dataset.
  nlohmann::json read_non_tensor(const Dataset& d, const std::string& context);
  /// Removes the link `key` of the group at `path`.
  void remove(const std::string& path, std::string_view key);

  /// Batch sizes inferred at open (from_h5), by group ObjectId (a group
  /// linked from several places has one).
  std::unordered_map<ObjectId, std::vector<int64_t>> inferred;
  /// The ObjectId of the group at `path`.
  ObjectId group_id(const std::string& path);

 private:
  std::string filename_;
  std::string mode_;
  bool writable_ = false;
  bool swmr_format_ = false;  // created or opened with the latest layout
  bool swmr_read_ = false;
  bool swmr_write_ = false;
  H5DatasetOptions dataset_options_;
  Hid file_;
  uint64_t generation_ = 0;
  std::unordered_map<std::string, Hid> groups_;
  std::unordered_map<std::string, std::vector<std::string>> listings_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;  // by full path
  /// Creation property list for a dataset of `shape` of `element_size`.
  Hid creation_plist(at::IntArrayRef shape, std::size_t element_size) const;
};

/// StorageError naming `context` and `what` when another open file
/// description holds HDF5's lock (flock) on `filename`: another process, or
/// another handle of this one, has it open. Nothing when it is missing.
void check_not_locked(const std::string& filename, const std::string& context, const char* what);

/// "/a" + "b" -> "/a/b"; "/" + "b" -> "/b".
std::string join(const std::string& path, std::string_view key);
/// A group path in canonical form: "" -> "/", "a/b" -> "/a/b". ValueError
/// for components that set() refuses as keys ("", ".", ".."): "a//b",
/// "a/", "/../x".
std::string canonical_group(const std::string& group);

}  // namespace tensordict::detail::h5
