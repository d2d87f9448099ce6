#pragma once
// Checked conversions of the index and value tensors the rb calls take: done
// before anything is modified, so that bad input changes nothing.

#include <tensordict/errors.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace tensordict::rb::detail {

/// The name of the calling operation in an error message. `where` is a
/// string, or a callable returning one when building it costs an allocation
/// (sampler->name() + "::sample"): these checks run on every sample, and
/// the name is only needed when one fails.
template <class Where>
std::string where_text(const Where& where) {
  if constexpr (std::is_invocable_v<const Where&>)
    return std::string(where());
  else
    return std::string(std::string_view(where));
}

/// `index` (an integer tensor of any shape, read flat) as a contiguous int64
/// CPU tensor, every entry in [0, limit). TypeError for a non-integer tensor,
/// IndexError naming the first entry out of range.
template <class Where>
at::Tensor checked_rows(const at::Tensor& index, int64_t limit, const Where& where) {
  if (!index.defined()) throw TypeError(where_text(where) + ": the index tensor is undefined");
  if (!c10::isIntegralType(index.scalar_type(), /*includeBool=*/false))
    throw TypeError(where_text(where) + ": expected an integer index tensor, got " +
                    std::string(c10::toString(index.scalar_type())));
  at::Tensor rows = index;
  if (rows.scalar_type() != at::kLong || !rows.device().is_cpu())
    rows = rows.to(at::kCPU, at::kLong);
  // Flat and contiguous; a contiguous 1-D index (the usual one) is taken
  // as it is, without a new view.
  if (rows.dim() != 1 || !rows.is_contiguous()) rows = rows.contiguous().view({-1});
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t k = 0, n = rows.numel(); k < n; ++k) {
    if (r[k] < 0 || r[k] >= limit)
      throw IndexError(where_text(where) + ": index " + std::to_string(r[k]) +
                       " is out of range [0, " + std::to_string(limit) + ")");
  }
  return rows;
}

/// `value` (a real tensor of any shape, read flat) as a contiguous float64
/// CPU tensor of `count` entries or of one (broadcast); count < 0 accepts any
/// length. TypeError for a complex or bool tensor, ShapeError for a length
/// mismatch.
template <class Where>
at::Tensor checked_values(const at::Tensor& value, int64_t count, const Where& where) {
  if (!value.defined()) throw TypeError(where_text(where) + ": the value tensor is undefined");
  const at::ScalarType t = value.scalar_type();
  if (c10::isComplexType(t) || t == at::kBool)
    throw TypeError(where_text(where) + ": expected real values, got " +
                    std::string(c10::toString(t)));
  if (count >= 0 && value.numel() != count && value.numel() != 1)
    throw ShapeError(where_text(where) + ": " + std::to_string(value.numel()) + " values for " +
                     std::to_string(count) + " indices (expected " + std::to_string(count) +
                     " or 1)");
  at::Tensor values = value;
  if (t != at::kDouble || !values.device().is_cpu()) values = values.to(at::kCPU, at::kDouble);
  if (values.dim() != 1 || !values.is_contiguous()) values = values.contiguous().view({-1});
  return values;
}

}  // namespace tensordict::rb::detail
