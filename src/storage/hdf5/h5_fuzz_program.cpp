// The program interpreter of fuzz_h5 (see h5_fuzz_program.h). Each input
// byte chooses the next operation and its arguments; when the bytes run out,
// the file is closed as it is. Every HDF5 call may fail (a link name HDF5
// refuses, a dataset too large for its layout): the operation is skipped.
#include "storage/hdf5/h5_fuzz_program.h"

#include <hdf5.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::detail::h5 {

namespace {

struct Reader {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t at = 0;
  bool more() const { return at < size; }
  std::uint8_t byte() { return at < size ? data[at++] : 0; }
  std::size_t pick(std::size_t n) { return n == 0 ? 0 : byte() % n; }
};

constexpr std::array kNames = {"a",    "b",    "c", "x", "y",     "loop",
                               "up",   "nest", "s", "v", "stack", "z",
                               "deep", "0",    "A", "é", "k",     "__tensordict_stack__"};
// Dims: small, zero, and sizes no memory holds.
constexpr std::array<hsize_t, 12> kDims = {
    0, 1, 2, 3, 4, 5, 7, 16, hsize_t{1} << 31, hsize_t{1} << 40, hsize_t{1} << 62, 1000};
constexpr std::array kOpaqueTags = {"NUMPY:<i8", "NUMPY:|b1", "NUMPY:<U3", "NUMPY:<f4",
                                    "NUMPY:>i4", "NUMPY:|S5", "NUMPY:<u2", "NUMPY:<f8",
                                    "NUMPY:",    "NUMPY:<c8", "NUMPY:<U1", "other"};
constexpr std::array kLinkTargets = {"/",      "/a", "..",   ".",  "/a/b", "nowhere",
                                     "a/loop", "/b", "/a/x", "/x", "b",    "/nest/a"};
constexpr std::array kExternalFiles = {"fifo", "/dev/zero", "missing.h5", "/"};

class Program {
 public:
  Program(Reader& in, hid_t file, std::string fifo) : in_(in), file_(file), fifo_(std::move(fifo)) {
    groups_.push_back(H5Gopen2(file, "/", H5P_DEFAULT));
  }
  ~Program() {
    for (hid_t g : groups_)
      if (g >= 0) H5Gclose(g);
    for (hid_t d : datasets_) H5Dclose(d);
  }

  void run() {
    for (int op = 0; op < 48 && in_.more(); ++op) {
      switch (in_.pick(9)) {
        case 0:
        case 1:
          create_group();
          break;
        case 2:
          hard_link();
          break;
        case 3:
          soft_link();
          break;
        case 4:
          external_link();
          break;
        case 5:
        case 6:
          create_dataset();
          break;
        case 7:
          attribute();
          break;
        default:
          H5Ldelete(group(), name(), H5P_DEFAULT);
          break;
      }
    }
  }

 private:
  hid_t group() { return groups_[in_.pick(groups_.size())]; }
  const char* name() { return kNames[in_.pick(kNames.size())]; }
  // A group and a name not linked in it yet: HDF5 creating over an existing
  // external link would follow it (and open the file it names).
  std::pair<hid_t, const char*> new_link() {
    const hid_t g = group();
    const char* n = name();
    return {g, H5Lexists(g, n, H5P_DEFAULT) == 0 ? n : nullptr};
  }
  hid_t object() {
    const std::size_t n = groups_.size() + datasets_.size();
    const std::size_t i = in_.pick(n);
    return i < groups_.size() ? groups_[i] : datasets_[i - groups_.size()];
  }

  void create_group() {
    const auto [parent, n] = new_link();
    if (!n) return;
    const hid_t g = H5Gcreate2(parent, n, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g >= 0) groups_.push_back(g);
  }
  // Hard links to any object: a group linked into itself or a descendant
  // makes a cycle.
  void hard_link() {
    const hid_t target = object();
    const auto [parent, n] = new_link();
    if (n) H5Lcreate_hard(target, ".", parent, n, H5P_DEFAULT, H5P_DEFAULT);
  }
  void soft_link() {
    const char* target = kLinkTargets[in_.pick(kLinkTargets.size())];
    const auto [parent, n] = new_link();
    if (n) H5Lcreate_soft(target, parent, n, H5P_DEFAULT, H5P_DEFAULT);
  }
  void external_link() {
    const char* target = kExternalFiles[in_.pick(kExternalFiles.size())];
    const auto [parent, n] = new_link();
    if (n) H5Lcreate_external(target, "/", parent, n, H5P_DEFAULT, H5P_DEFAULT);
  }

