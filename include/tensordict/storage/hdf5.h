#pragma once
/// @file storage/hdf5.h
/// PersistentTensorDict: a tensordict stored in an HDF5 file, in the layout
/// h5py and Python tensordict's PersistentTensorDict write (groups for nested
/// tensordicts, datasets for tensors, no batch size; checked against Python
/// tensordict 0.15.3). Part of the CMake
/// component tensordict::hdf5 (-DTENSORDICT_WITH_HDF5=ON); this header needs
/// no HDF5 header. See docs/hdf5.md.
///
/// @code
///   namespace td = tensordict;
///   auto h5 = td::PersistentTensorDict::from_h5("replay.h5", "r+");   // batch size inferred
///   td::TensorDictBase rows = h5.index({torch::tensor({7, 2, 7})});   // reads 2 rows per leaf
///   h5.index_put_({3}, row);                                          // writes one row per leaf
///   auto buffer = td::from_schema(schema, {1'000'000}, td::storage::H5{.filename = "buf.h5"});
/// @endcode

#include <tensordict/schema.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tensordict {

/// How datasets created by a PersistentTensorDict are laid out (h5py's
/// create_dataset keyword arguments). They apply to every dataset created
/// later through the handle, nested levels included. Scalar (0-d) datasets
/// and non-tensor datasets are always contiguous and unfiltered.
struct H5DatasetOptions {
  /// Chunk shape of the leading dims (typically rows per chunk); the dims
  /// after them are whole, sizes are clamped to the dataset's. Empty: a
  /// contiguous dataset, or h5py's automatic chunks when a filter is asked.
  std::vector<int64_t> chunks = {};
  /// gzip (deflate) level 0-9; nullopt: no compression.
  std::optional<int> gzip = std::nullopt;
  /// The byte-shuffle filter (before gzip).
  bool shuffle = false;
  /// The Fletcher-32 checksum filter.
  bool fletcher32 = false;
  bool filtered() const noexcept { return gzip.has_value() || shuffle || fletcher32; }
};

/// How PersistentTensorDict::open opens a file.
struct H5OpenOptions {
  /// h5py's modes: "r" (read only, the file must exist), "r+" (read/write,
  /// must exist), "w" (create, truncating), "w-" or "x" (create, fail if it
  /// exists), "a" (read/write, create if missing).
  std::string mode = "r";
  /// The group holding the tensordict ("" or "/" for the root group). In a
  /// writable mode a missing group is created.
  std::string group = "";
  /// The batch size of the root and, unless inferred, of every nested level
  /// (Python's _make_nested). nullopt: inferred as from_h5 does.
  std::optional<std::vector<int64_t>> batch_size = std::nullopt;
  /// Leaves read are moved to this device; nothing is stored in the file.
  std::optional<at::Device> device = std::nullopt;
  /// Layout of the datasets created later.
  H5DatasetOptions dataset = {};
  /// HDF5 file locking (flock on the file while open); false disables it as
  /// HDF5_USE_FILE_LOCKING=FALSE would. nullopt: HDF5's default (on).
  std::optional<bool> locking = std::nullopt;
  /// HDF5's single-writer / many-readers mode (h5py's File(..., swmr=True)).
  /// Mode "r": the file is read while another process writes it; every read
  /// first refreshes its dataset, so it sees the rows the writer flushed.
  /// Mode "r+" or "a" on an existing file: writes rows while readers read;
  /// every write is flushed. The file must have been created for SWMR.
  /// Creating modes ("w", "w-", "x", "a" on a new file): the file is created
  /// in the format SWMR needs (HDF5 1.10's latest layout, which h5py reads);
  /// create every group and dataset, then call start_swmr_write().
  /// In SWMR writing, groups and datasets can be neither created nor removed.
  bool swmr = false;
};

