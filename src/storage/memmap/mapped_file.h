#pragma once
// Raw file helpers of the memmap storage. Not installed.

#include "io/files.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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
/// (blocks reserved). Refuses symbolic links. With `durable`, the file is
/// fsync()ed before it is closed.
void write_file(const std::string& path, const at::Tensor& tensor, bool copy_data,
                const std::string& what, bool durable = false);

/// A fresh name beside `root` (".<name>.<what>-<pid>-<n>") for a staging
/// directory that no other save uses.
std::filesystem::path sibling(const std::filesystem::path& root, const char* what);
/// Creates the directories above `root` and a fresh, empty staging
/// directory beside it (sibling(root, what)), which it returns; sets
/// `created_from` to the deepest ancestor of `root` that existed before (for
/// sync_after_install). StorageError prefixed by `op`.
std::filesystem::path make_stage(const std::filesystem::path& root, const char* what,
                                 const std::string& op, std::filesystem::path& created_from);
/// Puts the complete directory `stage` at `root` in one step (rename, or an
/// atomic exchange with an existing `root` whose old content is then
/// deleted): a reader sees the old directory or the new one, never a mix.
/// StorageError when it cannot. The old content is deleted with
/// remove_replaced_save.
void install_dir(const std::filesystem::path& stage, const std::filesystem::path& root);
/// Deletes `dir`, a save that a newer one replaced: its names now, the
/// freeing of its large files on the process's background thread
/// (src/storage/memmap/replaced_saves.cpp).
void remove_replaced_save(const std::filesystem::path& dir);
/// Whether replaced saves still hold disk space.
bool replaced_saves_pending();
/// How many batches of replaced files the background thread has closed.
std::uint64_t replaced_saves_freed();
/// fsync() of every directory of the tree at `stage`, `stage` last.
void sync_tree_dirs(const std::filesystem::path& stage, int num_threads);
/// After install_dir: fsync() of the directory holding `root` and of each
/// directory created between `created_from` (which existed) and it.
void sync_after_install(const std::filesystem::path& root,
                        const std::filesystem::path& created_from);

/// msync(MS_SYNC) of the whole file mapping behind `tensor` when it is
/// mapped shared (writes reach the file); false when there is nothing to
/// sync (not a mapped file, or a copy-on-write mapping). `synced` holds the
/// mappings already synced (views of one file are synced once).
/// StorageError naming the file when msync fails.
bool sync_mapping(const at::Tensor& tensor, std::vector<const void*>& synced);

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
