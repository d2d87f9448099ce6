// The checked HDF5 layer: lock, errors, identifiers, element types.
#include "storage/hdf5/h5_api.h"

#include <tensordict/detail/format.h>

#include <torch/version.h>

#include <cstring>
#include <optional>
#include <vector>

// LibTorch 2.3 added uint16, uint32 and uint64, which h5py stores as STD
// unsigned integers (and Python tensordict reads back with their dtype).
#define TENSORDICT_H5_UNSIGNED_DTYPES \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))

namespace tensordict::detail::h5 {

std::recursive_mutex& mutex() {
  static std::recursive_mutex m;
  return m;
}

void silence_errors() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

namespace {
herr_t collect(unsigned n, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (e->desc && *e->desc)
    out->push_back(std::string(e->func_name ? e->func_name : "") + ": " + e->desc);
  (void)n;
  return 0;
}
}  // namespace

std::string error_text() {
  std::vector<std::string> messages;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "no HDF5 message";
  // The API call's message, then the innermost cause.
  if (messages.size() == 1) return messages.front();
  return messages.front() + "; " + messages.back();
}

namespace {
herr_t refuse_external_link(const char*, const char*, const char*, const char*, unsigned*, hid_t,
                            void*) {
  return -1;
}

hid_t refusing(hid_t list_class) {
  const hid_t list = H5Pcreate(list_class);
  H5Pset_elink_cb(list, refuse_external_link, nullptr);
  return list;
}
}  // namespace

hid_t link_access() {
  static const hid_t list = refusing(H5P_LINK_ACCESS);
  return list;
}
hid_t group_access() {
  static const hid_t list = refusing(H5P_GROUP_ACCESS);
  return list;
}
hid_t dataset_access() {
  static const hid_t list = refusing(H5P_DATASET_ACCESS);
  return list;
}

void Hid::reset() noexcept {
  if (id_ >= 0 && closer_) {
    Lock l = lock();
    closer_(id_);
  }
  id_ = H5I_INVALID_HID;
}

namespace {

// The element types of h5py that HDF5 has no constant for, made once.
struct Types {
  hid_t f16le;
  hid_t bool_enum;
  hid_t c64;
  hid_t c128;
  Types() {
    // h5py's IEEE half: a 2-byte float with 5 exponent and 10 mantissa bits.
    f16le = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(f16le, 15, 10, 5, 0, 10);
    H5Tset_size(f16le, 2);
    H5Tset_ebias(f16le, 15);
    // h5py's bool: an enum over int8.
    bool_enum = H5Tenum_create(H5T_NATIVE_INT8);
    signed char v = 0;
    H5Tenum_insert(bool_enum, "FALSE", &v);
    v = 1;
    H5Tenum_insert(bool_enum, "TRUE", &v);
    c64 = complex(H5T_NATIVE_FLOAT, 4);
    c128 = complex(H5T_NATIVE_DOUBLE, 8);
  }
  static hid_t complex(hid_t part, std::size_t size) {
    hid_t t = H5Tcreate(H5T_COMPOUND, 2 * size);
    H5Tinsert(t, "r", 0, part);
    H5Tinsert(t, "i", size, part);
    return t;
  }
};

const Types& types() {
  static const Types t;
  return t;
}

bool is_bool_enum(hid_t t) {
  if (H5Tget_nmembers(t) != 2 || H5Tget_size(t) != 1) return false;
  for (unsigned i = 0; i < 2; ++i) {
    char* name = H5Tget_member_name(t, i);
    if (!name) return false;
    signed char value = -1;
    H5Tget_member_value(t, i, &value);
    const bool ok = (std::strcmp(name, "FALSE") == 0 && value == 0) ||
                    (std::strcmp(name, "TRUE") == 0 && value == 1);
    H5free_memory(name);
    if (!ok) return false;
  }
  return true;
}

// A compound {r, i} of two floats of one size: h5py's complex numbers.
std::optional<c10::ScalarType> complex_of(hid_t t) {
  if (H5Tget_nmembers(t) != 2) return std::nullopt;
  std::size_t part = 0;
  for (unsigned i = 0; i < 2; ++i) {
    char* name = H5Tget_member_name(t, i);
    const bool ok = name && std::strcmp(name, i == 0 ? "r" : "i") == 0;
    if (name) H5free_memory(name);
    if (!ok || H5Tget_member_class(t, i) != H5T_FLOAT) return std::nullopt;
    hid_t m = H5Tget_member_type(t, i);
    const std::size_t size = H5Tget_size(m);
    H5Tclose(m);
    if (i == 1 && size != part) return std::nullopt;
    part = size;
  }
  if (part == 4) return c10::ScalarType::ComplexFloat;
  if (part == 8) return c10::ScalarType::ComplexDouble;
  return std::nullopt;
}

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    case H5T_TIME:
      return "time";
    case H5T_STRING:
      return "string";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_COMPOUND:
      return "compound";
    case H5T_REFERENCE:
      return "reference";
    case H5T_ENUM:
      return "enum";
    case H5T_VLEN:
      return "variable-length sequence";
    case H5T_ARRAY:
      return "array";
    default:
      return "unknown";
  }
}

}  // namespace