/// A handle to a tensordict stored in an HDF5 file (Python's
/// PersistentTensorDict with backend="h5").
///
/// - get(key) reads the whole dataset into a new tensor: a copy, not a view
///   (writes to it do not reach the file; write with set_, index_put_...).
/// - td[idx], get_at and index_put_/update_at_/set_at_ read and write only the
///   selected rows: one HDF5 selection (hyperslab or row union) per dataset
///   per operation, for every index form (long indices unsorted or repeated
///   included, results in the user's order).
/// - Nested tensordicts are groups; non-tensor values are string datasets
///   (strings, marked with Python's attribute "__tensordict_str__") or opaque
///   datasets tagged "NUMPY:<dtype>" (numbers, bools, lists), read back as
///   NonTensorData with the parent's batch size; a NonTensorStack is a dataset
///   of its shape with the attribute "__tensordict_stack__" (Python's layout).
/// - Keys are listed in HDF5's link order (by name).
///
/// The file stays open while any handle on it (or on a nested level, or a
/// value read from it) is alive, or until close(). HDF5 calls are serialized
/// by one process-wide mutex: concurrent use from several threads is safe.
class PersistentTensorDict : public TensorDictBase {
 public:
  /// Opens (or creates) `filename` as `options` say. StorageError naming the
  /// file for a missing file, a file that is not HDF5 or a truncated one;
  /// ShapeError when a dataset does not start with the given batch size.
  static PersistentTensorDict open(const std::string& filename, const H5OpenOptions& options = {});
  /// Python's PersistentTensorDict.from_h5: opens the file and infers the
  /// batch size of every level (the longest common leading shape of its
  /// entries, non-tensors excluded) unless `batch_size` is given.
  static PersistentTensorDict from_h5(
      const std::string& filename, const std::string& mode = "r",
      std::optional<std::vector<int64_t>> batch_size = std::nullopt);
  /// Python's from_dict / from_tensordict: writes every entry of `td` into a
  /// new file that replaces `filename` once complete (an error, such as a
  /// bfloat16 leaf, leaves an existing file as it was) and returns the
  /// handle, opened "r+", with td's batch size and device.
  static PersistentTensorDict from_tensordict(const TensorDictBase& td, const std::string& filename,
                                              const H5DatasetOptions& options = {});
  static PersistentTensorDict from_dict(const TensorDictBase& td, const std::string& filename,
                                        const H5DatasetOptions& options = {}) {
    return from_tensordict(td, filename, options);
  }

  /// Wraps an existing HDF5 storage (see TensorDictBase::as).
  explicit PersistentTensorDict(std::shared_ptr<Node> node);

  static bool is_node(const Node& node) noexcept;
  static const char* static_type_name() noexcept { return "PersistentTensorDict"; }

  /// Closes the file for every handle on it: later calls on any of them are
  /// a StorageError ("closed"). Flushes first. No-op when already closed.
  void close();
  /// False after close().
  bool is_open() const;
  /// The file name as given when opened.
  std::string filename() const;
  /// The HDF5 path of this level's group ("/" for the root).
  std::string group_name() const;
  /// The mode the file was opened with.
  std::string mode() const;
  /// Writes buffered data to the file (H5Fflush).
  void flush();
  /// Starts HDF5's SWMR writing (H5Fstart_swmr_write) on a file created with
  /// H5OpenOptions::swmr: from now on readers that open it with swmr = true
  /// see every row written (each write is flushed), and no group or dataset
  /// can be created or removed. StorageError when the file was not created
  /// for SWMR or is read-only.
  void start_swmr_write();
  /// True while SWMR reading or writing (h5py's File.swmr_mode).
  bool swmr_mode() const;
};

/// Python's td.to_h5(filename, **kwargs): writes `td` (any storage) to a new
/// file (truncated) and returns the handle on it.
PersistentTensorDict to_h5(const TensorDictBase& td, const std::string& filename,
                           const H5DatasetOptions& options = {});

namespace storage {

/// An HDF5 file (Python's from_schema(storage="h5", filename=...)). The
/// datasets are created without writing their zeros (HDF5 late allocation
/// and fill values): from_schema of 1M rows of uint8[3, 64, 64] writes no
/// data. By name: from_schema(schema, batch, "h5", {{"filename", f},
/// {"mode", "w"}, {"group", "/"}, {"chunks", [64]}, {"compression", "gzip"},
/// {"compression_opts", 4}, {"shuffle", true}, {"fletcher32", true},
/// {"locking", false}, {"swmr", true}}).
struct H5 {
  std::string filename;
  /// "w" (truncate), "w-"/"x" (fail when the file exists), "a" or "r+"
  /// (add to an existing file; the group must not hold the schema's keys).
  std::string mode = "w";
  std::string group = "";
  H5DatasetOptions dataset = {};
  std::optional<bool> locking = std::nullopt;
  /// Creates the file for SWMR and starts SWMR writing once every dataset of
  /// the schema exists: readers opening it with H5OpenOptions::swmr (mode
  /// "r") see the rows as they are written.
  bool swmr = false;
};

}  // namespace storage

/// Pre-allocates `schema` in an HDF5 file (see storage::H5).
PersistentTensorDict from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                                 const storage::H5& storage);

}  // namespace tensordict
