#pragma once
// Small formatting helpers shared by the core and the storages (error texts,
// repr). Internal: not part of the public API.

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <string>
#include <vector>

namespace tensordict::detail {

/// "[4, 3]"
std::string format_shape(c10::IntArrayRef shape);
/// "torch.Size([4, 3])"
std::string format_torch_size(c10::IntArrayRef shape);
/// "['a', 'b']"
std::string format_key_list(const std::vector<std::string>& keys);
/// Python's dtype name without the "torch." prefix: "float32", "int64", ...
const char* dtype_name(c10::ScalarType dtype);
/// "torch.float32"
std::string torch_dtype_repr(c10::ScalarType dtype);

}  // namespace tensordict::detail
