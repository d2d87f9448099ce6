#pragma once
// Checked conversions of the index and value tensors the rb calls take: done
// before anything is modified, so that bad input changes nothing.

#include <tensordict/errors.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

namespace tensordict::rb::detail {

/// `index` (an integer tensor of any shape, read flat) as a contiguous int64
/// CPU tensor, every entry in [0, limit). TypeError for a non-integer tensor,
/// IndexError naming the first entry out of range.
inline at::Tensor checked_rows(const at::Tensor& index, int64_t limit, const std::string& where) {
  if (!index.defined()) throw TypeError(where + ": the index tensor is undefined");
  if (!c10::isIntegralType(index.scalar_type(), /*includeBool=*/false))
    throw TypeError(where + ": expected an integer index tensor, got " +
                    std::string(c10::toString(index.scalar_type())));
  at::Tensor rows = index;
  if (rows.scalar_type() != at::kLong || !rows.device().is_cpu())
    rows = rows.to(at::kCPU, at::kLong);
  rows = rows.contiguous().view({-1});
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t k = 0, n = rows.numel(); k < n; ++k) {
    if (r[k] < 0 || r[k] >= limit)
      throw IndexError(where + ": index " + std::to_string(r[k]) + " is out of range [0, " +
                       std::to_string(limit) + ")");
  }
  return rows;
}

/// `value` (a real tensor of any shape, read flat) as a contiguous float64
/// CPU tensor of `count` entries or of one (broadcast); count < 0 accepts any
/// length. TypeError for a complex or bool tensor, ShapeError for a length
/// mismatch.
inline at::Tensor checked_values(const at::Tensor& value, int64_t count, const std::string& where) {
  if (!value.defined()) throw TypeError(where + ": the value tensor is undefined");
  const at::ScalarType t = value.scalar_type();
  if (c10::isComplexType(t) || t == at::kBool)
    throw TypeError(where + ": expected real values, got " + std::string(c10::toString(t)));
  if (count >= 0 && value.numel() != count && value.numel() != 1)
    throw ShapeError(where + ": " + std::to_string(value.numel()) + " values for " +
                     std::to_string(count) + " indices (expected " + std::to_string(count) +
                     " or 1)");
  at::Tensor values = value;
  if (t != at::kDouble || !values.device().is_cpu()) values = values.to(at::kCPU, at::kDouble);
  return values.contiguous().view({-1});
}

}  // namespace tensordict::rb::detail
