#include <tensordict/detail/format.h>
#include <tensordict/dtype.h>
#include <tensordict/errors.h>

#include <torch/version.h>

#include <sstream>

// LibTorch 2.3 added the unsigned dtypes beyond uint8 and 2.1 the float8 ones;
// Python names them as below and writes them to memmap directories (uint*).
#define TENSORDICT_HAS_FLOAT8_DTYPES \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))
#define TENSORDICT_HAS_UNSIGNED_DTYPES \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))

namespace tensordict::detail {

std::string format_shape(c10::IntArrayRef shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string format_torch_size(c10::IntArrayRef shape) {
  return "torch.Size(" + format_shape(shape) + ")";
}

std::string format_key_list(const std::vector<std::string>& keys) {
  std::string out = "[";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    out += "'" + keys[i] + "'";
  }
  return out + "]";
}

const char* dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Bool:
      return "bool";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::ComplexHalf:
      return "complex32";
    case c10::ScalarType::ComplexFloat:
      return "complex64";
    case c10::ScalarType::ComplexDouble:
      return "complex128";
#if TENSORDICT_HAS_UNSIGNED_DTYPES
    case c10::ScalarType::UInt16:
      return "uint16";
    case c10::ScalarType::UInt32:
      return "uint32";
    case c10::ScalarType::UInt64:
      return "uint64";
#endif
#if TENSORDICT_HAS_FLOAT8_DTYPES
    case c10::ScalarType::Float8_e4m3fn:
      return "float8_e4m3fn";
    case c10::ScalarType::Float8_e5m2:
      return "float8_e5m2";
    case c10::ScalarType::Float8_e4m3fnuz:
      return "float8_e4m3fnuz";
    case c10::ScalarType::Float8_e5m2fnuz:
      return "float8_e5m2fnuz";
#endif
    case c10::ScalarType::QInt8:
      return "qint8";
    case c10::ScalarType::QUInt8:
      return "quint8";
    case c10::ScalarType::QInt32:
      return "qint32";
    default:
      return c10::toString(dtype);
  }
}

std::string torch_dtype_repr(c10::ScalarType dtype) {
  return std::string("torch.") + dtype_name(dtype);
}

}  // namespace tensordict::detail

namespace tensordict {

// ---- dtype strings (docs/formats.md, "Dtype strings") --------------------------------

std::string dtype_to_string(at::ScalarType dtype) { return detail::torch_dtype_repr(dtype); }

at::ScalarType dtype_from_string(const std::string& s) {
  static const std::pair<const char*, at::ScalarType> table[] = {
    {"torch.bool", at::kBool},
    {"torch.uint8", at::kByte},
    {"torch.int8", at::kChar},
    {"torch.int16", at::kShort},
    {"torch.int32", at::kInt},
    {"torch.int64", at::kLong},
    {"torch.float16", at::kHalf},
    {"torch.bfloat16", at::kBFloat16},
    {"torch.float32", at::kFloat},
    {"torch.float64", at::kDouble},
    {"torch.complex32", at::ScalarType::ComplexHalf},
    {"torch.complex64", at::kComplexFloat},
    {"torch.complex128", at::kComplexDouble},
#if TENSORDICT_HAS_UNSIGNED_DTYPES
    {"torch.uint16", at::ScalarType::UInt16},
    {"torch.uint32", at::ScalarType::UInt32},
    {"torch.uint64", at::ScalarType::UInt64},
#endif
#if TENSORDICT_HAS_FLOAT8_DTYPES
    {"torch.float8_e4m3fn", at::ScalarType::Float8_e4m3fn},
    {"torch.float8_e5m2", at::ScalarType::Float8_e5m2},
    {"torch.float8_e4m3fnuz", at::ScalarType::Float8_e4m3fnuz},
    {"torch.float8_e5m2fnuz", at::ScalarType::Float8_e5m2fnuz},
#endif
  };
  for (const auto& [name, t] : table)
    if (s == name) return t;
  throw FormatError("unknown dtype '" + s + "'");
}

}  // namespace tensordict
