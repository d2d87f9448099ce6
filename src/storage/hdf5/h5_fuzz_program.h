#pragma once
// For the fuzz target fuzz_h5 only (compiled into it, not into the library):
// decodes fuzzer bytes into a small program of HDF5 C API calls and runs it,
// writing a structurally hostile but valid HDF5 file. No HDF5 header here,
// so that the target's own source needs none.
#include <cstddef>
#include <cstdint>
#include <string>

namespace tensordict::detail::h5 {

/// Writes the file the program in `data` describes to `path` (groups nested
/// or linked in cycles, soft and external links, datasets of every element
/// type and of zero, huge or NULL dataspaces, chunked and filtered ones,
/// the attributes the storage reads). External storage and links name
/// "fifo" beside `path` (the caller may make it a FIFO) or /dev/zero; the
/// program never reads or writes them. Returns false when HDF5 refused to
/// make even the file; calls it refuses inside the program are skipped.
bool write_fuzz_program(const std::uint8_t* data, std::size_t size, const std::string& path);

}  // namespace tensordict::detail::h5
