#pragma once
/// @file dtype.h
/// Python's spelling of dtypes, as every format of Python tensordict writes
/// them (memmap meta.json, consolidated metadata, schemas): "torch.float32".

#include <c10/core/ScalarType.h>

#include <string>

namespace tensordict {

/// "torch.float32", "torch.uint8", ... (what Python's str(dtype) prints).
std::string dtype_to_string(at::ScalarType dtype);
/// The inverse of dtype_to_string, for the dtypes tensordict stores;
/// FormatError for any other string.
at::ScalarType dtype_from_string(const std::string& name);

}  // namespace tensordict