  // The element type: numbers in both byte orders, h5py's bool and complex,
  // other enums and compounds, strings, opaque NUMPY values, arrays and
  // variable-length sequences. `numeric` is false when reading builds JSON.
  hid_t element_type(bool& numeric, bool& vlen_string) {
    numeric = true;
    vlen_string = false;
    static const std::array<hid_t, 11> plain = {
        H5T_STD_I8LE,  H5T_STD_U8LE,  H5T_STD_I16BE,  H5T_STD_U16LE,  H5T_STD_I32LE, H5T_STD_U32BE,
        H5T_STD_I64LE, H5T_STD_U64LE, H5T_IEEE_F32LE, H5T_IEEE_F64BE, H5T_STD_B8LE};
    const std::size_t kind = in_.pick(plain.size() + 9);
    if (kind < plain.size()) return H5Tcopy(plain[kind]);
    switch (kind - plain.size()) {
      case 0: {  // float16 as h5py writes it
        hid_t t = H5Tcopy(H5T_IEEE_F32LE);
        H5Tset_fields(t, 15, 10, 5, 0, 10);
        H5Tset_size(t, 2);
        H5Tset_ebias(t, 15);
        return t;
      }
      case 1:
      case 2: {  // h5py's bool, or another enum
        hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
        const bool other = kind - plain.size() == 2;
        signed char v = 0;
        H5Tenum_insert(t, other ? "RED" : "FALSE", &v);
        v = 1;
        H5Tenum_insert(t, other ? "GREEN" : "TRUE", &v);
        return t;
      }
      case 3: {  // complex {r, i}, or a compound of other names
        const bool other = in_.byte() & 1;
        hid_t t = H5Tcreate(H5T_COMPOUND, 8);
        H5Tinsert(t, other ? "re" : "r", 0, H5T_NATIVE_FLOAT);
        H5Tinsert(t, "i", 4, H5T_NATIVE_FLOAT);
        return t;
      }
      case 4: {  // variable-length string, UTF-8 or ASCII
        numeric = false;
        vlen_string = true;
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        H5Tset_cset(t, (in_.byte() & 1) ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
        return t;
      }
      case 5: {  // fixed-length string
        numeric = false;
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, 1 + in_.byte());
        return t;
      }
      case 6: {  // opaque, tagged like h5py.opaque_dtype or not
        numeric = false;
        const std::size_t sizes[] = {1, 2, 3, 4, 8, 12, 16};
        hid_t t = H5Tcreate(H5T_OPAQUE, sizes[in_.pick(7)]);
        H5Tset_tag(t, kOpaqueTags[in_.pick(kOpaqueTags.size())]);
        return t;
      }
      case 7: {  // an array of 3 ints
        const hsize_t n = 3;
        return H5Tarray_create2(H5T_NATIVE_INT32, 1, &n);
      }
      default:  // a variable-length sequence
        return H5Tvlen_create(H5T_NATIVE_INT16);
    }
  }

  void create_dataset() {
    bool numeric = true, vlen_string = false;
    const hid_t type = element_type(numeric, vlen_string);
    const std::size_t element = H5Tget_size(type);
    const std::size_t space_kind = in_.pick(7);
    hid_t space = -1;
    std::vector<hsize_t> dims;
    if (space_kind == 0) {
      space = H5Screate(H5S_NULL);
    } else if (space_kind == 1) {
      space = H5Screate(H5S_SCALAR);
    } else {
      dims.resize(1 + (space_kind - 2) % 4);
      for (auto& d : dims) d = kDims[in_.pick(kDims.size())];
      // Numbers the library would really allocate are kept small (the
      // fuzzer's memory limit is not the point); sizes past int64 stay,
      // they are refused before any allocation.
      long double bytes = static_cast<long double>(element);
      for (hsize_t d : dims) bytes *= static_cast<long double>(d);
      if (numeric && bytes > (1 << 16) && bytes < 9.3e18L)
        for (auto& d : dims) d = std::min<hsize_t>(d, 4);
      space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    }
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    bool external = false;
    const std::uint8_t layout = in_.byte();
    if (!dims.empty() && (layout & 3) >= 2) {
      std::vector<hsize_t> chunks(dims.size());
      for (std::size_t i = 0; i < dims.size(); ++i) chunks[i] = std::clamp<hsize_t>(dims[i], 1, 4);
      H5Pset_chunk(dcpl, static_cast<int>(chunks.size()), chunks.data());
      if ((layout & 3) == 3) {
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, 4);
        if (layout & 4) H5Pset_fletcher32(dcpl);
      }
    } else if ((layout & 3) == 1) {
      H5Pset_layout(dcpl, H5D_COMPACT);
    } else if (layout & 8) {
      // Raw data in another file (never written or read here: the FIFO
      // would block): the library must not read it either.
      external = true;
      H5Pset_external(dcpl, (layout & 16) ? "/dev/zero" : fifo_.c_str(), 0, H5F_UNLIMITED);
    }
    // Early allocation writes every chunk's index entry at creation: only
    // for small datasets (HDF5 would take hours on 2^60 chunks).
    long double elements = 1;
    for (hsize_t d : dims) elements *= static_cast<long double>(d);
    if ((layout & 32) && elements <= 4096 && !external)
      H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    const auto [parent, n] = new_link();
    const hid_t ds = n ? H5Dcreate2(parent, n, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    if (ds >= 0) {
      if ((layout & 64) && !external) write_data(ds, type, space, vlen_string);
      datasets_.push_back(ds);
    }
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
  }

