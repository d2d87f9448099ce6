#pragma once
// JSON as Python writes it (docs/formats.md, "JSON"), and reading and
// replacing whole files: below the storages and the formats, which both use
// it (the memmap loader, the consolidated format, state dicts). Not installed.

#include "core/json_limits.h"

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <functional>
#include <string>

namespace tensordict::detail {

/// Parses JSON text written by Python's json or orjson, including the
/// NaN / Infinity / -Infinity tokens that nlohmann does not read. Object keys
/// keep their order. Throws nlohmann::json::exception on malformed text and
/// FormatError (naming `where`) on text nested deeper than kMaxNestingDepth.
nlohmann::ordered_json parse_python_json(const std::string& text, const std::string& where = "");

/// What a file of `mode` (stat's st_mode) is, for messages: "a FIFO",
/// "a directory", "a character device"...
const char* file_kind(mode_t mode);

/// The bytes of the regular file `path`, refusing anything else (a FIFO, a
/// device such as /dev/zero behind a symbolic link, a directory) with a
/// FormatError naming `what`, instead of blocking or reading forever.
std::string read_regular_file(const std::string& path, const std::string& what);
/// The same check and read, into the buffer `allocate(size)` returns for the
/// file's size (not zero-filled first: the read writes every byte of it).
/// Returns the bytes read, fewer when the file shrank meanwhile.
std::size_t read_regular_file_into(const std::string& path, const std::string& what,
                                   const std::function<char*(std::size_t)>& allocate);

/// Writes `size` bytes to a new file beside `path`, then renames it over
/// `path` (through a symbolic link, over the file it names): a reader, a
/// crash or a full disk leaves the old file or the new one, never a
/// truncated one. StorageError (prefixed by `op`) on failure, the temporary
/// file removed. With `durable`, the temporary file is fsync()ed before the
/// rename (a failure leaves `path` as it was) and its directory after.
void replace_file_atomically(const std::string& path, const char* data, std::size_t size,
                             const std::string& op, bool durable = false);
/// The same, with the bytes produced in order by `produce` (each piece passed
/// to its sink is written out, not gathered in memory first).
void replace_file_atomically(
    const std::string& path,
    const std::function<void(const std::function<void(const char*, std::size_t)>&)>& produce,
    const std::string& op, bool durable = false);

/// `j` as a plain nlohmann::json (objects sorted by key), NaN and infinities
/// kept.
nlohmann::json to_plain(const nlohmann::ordered_json& j);

}  // namespace tensordict::detail
