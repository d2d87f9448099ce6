#pragma once
// The HDF5 C API as the storage uses it: one process-wide lock, owned
// identifiers, checked calls whose failures become tensordict errors carrying
// HDF5's own message, and the element types h5py writes.
#include <tensordict/errors.h>

#include <c10/core/ScalarType.h>
#include <hdf5.h>

#include <mutex>
#include <string>
#include <utility>

namespace tensordict::detail::h5 {

/// Every HDF5 call of the process runs under this lock: Debian's serial
/// library keeps global state, and one lock costs nothing next to a call.
std::recursive_mutex& mutex();
using Lock = std::unique_lock<std::recursive_mutex>;
inline Lock lock() { return Lock(mutex()); }

/// HDF5's error stack as text (innermost messages), then cleared. Also turns
/// off HDF5's printing of errors to stderr on first use.
std::string error_text();
/// Turns off HDF5's automatic error printing (idempotent).
void silence_errors();

/// Access property lists (link, group, dataset: each works as a link access
/// list) whose external-link callback refuses every traversal: a soft link
/// or a path may lead through an external link to any file, a FIFO
/// included, which HDF5 would open. Valid for the life of the process.
hid_t link_access();
hid_t group_access();
hid_t dataset_access();

/// An owned identifier, closed with its close function.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer closer) noexcept : id_(id), closer_(closer) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }
  void reset() noexcept;
  /// Gives up ownership (the identifier is no longer closed here).
  hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }
  hid_t get() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

/// Throws `E` with "<context>: <what> failed: <HDF5's message>" when the
/// value returned by an HDF5 call is negative.
template <class E = StorageError, class R>
R check(R r, const char* what, const std::string& context) {
  if (r < 0) throw E(context + ": " + what + " failed (" + error_text() + ")");
  return r;
}
inline Hid owned(hid_t id, Hid::Closer closer, const char* what, const std::string& context) {
  return Hid(check(id, what, context), closer);
}

// ---- element types ---------------------------------------------------------

/// How a dataset's element type is read.
enum class Element : std::uint8_t {
  Tensor,       // a number type tensordict stores (dtype in ElementInfo)
  String,       // fixed or variable-length string: a non-tensor
  Opaque,       // opaque tagged "NUMPY:<dtype>" (h5py.opaque_dtype): a non-tensor
  Unsupported,  // anything else (reported when read)
};

struct ElementInfo {
  Element element = Element::Unsupported;
  c10::ScalarType dtype = c10::ScalarType::Float;
  /// Element::Opaque: the numpy dtype string after "NUMPY:" ("<i8").
  std::string opaque_dtype;
  /// Element::Unsupported: what the type is, for the error message.
  std::string description;
};

/// Classifies a dataset's file type (big-endian numbers included: HDF5
/// converts them to the native memory type on read).
ElementInfo classify(hid_t file_type);
/// The type of `dtype` in memory (native byte order): what H5Dread and
/// H5Dwrite are given. Valid for the life of the process.
hid_t memory_type(c10::ScalarType dtype);
/// The type written to files for `dtype`, as h5py writes it (little-endian
/// IEEE floats and STD integers, bool as the enum over int8 {FALSE: 0,
/// TRUE: 1}, complex as the compound {r, i}). TypeError naming `context`
/// for dtypes h5py cannot store (bfloat16, complex32, quantized...).
hid_t file_type(c10::ScalarType dtype, const std::string& context);
/// True when `dtype` can be stored.
bool storable(c10::ScalarType dtype);

}  // namespace tensordict::detail::h5