  // Data from the input's bytes (repeated): numbers of any bit pattern,
  // strings of any bytes (UTF-8 or not).
  void write_data(hid_t ds, hid_t type, hid_t space, bool vlen_string) {
    const hssize_t n = H5Sget_select_npoints(space);
    const std::size_t element = H5Tget_size(type);
    if (n <= 0 || n > 256 || H5Tget_class(type) == H5T_VLEN) return;
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) * element);
    for (auto& b : bytes) b = in_.byte();
    if (!vlen_string) {
      H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
      return;
    }
    std::vector<std::string> strings(static_cast<std::size_t>(n));
    for (auto& s : strings)
      for (std::size_t k = in_.pick(8); k > 0; --k) s.push_back(static_cast<char>(in_.byte() | 1));
    std::vector<const char*> ptrs;
    for (const auto& s : strings) ptrs.push_back(s.c_str());
    H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data());
  }

  // The attributes the storage reads ("__tensordict_stack__", a shape) and
  // writes ("__tensordict_str__"), of any type and dataspace.
  void attribute() {
    if (datasets_.empty()) return;
    const hid_t ds = datasets_[in_.pick(datasets_.size())];
    const char* attr = (in_.byte() & 1) ? "__tensordict_stack__" : "__tensordict_str__";
    H5Adelete(ds, attr);
    const std::size_t kind = in_.pick(4);
    hid_t space = -1;
    hsize_t n = 0;
    if (kind == 0) {
      space = H5Screate(H5S_NULL);
    } else if (kind == 1) {
      space = H5Screate(H5S_SCALAR);
      n = 1;
    } else {
      std::array<hsize_t, 2> dims = {1 + hsize_t{in_.byte()} % 40, 2};
      space = H5Screate_simple(static_cast<int>(kind - 1), dims.data(), nullptr);
      n = kind == 2 ? dims[0] : dims[0] * 2;
    }
    const hid_t types[] = {H5T_NATIVE_INT64, H5T_NATIVE_INT8, H5T_NATIVE_DOUBLE, H5T_NATIVE_UINT64};
    const hid_t type = types[in_.pick(4)];
    const hid_t a = H5Acreate2(ds, attr, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
      // Small numbers (a shape that may match the dataset's), or any bits.
      std::vector<std::uint8_t> bytes(n * H5Tget_size(type));
      const bool small = in_.byte() & 1;
      for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = small ? (i % H5Tget_size(type) == 0 ? in_.byte() % 8 : 0) : in_.byte();
      if (n > 0) H5Awrite(a, type, bytes.data());
      H5Aclose(a);
    }
    H5Sclose(space);
  }

  Reader& in_;
  hid_t file_;
  std::string fifo_;  // beside the file
  std::vector<hid_t> groups_;
  std::vector<hid_t> datasets_;
};

}  // namespace

bool write_fuzz_program(const std::uint8_t* data, std::size_t size, const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Reader in{data, size};
  const std::uint8_t flags = in.byte();
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (flags & 1) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) return false;
  {
    const std::size_t slash = path.rfind('/');
    Program program(in, file, (slash == std::string::npos ? "." : path.substr(0, slash)) + "/fifo");
    program.run();
  }
  H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
  return true;
}

}  // namespace tensordict::detail::h5