ElementInfo classify(hid_t t) {
  ElementInfo info;
  const H5T_class_t cls = H5Tget_class(t);
  const std::size_t size = H5Tget_size(t);
  auto tensor = [&](c10::ScalarType d) {
    info.element = Element::Tensor;
    info.dtype = d;
    return info;
  };
  using S = c10::ScalarType;
  switch (cls) {
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(t) == H5T_SGN_2;
      if (is_signed) {
        if (size == 1) return tensor(S::Char);
        if (size == 2) return tensor(S::Short);
        if (size == 4) return tensor(S::Int);
        if (size == 8) return tensor(S::Long);
      } else {
        if (size == 1) return tensor(S::Byte);
#if TENSORDICT_H5_UNSIGNED_DTYPES
        // As Python tensordict with torch >= 2.3 reads them.
        if (size == 2) return tensor(S::UInt16);
        if (size == 4) return tensor(S::UInt32);
        if (size == 8) return tensor(S::UInt64);
#else
        // LibTorch before 2.3 has no uint16/32/64: widened to the next signed type.
        if (size == 2) return tensor(S::Int);
        if (size == 4) return tensor(S::Long);
#endif
      }
      break;
    }
    case H5T_FLOAT:
      if (size == 2) return tensor(S::Half);
      if (size == 4) return tensor(S::Float);
      if (size == 8) return tensor(S::Double);
      break;
    case H5T_ENUM:
      if (is_bool_enum(t)) return tensor(S::Bool);
      break;
    case H5T_COMPOUND:
      if (auto c = complex_of(t)) return tensor(*c);
      break;
    case H5T_STRING:
      info.element = Element::String;
      return info;
    case H5T_OPAQUE: {
      char* tag = H5Tget_tag(t);
      std::string s = tag ? tag : "";
      if (tag) H5free_memory(tag);
      if (s.rfind("NUMPY:", 0) == 0) {
        info.element = Element::Opaque;
        info.opaque_dtype = s.substr(6);
        return info;
      }
      info.description = "opaque type tagged '" + s + "'";
      return info;
    }
    default:
      break;
  }
  info.element = Element::Unsupported;
  if (info.description.empty())
    info.description = std::string(class_name(cls)) + " type of " + std::to_string(size) +
                       " bytes" + (cls == H5T_ENUM ? " (an enum other than h5py's bool)" : "") +
                       (cls == H5T_INTEGER ? " (no LibTorch dtype holds it)" : "");
  return info;
}

bool storable(c10::ScalarType d) {
  using S = c10::ScalarType;
  switch (d) {
    case S::Bool:
    case S::Byte:
    case S::Char:
    case S::Short:
    case S::Int:
    case S::Long:
    case S::Half:
    case S::Float:
    case S::Double:
    case S::ComplexFloat:
    case S::ComplexDouble:
#if TENSORDICT_H5_UNSIGNED_DTYPES
    case S::UInt16:
    case S::UInt32:
    case S::UInt64:
#endif
      return true;
    default:
      return false;
  }
}

hid_t memory_type(c10::ScalarType d) {
  using S = c10::ScalarType;
  switch (d) {
    case S::Bool:
      return types().bool_enum;
    case S::Byte:
      return H5T_NATIVE_UINT8;
    case S::Char:
      return H5T_NATIVE_INT8;
    case S::Short:
      return H5T_NATIVE_INT16;
    case S::Int:
      return H5T_NATIVE_INT32;
    case S::Long:
      return H5T_NATIVE_INT64;
    case S::Half:
      return types().f16le;  // x86 and ARM are little-endian
    case S::Float:
      return H5T_NATIVE_FLOAT;
    case S::Double:
      return H5T_NATIVE_DOUBLE;
    case S::ComplexFloat:
      return types().c64;
    case S::ComplexDouble:
      return types().c128;
#if TENSORDICT_H5_UNSIGNED_DTYPES
    case S::UInt16:
      return H5T_NATIVE_UINT16;
    case S::UInt32:
      return H5T_NATIVE_UINT32;
    case S::UInt64:
      return H5T_NATIVE_UINT64;
#endif
    default:
      return H5I_INVALID_HID;
  }
}

hid_t file_type(c10::ScalarType d, const std::string& context) {
  using S = c10::ScalarType;
  switch (d) {
    case S::Byte:
      return H5T_STD_U8LE;
    case S::Char:
      return H5T_STD_I8LE;
    case S::Short:
      return H5T_STD_I16LE;
    case S::Int:
      return H5T_STD_I32LE;
    case S::Long:
      return H5T_STD_I64LE;
    case S::Float:
      return H5T_IEEE_F32LE;
    case S::Double:
      return H5T_IEEE_F64LE;
#if TENSORDICT_H5_UNSIGNED_DTYPES
    case S::UInt16:
      return H5T_STD_U16LE;
    case S::UInt32:
      return H5T_STD_U32LE;
    case S::UInt64:
      return H5T_STD_U64LE;
#endif
    default:
      if (storable(d)) return memory_type(d);
  }
  std::string hint = d == S::BFloat16 ? " (h5py cannot store bfloat16: convert it first, e.g. "
                                        "with .to(torch::kFloat32), and back after reading)"
                                      : "";
  throw TypeError(context + ": HDF5 storage cannot store dtype " + torch_dtype_repr(d) +
                  "; supported: bool, uint8, int8, int16, int32, int64, " +
#if TENSORDICT_H5_UNSIGNED_DTYPES
                  "uint16, uint32, uint64, " +
#endif
                  "float16, float32, float64, complex64, complex128" + hint);
}

}  // namespace tensordict::detail::h5
