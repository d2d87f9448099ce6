#pragma once
// The files of a replay buffer checkpoint (TorchRL's dumps/loads layout,
// docs/formats.md "TorchRL replay buffer checkpoints"): JSON and raw float64
// files written durably, and read with a FormatError naming the file and the
// field for anything missing, malformed or out of range. Not installed.

#include <tensordict/rb/writer.h>

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

namespace tensordict::rb::detail {

using ojson = nlohmann::ordered_json;

/// FormatError "<file>: <what>".
[[noreturn]] void format_error(const std::filesystem::path& file, const std::string& what);

/// The JSON object in `file` (any spacing, Python's NaN/Infinity tokens);
/// FormatError when the file is missing, not a regular file, not JSON or
/// not an object.
ojson read_json_object(const std::filesystem::path& file);
/// The field `name` of `object`; FormatError naming it when it is missing.
const ojson& field(const ojson& object, const char* name, const std::filesystem::path& file);
/// A whole number (an integer, or a float with an integral value as TorchRL
/// writes some); FormatError otherwise.
int64_t integer_value(const ojson& value, const char* name, const std::filesystem::path& file);
/// A finite number; FormatError otherwise.
double number_value(const ojson& value, const char* name, const std::filesystem::path& file);

/// Writes `object` to the new file `file` (compact JSON), fsync()ed.
void write_json_file(const std::filesystem::path& file, const ojson& object);
/// Writes the bytes of the contiguous CPU tensor `values` to the new file
/// `file`, fsync()ed.
void write_raw_file(const std::filesystem::path& file, const at::Tensor& values);
/// `count` float64 values from the start of the raw file `file` (a longer
/// file is accepted, as for memmap leaves); FormatError when it is missing or
/// shorter.
at::Tensor read_float64_file(const std::filesystem::path& file, int64_t count);

/// ValueError "<where>: the capacity must be positive" unless capacity > 0.
void check_capacity(int64_t capacity, const char* where);
/// FormatError naming `file` unless 0 <= cursor < capacity and
/// min(write_count, capacity) == len (the storage's filled rows).
void check_writer_counts(const std::filesystem::path& file, const WriterState& state,
                         int64_t capacity, int64_t len);

}  // namespace tensordict::rb::detail
