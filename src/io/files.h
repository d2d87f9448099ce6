#pragma once
// Writing files whole and syncing them: the lowest layer of the library's
// file I/O, shared by the storages (memmap) and the formats (state dicts,
// JSON). Not installed.

#include <cstddef>
#include <functional>
#include <string>

namespace tensordict::detail {

/// Writes `size` bytes at offset 0 of `fd` (the file `path`); the error
/// message, empty on success.
std::string write_all(int fd, const char* data, std::size_t size, const std::string& path);

/// Receives the bytes of a file in order (StorageError when they cannot be
/// written).
using ByteSink = std::function<void(const char* data, std::size_t size)>;
/// Creates the new file `path` (O_EXCL) and writes into it, in order, the
/// bytes `produce` passes to its sink, without holding them in memory; with
/// `durable`, fsync()s it before closing it. StorageError prefixed by `op`;
/// what `produce` throws passes through (the file may be left in both cases:
/// the caller removes it).
void write_new_file(const std::string& path, const std::function<void(const ByteSink&)>& produce,
                    bool durable, const std::string& op);
/// Creates the new file `path` (O_EXCL) holding `size` bytes of `data`; with
/// `durable`, fsync()s it before closing it. StorageError prefixed by `op`
/// (the file may be left: the caller removes it).
void write_new_file(const std::string& path, const char* data, std::size_t size, bool durable,
                    const std::string& op);

/// fsync() of the open file `fd` (the file or directory `path`): the error
/// message, empty on success.
std::string fsync_error(int fd, const std::string& path);
/// fsync() of the open file `fd` (the file or directory `path`); StorageError
/// naming it, prefixed by `op`.
void fsync_fd(int fd, const std::string& path, const std::string& op);
/// Opens the file or directory `path` and fsync()s it (a directory: the
/// names created, removed or renamed in it); StorageError naming it.
void fsync_path(const std::string& path, const std::string& op);

}  // namespace tensordict::detail
