#pragma once
/// @file storage/memmap.h
/// Memory-mapped tensors and directories, byte-compatible with Python
/// tensordict's memmap format (v0.14 written; every layout back to v0.3.2 read).

#include <ATen/core/Tensor.h>
#include <tensordict/dtype.h>
#include <tensordict/storage/memmap_options.h>
#include <tensordict/tensor_dict.h>

#include <optional>
#include <string>
#include <string_view>

namespace tensordict {

/// Factories for tensors whose storage is a memory-mapped file. The results
/// are plain at::Tensor values (views of them stay mapped); filename() tells
/// which file backs a tensor.
class MemoryMappedTensor {
 public:
  /// Maps an existing file holding `shape` elements of `dtype` (row-major, no
  /// header). The file may be longer than the payload; a shorter one is a
  /// FormatError. With writable=false the map is copy-on-write.
  static at::Tensor from_filename(const std::string& filename, at::ScalarType dtype,
                                  at::IntArrayRef shape, bool writable = true);
  /// Creates (or truncates) `filename` with room for `shape` elements, zero
  /// filled and sparse, and maps it.
  static at::Tensor empty(const std::string& filename, at::IntArrayRef shape, at::ScalarType dtype);
  /// Same as empty(): new files read as zeros.
  static at::Tensor zeros(const std::string& filename, at::IntArrayRef shape, at::ScalarType dtype);
  /// Writes `tensor` (materialized: strides, offsets and expansion are not kept)
  /// into `filename` with write() and maps the file.
  static at::Tensor from_tensor(const at::Tensor& tensor, const std::string& filename);
  /// The file behind a tensor made by these factories (or a view of one).
  static std::optional<std::string> filename(const at::Tensor& tensor);
  /// True when the tensor's storage is a mapped file.
  static bool is_memory_mapped(const at::Tensor& tensor) { return filename(tensor).has_value(); }
};

/// Loads a memmap directory written by this library or by Python tensordict
/// (v0.3.2 to v0.14). Leaves are mapped lazily: nothing is read until touched.
/// The result is not locked (as Python's load_memmap); call memmap_() or
/// lock_() if needed. FormatError names the file and key of anything corrupt.
/// A directory holding a lazy stack loads as a LazyStackedTensorDict.
TensorDictBase load_memmap(const std::string& prefix, const LoadOptions& options = {});
/// load_memmap(prefix): Python's load().
TensorDictBase load(const std::string& prefix, const LoadOptions& options = {});

namespace detail {
/// Python tensordict's file-name encoding of a key (docs/formats.md, "Key encoding"): '%' followed
/// by two uppercase hex digits for / < > : " | ? * \ space NUL % and control characters; "" -> "%",
/// "." -> "%2E", ".." -> "%2E%2E".
std::string encode_key_for_filesystem(std::string_view key);
/// The inverse of encode_key_for_filesystem.
std::string decode_key_from_filesystem(std::string_view name);
// Older spellings of tensordict::dtype_to_string / dtype_from_string.
using ::tensordict::dtype_from_string;
using ::tensordict::dtype_to_string;
/// Writes `text` to the file `file` through a temporary file and a rename, so a
/// reader never sees half a file; StorageError on failure.
void write_json_atomic(const std::string& file, const std::string& text);
/// Saves a tensorclass in Python's layout: `meta_text` as `prefix/meta.json`
/// and `tensors` as the memmap directory `prefix/_tensordict`, the whole
/// directory replacing any earlier save at once (as memmap() does). Returns
/// the mapped tensordict (locked).
TensorDictBase write_tensorclass_dir(const TensorDictBase& tensors, const std::string& prefix,
                                     const std::string& meta_text, const MemmapOptions& options);
}  // namespace detail

}  // namespace tensordict
