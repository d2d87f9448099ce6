#pragma once
// Raw file helpers of the memmap storage. Not installed.

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

namespace tensordict::detail {

int64_t numel_of(at::IntArrayRef shape);

/// The element count of `shape`; ShapeError (prefixed by `what`) for a
/// negative size or a count that overflows int64.
int64_t checked_numel(at::IntArrayRef shape, const std::string& what);
/// numel elements of dtype in bytes; ShapeError when that overflows int64.
std::size_t checked_nbytes(int64_t numel, at::ScalarType dtype, const std::string& what);

/// Maps `path` as `shape` elements of `dtype` (numel 0: an empty tensor, no
/// file needed). `what` is appended to error messages (" for key 'a'").
/// Anything but a regular file is a FormatError. With write_through_links
/// false, a symbolic link is mapped copy-on-write (a loaded directory does
/// not write where its links point).
at::Tensor map_file(const std::string& path, at::ScalarType dtype, at::IntArrayRef shape,
                    bool writable, const std::string& what, bool write_through_links = true);

/// Creates `path` holding `tensor`'s bytes (copy_data) or its size in zeros
/// (sparse). Refuses symbolic links.
void write_file(const std::string& path, const at::Tensor& tensor, bool copy_data,
                const std::string& what);

std::optional<std::string> mapped_filename(const at::Tensor& tensor);

/// True when `tensor` covers its whole mapped file, row-major.
bool is_whole_mapping(const at::Tensor& tensor);

/// Copies `src` into `dst` with pread() from the file behind `src`, when `src`
/// covers a whole file mapped writable (MAP_SHARED, so the mapping and the
/// file hold the same bytes; a copy-on-write mapping may differ from its file)
/// and `dst` is a distinct contiguous CPU tensor of the same dtype and size.
/// Reading the file skips what copying through the mapping costs (a page
/// fault per page range, then unmapping). Returns false when it does not
/// apply (the caller copies); StorageError when the read fails.
bool read_mapped_into(const at::Tensor& src, const at::Tensor& dst);

}  // namespace tensordict::detail
