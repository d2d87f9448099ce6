// One open HDF5 file: modes, caches, dataset creation, non-tensor values.
#include "storage/hdf5/h5_file.h"

#include "io/json_io.h"

#include <tensordict/detail/format.h>

#include <ATen/ATen.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>

namespace tensordict::detail::h5 {

std::string join(const std::string& path, std::string_view key) {
  std::string out = path;
  if (out.empty() || out.back() != '/') out += '/';
  out += key;
  return out;
}

namespace {

// Whether `filename` exists (through symbolic links); FormatError when it is
// not a regular file: HDF5 would open a FIFO and wait for a writer, read a
// device forever, or fail obscurely on a directory.
bool exists_as_regular_file(const std::string& filename, const std::string& context) {
  struct stat st {};
  if (::stat(filename.c_str(), &st) != 0) return false;
  if (!S_ISREG(st.st_mode))
    throw FormatError(context + " is not a regular file (" + file_kind(st.st_mode) +
                      "); HDF5 storage opens only regular files");
  return true;
}

}  // namespace

void check_not_locked(const std::string& filename, const std::string& context, const char* what) {
  // HDF5 takes this flock (exclusive to write, shared to read) on every file
  // it opens with locking on, after opening: H5Fcreate truncates first and
  // finds the lock second. Asking first keeps the file whole.
  const int fd = ::open(filename.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;  // gone: nothing to lose
  const int r = ::flock(fd, LOCK_EX | LOCK_NB);
  const int err = errno;
  ::close(fd);  // releases the probe's lock
  if (r != 0 && err == EWOULDBLOCK)
    throw StorageError(context +
                       " is open in another process, or in another handle of this "
                       "one (it holds HDF5's file lock): " +
                       what + " refused; the file is left as it was");
}

std::string canonical_group(const std::string& group) {
  std::string out = "/";
  // One leading '/' names the root; every component after it is a key.
  const std::size_t first = !group.empty() && group.front() == '/' ? 1 : 0;
  if (group.size() <= first) return out;
  std::size_t i = first;
  while (i <= group.size()) {
    std::size_t j = group.find('/', i);
    if (j == std::string::npos) j = group.size();
    const std::string_view part = std::string_view(group).substr(i, j - i);
    if (part.empty() || part == "." || part == "..")
      throw ValueError("PersistentTensorDict: the group '" + group + "' has the component '" +
                       std::string(part) +
                       "', which is not a valid key (empty, '.' and '..' are refused, as set() "
                       "refuses them)");
    out = join(out, part);
    i = j + 1;
  }
  return out;
}

File::File(const std::string& filename, const H5OpenOptions& options)
    : filename_(filename), mode_(options.mode), dataset_options_(options.dataset) {
  silence_errors();
  const std::string& m = options.mode;
  if (m != "r" && m != "r+" && m != "w" && m != "w-" && m != "x" && m != "a")
    throw ValueError("PersistentTensorDict: mode '" + m + "' for '" + filename +
                     "' is not one of 'r', 'r+', 'w', 'w-', 'x', 'a'");
  if (options.dataset.gzip && (*options.dataset.gzip < 0 || *options.dataset.gzip > 9))
    throw ValueError("PersistentTensorDict: gzip level " + std::to_string(*options.dataset.gzip) +
                     " for '" + filename + "' is not in 0-9");
  for (int64_t c : options.dataset.chunks)
    if (c <= 0)
      throw ValueError("PersistentTensorDict: chunk sizes must be positive, got " +
                       format_shape(options.dataset.chunks) + " for '" + filename + "'");
  writable_ = m != "r";
  const std::string context = "HDF5 file '" + filename + "'";
  Lock l = lock();
  Hid fapl = owned(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate", context);
  if (options.locking)
    check(H5Pset_file_locking(fapl.get(), *options.locking, true), "H5Pset_file_locking", context);
  if (options.swmr) {
    // SWMR needs the 1.10 file format (superblock 3); h5py reads it.
    check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST),
          "H5Pset_libver_bounds", context);
    swmr_format_ = true;
  }
  const unsigned swmr_read = options.swmr ? H5F_ACC_SWMR_READ : 0u;
  const unsigned swmr_write = options.swmr ? H5F_ACC_SWMR_WRITE : 0u;
  const bool present = exists_as_regular_file(filename, context);
  auto open_existing = [&](unsigned flags) {
    if (!present)
      throw StorageError(context + " does not exist (mode '" + m + "' opens an existing file)");
    const htri_t is_h5 = H5Fis_hdf5(filename.c_str());
    if (is_h5 <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw FormatError(context + " is not an HDF5 file (no HDF5 signature)");
    }
    hid_t id = H5Fopen(filename.c_str(), flags, fapl.get());
    if (id < 0) {
      if (flags & (H5F_ACC_SWMR_READ | H5F_ACC_SWMR_WRITE))
        throw FormatError(context + " cannot be opened in mode '" + m +
                          "' with swmr (was it created with swmr = true? truncated, corrupt or "
                          "locked by a writer without SWMR?): " +
                          error_text());
      throw FormatError(context + " cannot be opened in mode '" + m +
                        "' (truncated, corrupt or locked by another process): " + error_text());
    }
    file_ = Hid(id, H5Fclose);
    swmr_read_ = (flags & H5F_ACC_SWMR_READ) != 0;
    swmr_write_ = (flags & H5F_ACC_SWMR_WRITE) != 0;
  };
  auto create = [&](unsigned flags) {
    if ((flags & H5F_ACC_EXCL) && present)
      throw StorageError(context + " already exists (mode '" + m + "' creates a new file)");
    if ((flags & H5F_ACC_TRUNC) && present && options.locking.value_or(true))
      check_not_locked(filename, context, ("mode '" + m + "' (truncating)").c_str());
    file_ = owned(H5Fcreate(filename.c_str(), flags, H5P_DEFAULT, fapl.get()), H5Fclose,
                  "H5Fcreate", context);
  };
  // "a" (and the default) opens the file when present and creates it when not.
  const bool truncate = m == "w", exclusive = m == "w-" || m == "x";
  if (m == "r")
    open_existing(H5F_ACC_RDONLY | swmr_read);
  else if (m == "r+" || (present && !truncate && !exclusive))
    open_existing(H5F_ACC_RDWR | swmr_write);
  else
    create(truncate ? H5F_ACC_TRUNC : H5F_ACC_EXCL);
}

File::~File() {
  try {
    close();
  } catch (...) {
    // A destructor does not throw; close() reports errors when called.
  }
}

void File::check_open() const {
  if (!file_)
    throw StorageError("HDF5 file '" + filename_ +
                       "' is closed (PersistentTensorDict::close()); open it again with "
                       "PersistentTensorDict::open");
}

void File::check_writable(const char* what, const std::string& path) const {
  check_open();
  if (!writable_)
    throw StorageError(std::string(what) + " " + path + ": HDF5 file '" + filename_ +
                       "' is opened read-only (mode '" + mode_ +
                       "'); open it with mode 'r+' or 'a' to write");
}

void File::start_swmr_write() {
  Lock l = lock();
  check_writable("starting SWMR writing of", "/");
  if (swmr_write_) return;
  if (!swmr_format_)
    throw StorageError("HDF5 file '" + filename_ +
                       "' was not opened with swmr = true (H5OpenOptions::swmr), so it may not "
                       "be in the format SWMR needs; open or create it with swmr = true");
  if (H5Fstart_swmr_write(file_.get()) < 0)
    throw StorageError("HDF5 file '" + filename_ +
                       "': H5Fstart_swmr_write failed: " + error_text());
  swmr_write_ = true;
}

void File::check_structure_writable(const char* what, const std::string& path) const {
  if (swmr_write_)
    throw StorageError(std::string(what) + " " + path + ": HDF5 file '" + filename_ +
                       "' is in SWMR writing, where groups and datasets can be neither created "
                       "nor removed; create them before start_swmr_write()");
}

void File::refresh(const Dataset& d) const {
  if (swmr_read_) check(H5Drefresh(d.id.get()), "H5Drefresh", d.where);
}

void File::written() {
  if (swmr_write_)
    check(H5Fflush(file_.get(), H5F_SCOPE_LOCAL), "H5Fflush", "HDF5 file '" + filename_ + "'");
}

hid_t Dataset::memory_space(const std::vector<hsize_t>& dims) {
  if (!mem_ || dims != mem_dims_) {
    mem_ = owned(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
                 "H5Screate_simple", where);
    mem_dims_ = dims;
  }
  return mem_.get();
}

std::string File::where(const std::string& path) const {
  return "HDF5 file '" + filename_ + "', " + path;
}

void File::close() {
  Lock l = lock();
  if (!file_) return;
  // The file is closed for every handle whatever happens; what HDF5 could
  // not write (rows and metadata it buffered, on a full disk) is reported.
  // Flushed while the datasets are open: H5Dclose writes a dataset's
  // buffered rows too, and its failure would go unseen.
  const hid_t id = file_.release();
  std::string failure;
  if (writable_ && H5Fflush(id, H5F_SCOPE_GLOBAL) < 0) failure = "H5Fflush: " + error_text();
  ++generation_;
  entries_.clear();
  listings_.clear();
  groups_.clear();
  if (H5Fclose(id) < 0 && failure.empty()) failure = "H5Fclose: " + error_text();
  H5Eclear2(H5E_DEFAULT);
  if (!failure.empty())
    throw StorageError("HDF5 file '" + filename_ +
                       "': closing failed, data written since the last successful flush() may "
                       "be lost (" +
                       failure + ")");
}

void File::flush() {
  Lock l = lock();
  check_open();
  if (writable_ && H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0)
    throw StorageError("HDF5 file '" + filename_ +
                       "': flush failed, data written since the last successful flush() may "
                       "not be in the file (" +
                       error_text() + ")");
}

hid_t File::group(const std::string& path, bool create) {
  check_open();
  auto it = groups_.find(path);
  if (it != groups_.end()) return it->second.get();
  hid_t id = -1;
  if (path == "/") {
    id = H5Gopen2(file_.get(), "/", group_access());
  } else {
    htri_t present = H5Lexists(file_.get(), path.c_str(), link_access());
    if (present <= 0) {
      H5Eclear2(H5E_DEFAULT);
      if (!create) throw KeyError(where(path) + ": no such group");
      check_writable("creating group", path);
      Hid lcpl = owned(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "H5Pcreate", where(path));
      H5Pset_create_intermediate_group(lcpl.get(), 1);
      id = H5Gcreate2(file_.get(), path.c_str(), lcpl.get(), H5P_DEFAULT, group_access());
      listings_.clear();
    } else {
      id = H5Gopen2(file_.get(), path.c_str(), group_access());
    }
  }
  Hid g = owned(id, H5Gclose, "opening the group", where(path));
  return groups_.emplace(path, std::move(g)).first->second.get();
}

namespace {
herr_t list_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

// The attributes Python tensordict puts on the datasets it writes: strings
// are marked (so that it can read them back as str), NonTensorStacks carry
// their shape.
constexpr const char* kStringAttribute = "__tensordict_str__";
constexpr const char* kStackAttribute = "__tensordict_stack__";

// The shape of the NonTensorStack a dataset holds (its "__tensordict_stack__"
// attribute, integers of one dim), nullopt when it has none. Sets `problem`
// when the attribute is not a shape.
std::optional<std::vector<int64_t>> read_stack_attribute(hid_t dataset, const std::string& where,
                                                         std::string& problem) {
  const htri_t present = H5Aexists(dataset, kStackAttribute);
  if (present <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  Hid attr = owned(H5Aopen(dataset, kStackAttribute, H5P_DEFAULT), H5Aclose, "H5Aopen", where);
  Hid type = owned(H5Aget_type(attr.get()), H5Tclose, "H5Aget_type", where);
  Hid space = owned(H5Aget_space(attr.get()), H5Sclose, "H5Aget_space", where);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  // A dataset has at most H5S_MAX_RANK (32) dims, so a longer shape cannot
  // be its shape (and is not read: its size is the file's word).
  if (H5Tget_class(type.get()) != H5T_INTEGER || rank > 1 || n < 1 || n > H5S_MAX_RANK) {
    problem = std::string("the attribute ") + kStackAttribute +
              " (a NonTensorStack's shape) is not a list of at most 32 integers";
    return std::nullopt;
  }
  std::vector<int64_t> shape(static_cast<std::size_t>(n));
  check(H5Aread(attr.get(), H5T_NATIVE_INT64, shape.data()), "H5Aread", where);
  return shape;
}

void write_string_attribute(hid_t dataset, const std::string& where) {
  Hid space = owned(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", where);
  const hid_t type = file_type(c10::ScalarType::Bool, where);  // h5py's bool enum
  Hid attr =
      owned(H5Acreate2(dataset, kStringAttribute, type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
            H5Aclose, "H5Acreate2", where);
  const bool value = true;
  check(H5Awrite(attr.get(), memory_type(c10::ScalarType::Bool), &value), "H5Awrite", where);
}

void write_stack_attribute(hid_t dataset, at::IntArrayRef shape, const std::string& where) {
  const hsize_t n = shape.size();
  Hid space = owned(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple", where);
  Hid attr = owned(
      H5Acreate2(dataset, kStackAttribute, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
      H5Aclose, "H5Acreate2", where);
  check(H5Awrite(attr.get(), H5T_NATIVE_INT64, shape.data()), "H5Awrite", where);
}
}  // namespace

const std::vector<std::string>& File::keys(const std::string& path) {
  check_open();
  auto it = listings_.find(path);
  if (it != listings_.end()) return it->second;
  std::vector<std::string> names;
  hid_t g = group(path);
  check(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, list_link, &names), "H5Literate",
        where(path));
  return listings_.emplace(path, std::move(names)).first->second;
}

ObjectId object_id(hid_t object, const std::string& where) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  check<FormatError>(H5Oget_info3(object, &info, H5O_INFO_BASIC), "H5Oget_info3", where);
  std::string id(reinterpret_cast<const char*>(&info.token), sizeof(info.token));
#else
  H5O_info_t info;
  check<FormatError>(H5Oget_info2(object, &info, H5O_INFO_BASIC), "H5Oget_info2", where);
  std::string id(reinterpret_cast<const char*>(&info.addr), sizeof(info.addr));
#endif
  id.append(reinterpret_cast<const char*>(&info.fileno), sizeof(info.fileno));
  return id;
}

ObjectId File::group_id(const std::string& path) { return object_id(group(path), where(path)); }

namespace {

// Why a dataset with a readable element type still cannot be read, or "".
std::string refusal(hid_t dataset, hid_t space, hid_t type, const std::vector<hsize_t>& dims,
                    const std::string& where) {
  if (H5Sget_simple_extent_type(space) == H5S_NULL)
    return "a NULL dataspace (an empty value: h5py.Empty), which holds no tensor or value";
  // Sizes as int64 (LibTorch's), elements times bytes included.
  const std::size_t element = std::max<std::size_t>(H5Tget_size(type), 1);
  int64_t bytes = static_cast<int64_t>(element);
  for (hsize_t d : dims)
    if (d > static_cast<hsize_t>(INT64_MAX) ||
        __builtin_mul_overflow(bytes, static_cast<int64_t>(d), &bytes))
      return "a shape whose byte count overflows int64";
  Hid dcpl = owned(H5Dget_create_plist(dataset), H5Pclose, "H5Dget_create_plist", where);
  // Raw data in other files (any path: a FIFO, a device) or virtual datasets
  // mapping other files: not followed.
  if (H5Pget_external_count(dcpl.get()) > 0)
    return "its data is in external files (H5Pset_external), which are not read";
  if (H5Pget_layout(dcpl.get()) == H5D_VIRTUAL)
    return "a virtual dataset (data mapped from other datasets or files), which is not read";
  H5Eclear2(H5E_DEFAULT);
  return "";
}

}  // namespace

Entry* File::entry(const std::string& path, std::string_view key) {
  check_open();
  if (key.empty() || key.find('/') != std::string_view::npos || key == "." || key == "..")
    return nullptr;
  std::string full = join(path, key);
  auto it = entries_.find(full);
  if (it != entries_.end()) return it->second.get();
  hid_t g = group(path);
  const std::string name(key);
  htri_t present = H5Lexists(g, name.c_str(), link_access());
  if (present <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return nullptr;
  }
  auto e = std::make_unique<Entry>();
  // Hard and soft links are followed (cycles are refused by the walks);
  // external and user-defined links name other files, which are not opened.
  H5L_info_t link;
  check<FormatError>(H5Lget_info(g, name.c_str(), &link, link_access()), "H5Lget_info",
                     where(full));
  auto unreadable = [&](const std::string& why) {
    e->dataset = std::make_unique<Dataset>();
    e->dataset->info.description = why;
    e->dataset->where = where(full);
    return entries_.emplace(std::move(full), std::move(e)).first->second.get();
  };
  if (link.type != H5L_TYPE_HARD && link.type != H5L_TYPE_SOFT)
    return unreadable(link.type == H5L_TYPE_EXTERNAL
                          ? "an external link to another file, which is not followed"
                          : "a user-defined link, which is not followed");
  const hid_t opened = H5Oopen(g, name.c_str(), link_access());
  if (opened < 0 && link.type == H5L_TYPE_SOFT)
    return unreadable(
        "a soft link that leads nowhere (dangling, or through an external link, "
        "which is not followed): " +
        error_text());
  Hid obj = owned(opened, H5Oclose, "H5Oopen", where(full));
  const H5I_type_t type = H5Iget_type(obj.get());
  if (type == H5I_GROUP) {
    e->is_group = true;
    e->group_id = object_id(obj.get(), where(full));
  } else if (type == H5I_DATASET) {
    auto d = std::make_unique<Dataset>();
    d->id = Hid(obj.release(), H5Dclose);
    Hid t = owned(H5Dget_type(d->id.get()), H5Tclose, "H5Dget_type", where(full));
    d->info = classify(t.get());
    d->space = owned(H5Dget_space(d->id.get()), H5Sclose, "H5Dget_space", where(full));
    const int rank = check(H5Sget_simple_extent_ndims(d->space.get()), "H5Sget_simple_extent_ndims",
                           where(full));
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    if (rank > 0) H5Sget_simple_extent_dims(d->space.get(), dims.data(), nullptr);
    d->where = where(full);
    d->refused = refusal(d->id.get(), d->space.get(), t.get(), dims, d->where);
    if (d->refused.empty()) {
      d->shape.assign(dims.begin(), dims.end());
      if (d->info.element == Element::String || d->info.element == Element::Opaque)
        d->stack_shape = read_stack_attribute(d->id.get(), d->where, d->refused);
      if (d->refused.empty() && d->stack_shape && *d->stack_shape != d->shape)
        d->refused = "a NonTensorStack of shape " + format_shape(*d->stack_shape) +
                     " (its __tensordict_stack__ attribute) in a dataset of shape " +
                     format_shape(d->shape);
    }
    if (!d->refused.empty()) {
      d->info.element = Element::Unsupported;
      d->stack_shape.reset();
    }
    e->dataset = std::move(d);
  } else {
    // A named datatype or another object: listed, read as unsupported.
    e->dataset = std::make_unique<Dataset>();
    e->dataset->info.description = "an HDF5 object that is neither a group nor a dataset";
    e->dataset->where = where(full);
  }
  return entries_.emplace(std::move(full), std::move(e)).first->second.get();
}

void File::forget(const std::string& path, std::string_view key) {
  ++generation_;
  listings_.erase(path);
  const std::string full = join(path, key);
  auto under = [&](const std::string& p) {
    return p == full || (p.size() > full.size() && p.compare(0, full.size(), full) == 0 &&
                         p[full.size()] == '/');
  };
  std::erase_if(entries_, [&](const auto& kv) { return under(kv.first); });
  std::erase_if(groups_, [&](const auto& kv) { return under(kv.first); });
  std::erase_if(listings_, [&](const auto& kv) { return under(kv.first); });
}

void File::remove(const std::string& path, std::string_view key) {
  check_writable("removing", join(path, key));
  forget(path, key);
  const std::string name(key);
  check(H5Ldelete(group(path), name.c_str(), link_access()), "H5Ldelete", where(join(path, key)));
}

// ---- dataset creation ----------------------------------------------------------

namespace {

// h5py's automatic chunk shape (guess_chunk): halve the dims in turn until a
// chunk is near a target between 8 KiB and 1 MiB that grows with the
// dataset's size.
std::vector<hsize_t> guess_chunks(at::IntArrayRef shape, std::size_t element_size) {
  std::vector<double> chunks;
  for (int64_t s : shape) chunks.push_back(s == 0 ? 1024.0 : static_cast<double>(s));
  double size = static_cast<double>(element_size);
  for (double c : chunks) size *= c;
  double target = 16.0 * 1024 * std::pow(2.0, std::log10(size / (1024.0 * 1024)));
  target = std::clamp(target, 8.0 * 1024, 1024.0 * 1024);
  for (std::size_t i = 0;; ++i) {
    double bytes = static_cast<double>(element_size);
    double count = 1;
    for (double c : chunks) {
      bytes *= c;
      count *= c;
    }
    if ((bytes < target || std::abs(bytes - target) / target < 0.5) && bytes < 1024.0 * 1024) break;
    if (count == 1) break;
    auto& c = chunks[i % chunks.size()];
    c = std::ceil(c / 2.0);
  }
  std::vector<hsize_t> out;
  for (std::size_t i = 0; i < chunks.size(); ++i)
    out.push_back(
        static_cast<hsize_t>(std::min<double>(chunks[i], std::max<int64_t>(shape[i], 1))));
  return out;
}

}  // namespace

Hid File::creation_plist(at::IntArrayRef shape, std::size_t element_size) const {
  const auto& o = dataset_options_;
  Hid dcpl = owned(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate", filename_);
  if (swmr_format_) {
    // A SWMR reader that opened a dataset before its storage was allocated
    // never sees the allocation (measured with h5py): allocate at creation,
    // still without writing fill values (the file grows sparse).
    const std::string context = "HDF5 file '" + filename_ + "'";
    check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time", context);
    check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_IFSET), "H5Pset_fill_time", context);
  }
  const bool any_zero = std::any_of(shape.begin(), shape.end(), [](int64_t s) { return s == 0; });
  // Scalars and empty datasets cannot be chunked: contiguous, unfiltered.
  if (shape.empty() || any_zero || (o.chunks.empty() && !o.filtered())) return dcpl;
  std::vector<hsize_t> chunks;
  if (o.chunks.empty()) {
    chunks = guess_chunks(shape, element_size);
  } else {
    for (std::size_t i = 0; i < shape.size(); ++i)
      chunks.push_back(
          static_cast<hsize_t>(i < o.chunks.size() ? std::min(o.chunks[i], shape[i]) : shape[i]));
  }
  const std::string context = "HDF5 file '" + filename_ + "'";
  check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunks.size()), chunks.data()), "H5Pset_chunk",
        context);
  if (o.shuffle) check(H5Pset_shuffle(dcpl.get()), "H5Pset_shuffle", context);
  if (o.gzip)
    check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(*o.gzip)), "H5Pset_deflate", context);
  if (o.fletcher32) check(H5Pset_fletcher32(dcpl.get()), "H5Pset_fletcher32", context);
  return dcpl;
}

Dataset& File::create_tensor(const std::string& path, std::string_view key, at::IntArrayRef shape,
                             c10::ScalarType dtype) {
  const std::string full = join(path, key);
  hid_t ftype = file_type(dtype, where(full));
  check_writable("creating dataset", full);
  hid_t g = group(path);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Hid space =
      owned(shape.empty() ? H5Screate(H5S_SCALAR)
                          : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
            H5Sclose, "H5Screate", where(full));
  Hid dcpl = creation_plist(shape, H5Tget_size(ftype));
  forget(path, key);
  const std::string name(key);
  Hid ds = owned(
      H5Dcreate2(g, name.c_str(), ftype, space.get(), H5P_DEFAULT, dcpl.get(), dataset_access()),
      H5Dclose, "H5Dcreate2", where(full));
  auto e = std::make_unique<Entry>();
  e->dataset = std::make_unique<Dataset>();
  Dataset& d = *e->dataset;
  d.id = std::move(ds);
  d.space = std::move(space);
  d.shape.assign(shape.begin(), shape.end());
  d.info.element = Element::Tensor;
  d.info.dtype = dtype;
  d.where = where(full);
  entries_[full] = std::move(e);
  return d;
}

void File::write_tensor(const std::string& path, std::string_view key, const at::Tensor& value) {
  Dataset& d = create_tensor(path, key, value.sizes(), value.scalar_type());
  if (value.numel() == 0) return;
  at::Tensor c = value.contiguous();
  check(H5Dwrite(d.id.get(), memory_type(c.scalar_type()), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                 c.data_ptr()),
        "H5Dwrite", where(join(path, key)));
}

// ---- non-tensor values ---------------------------------------------------------

namespace {

using json = nlohmann::json;

// numpy's view of a JSON value: the array shape and the element kind.
struct NumpyArray {
  std::vector<hsize_t> shape;
  std::vector<const json*> items;  // row-major
  char kind = 'f';                 // b, i, f, U
  std::size_t itemsize = 8;
  std::vector<std::u32string> strings;
};

std::u32string utf32(const std::string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp = c;
    std::size_t n = 1;
    if (c >= 0xF0) {
      cp = c & 0x07;
      n = 4;
    } else if (c >= 0xE0) {
      cp = c & 0x0F;
      n = 3;
    } else if (c >= 0xC0) {
      cp = c & 0x1F;
      n = 2;
    }
    for (std::size_t k = 1; k < n && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8(const std::u32string& s) {
  std::string out;
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// As np.array(value): nested lists of equal lengths are dims; the leaves
// must all be bools, numbers or strings.
NumpyArray as_numpy(const json& value, const std::string& context) {
  NumpyArray a;
  const json* level = &value;
  while (level->is_array()) {
    a.shape.push_back(level->size());
    if (level->empty()) break;
    level = &level->front();
  }
  // Collect the leaves, checking that every list at each depth has the
  // length of the first.
  std::function<void(const json&, std::size_t)> walk = [&](const json& v, std::size_t depth) {
    if (depth == a.shape.size()) {
      if (v.is_array())
        throw TypeError(context +
                        ": the list is ragged (numpy would make an object array, "
                        "which HDF5 cannot store)");
      a.items.push_back(&v);
      return;
    }
    if (!v.is_array() || v.size() != a.shape[depth])
      throw TypeError(context +
                      ": the list is ragged (numpy would make an object array, which "
                      "HDF5 cannot store)");
    for (const auto& x : v) walk(x, depth + 1);
  };
  walk(value, 0);
  bool all_bool = true, all_int = true, all_num = true, all_str = true;
  for (const json* v : a.items) {
    all_bool &= v->is_boolean();
    all_int &= v->is_boolean() || v->is_number_integer();
    all_num &= v->is_boolean() || v->is_number();
    all_str &= v->is_string();
  }
  // NOLINTNEXTLINE(bugprone-branch-clone): numpy's kinds, in its order of precedence
  if (a.items.empty()) {
    a.kind = 'f';  // np.array([]) is float64
  } else if (all_bool) {
    a.kind = 'b';
    a.itemsize = 1;
  } else if (all_int) {
    a.kind = 'i';
  } else if (all_num) {
    a.kind = 'f';
  } else if (all_str) {
    a.kind = 'U';
    std::size_t longest = 1;
    for (const json* v : a.items) {
      a.strings.push_back(utf32(v->get<std::string>()));
      longest = std::max(longest, a.strings.back().size());
    }
    a.itemsize = 4 * longest;
  } else {
    throw TypeError(context + ": HDF5 storage cannot store the non-tensor value " +
                    value.dump().substr(0, 80) +
                    " (null, objects and mixed lists have no numpy dtype other than object, and "
                    "HDF5 has no pickle fallback)");
  }
  return a;
}

}  // namespace

void File::check_non_tensor(const json& value, const std::string& context) {
  if (!value.is_string()) (void)as_numpy(value, context);
}

namespace {

// A variable-length UTF-8 string dataset of `shape` ([]: scalar) holding
// `strings` (row-major), as h5py writes str.
Hid create_strings(hid_t group, const std::string& name, const std::vector<hsize_t>& shape,
                   const std::vector<const std::string*>& strings, const std::string& where) {
  Hid type = owned(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", where);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hid space =
      owned(shape.empty() ? H5Screate(H5S_SCALAR)
                          : H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr),
            H5Sclose, "H5Screate", where);
  Hid ds = owned(H5Dcreate2(group, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                            dataset_access()),
                 H5Dclose, "H5Dcreate2", where);
  std::vector<const char*> data;
  data.reserve(strings.size());
  for (const std::string* s : strings) data.push_back(s->c_str());
  if (!data.empty())
    check(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "H5Dwrite",
          where);
  return ds;
}

// An opaque "NUMPY:<dtype>" dataset holding numpy's bytes of `a`, as h5py
// writes h5py.opaque_dtype arrays.
Hid create_opaque(hid_t group, const std::string& name, const NumpyArray& a,
                  const std::string& where) {
  // numpy's dtype.str: byte order, kind, size (characters for 'U').
  const std::string tag = std::string("NUMPY:") + (a.kind == 'b' ? "|" : "<") + a.kind +
                          std::to_string(a.kind == 'U' ? a.itemsize / 4 : a.itemsize);
  std::vector<unsigned char> bytes(a.items.size() * a.itemsize, 0);
  for (std::size_t i = 0; i < a.items.size(); ++i) {
    unsigned char* p = bytes.data() + i * a.itemsize;
    const json& v = *a.items[i];
    if (a.kind == 'b') {
      *p = v.get<bool>() ? 1 : 0;
    } else if (a.kind == 'i') {
      int64_t x = v.is_boolean() ? (v.get<bool>() ? 1 : 0) : v.get<int64_t>();
      std::memcpy(p, &x, 8);
    } else if (a.kind == 'f') {
      double x = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
      std::memcpy(p, &x, 8);
    } else {
      const auto& s = a.strings[i];
      // numpy's fixed-width 'U': the code points, zero-padded, no terminator.
      std::memcpy(p, s.data(), s.size() * 4);  // NOLINT(bugprone-not-null-terminated-result)
    }
  }
  Hid type = owned(H5Tcreate(H5T_OPAQUE, a.itemsize), H5Tclose, "H5Tcreate", where);
  check(H5Tset_tag(type.get(), tag.c_str()), "H5Tset_tag", where);
  Hid space = owned(
      a.shape.empty() ? H5Screate(H5S_SCALAR)
                      : H5Screate_simple(static_cast<int>(a.shape.size()), a.shape.data(), nullptr),
      H5Sclose, "H5Screate", where);
  Hid ds = owned(H5Dcreate2(group, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                            dataset_access()),
                 H5Dclose, "H5Dcreate2", where);
  if (!bytes.empty())
    check(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), "H5Dwrite",
          where);
  return ds;
}

// What a NonTensorStack's elements are stored as (Python tensordict's rule:
// every element a str, or every element a bool, or an int, or a float).
enum class StackKind { Strings, Opaque };

StackKind stack_kind(const NonTensorStack& stack, const std::string& context) {
  const auto& values = stack.values();
  auto all = [&](auto pred) { return std::all_of(values.begin(), values.end(), pred); };
  if (all([](const json& v) { return v.is_string(); })) {
    for (const json& v : values)
      if (v.get_ref<const std::string&>().find('\0') != std::string::npos)
        throw ValueError(context +
                         ": a NonTensorStack of strings holding a NUL character cannot be "
                         "stored in HDF5 (its variable-length strings end at NUL)");
    return StackKind::Strings;
  }
  if (all([](const json& v) { return v.is_boolean(); }) ||
      all([](const json& v) { return v.is_number_integer(); }) ||
      all([](const json& v) { return v.is_number_float(); }))
    return StackKind::Opaque;
  throw TypeError(context +
                  ": HDF5 storage stores a NonTensorStack only when its elements are all "
                  "strings, or all bools, or all ints, or all floats (as Python tensordict); "
                  "store the values as a tensor, or a NonTensorData of a list");
}

}  // namespace

void File::write_non_tensor(const std::string& path, std::string_view key, const json& value) {
  const std::string full = join(path, key);
  check_writable("writing", full);
  hid_t g = group(path);
  const std::string name(key);
  if (value.is_string()) {
    forget(path, key);
    Hid ds = create_strings(g, name, {}, {&value.get_ref<const std::string&>()}, where(full));
    write_string_attribute(ds.get(), where(full));
    return;
  }
  NumpyArray a = as_numpy(value, where(full));
  forget(path, key);
  (void)create_opaque(g, name, a, where(full));
}

void File::check_non_tensor_stack(const NonTensorStack& stack, const std::string& context) {
  (void)stack_kind(stack, context);
}

void File::write_non_tensor_stack(const std::string& path, std::string_view key,
                                  const NonTensorStack& stack) {
  const std::string full = join(path, key);
  check_writable("writing", full);
  const StackKind kind = stack_kind(stack, where(full));
  hid_t g = group(path);
  const std::string name(key);
  const auto batch = stack.batch_size();
  std::vector<hsize_t> shape(batch.begin(), batch.end());
  Hid ds;
  if (kind == StackKind::Strings) {
    std::vector<const std::string*> strings;
    for (const json& v : stack.values()) strings.push_back(&v.get_ref<const std::string&>());
    forget(path, key);
    ds = create_strings(g, name, shape, strings, where(full));
  } else {
    const json nested = stack.tolist();  // as_numpy keeps pointers into it
    NumpyArray a = as_numpy(nested, where(full));
    forget(path, key);
    ds = create_opaque(g, name, a, where(full));
  }
  write_stack_attribute(ds.get(), batch, where(full));
}

namespace {

// Nested lists over `shape` of the values `leaf(i)`, row-major.
json nest(const std::vector<int64_t>& shape, const std::function<json(std::size_t)>& leaf) {
  if (shape.empty()) return leaf(0);
  std::size_t index = 0;
  std::function<json(std::size_t)> build = [&](std::size_t depth) {
    json out = json::array();
    for (int64_t i = 0; i < shape[depth]; ++i)
      out.push_back(depth + 1 == shape.size() ? leaf(index++) : build(depth + 1));
    return out;
  };
  return build(0);
}

template <class T>
T load(const unsigned char* p, bool swap) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swap) std::reverse(b, b + sizeof(T));
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

}  // namespace

// Whether `s` is UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF): a value read must be, or every later dump of it throws.
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    char32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (std::size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr char32_t kLeast[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// Reading a non-tensor builds it whole in memory (a JSON value per element,
// a list per row): refused when that is out of proportion with what the
// file holds (a crafted shape of 2^40 strings in a few bytes). The bound
// allows deflate's best ratio (about 1032:1) over the dataset's storage,
// capped by the file's size, plus 1 MiB for unwritten (fill value) data.
void check_non_tensor_size(const Dataset& d, hid_t file, std::size_t element_size,
                           const std::string& context) {
  constexpr int64_t kSlack = int64_t{1} << 20;
  constexpr int64_t kRatio = 1100;
  // JSON nodes: one per element, one per list of every level.
  int64_t elements = 1, nodes = 0;
  for (int64_t s : d.shape) {
    if (__builtin_mul_overflow(elements, s, &elements)) elements = INT64_MAX;
    nodes = nodes > INT64_MAX - elements ? INT64_MAX : nodes + elements;
  }
  int64_t need = 0;
  if (__builtin_mul_overflow(elements, static_cast<int64_t>(element_size) + 16, &need) ||
      __builtin_mul_overflow(nodes, int64_t{16}, &nodes) || need > INT64_MAX - nodes)
    need = INT64_MAX;
  else
    need += nodes;
  hsize_t stored = H5Dget_storage_size(d.id.get());
  hsize_t file_size = 0;
  if (H5Fget_filesize(file, &file_size) >= 0) stored = std::min(stored, file_size);
  H5Eclear2(H5E_DEFAULT);
  const int64_t allowed =
      static_cast<int64_t>(std::min<hsize_t>(stored, INT64_MAX / (2 * kRatio))) * kRatio + kSlack;
  if (need > allowed)
    throw FormatError(context + ": a non-tensor dataset of shape " + format_shape(d.shape) + " (" +
                      std::to_string(element_size) +
                      "-byte elements) is out of proportion with the " + std::to_string(stored) +
                      " bytes the file stores for it; refused rather than read");
}

json File::read_non_tensor(const Dataset& d, const std::string& context) {
  int64_t n = 1;
  for (int64_t s : d.shape) n *= s;  // no overflow: checked when the entry was opened
  Hid ftype = owned(H5Dget_type(d.id.get()), H5Tclose, "H5Dget_type", context);
  const htri_t is_vlen = d.info.element == Element::String ? H5Tis_variable_str(ftype.get()) : 0;
  check_non_tensor_size(d, file_.get(), is_vlen > 0 ? sizeof(char*) : H5Tget_size(ftype.get()),
                        context);
  auto text = [&](std::string s) {
    if (!valid_utf8(s)) throw FormatError(context + ": a string that is not valid UTF-8");
    return json(std::move(s));
  };
  if (d.info.element == Element::String) {
    const htri_t vlen = is_vlen;
    Hid mtype = owned(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", context);
    H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get()));
    std::vector<std::string> strings;
    if (vlen > 0) {
      H5Tset_size(mtype.get(), H5T_VARIABLE);
      std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
      if (n > 0) {
        check(H5Dread(d.id.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
              "H5Dread", context);
        for (char* p : ptrs) strings.emplace_back(p ? p : "");
        H5Dvlen_reclaim(mtype.get(), d.space.get(), H5P_DEFAULT, ptrs.data());
      }
    } else {
      const std::size_t size = H5Tget_size(ftype.get());
      H5Tset_size(mtype.get(), size);
      H5Tset_strpad(mtype.get(), H5T_STR_NULLPAD);
      std::vector<char> buf(static_cast<std::size_t>(n) * size);
      if (n > 0)
        check(H5Dread(d.id.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()),
              "H5Dread", context);
      for (int64_t i = 0; i < n; ++i) {
        const char* p = buf.data() + i * size;
        strings.emplace_back(p, strnlen(p, size));
      }
    }
    return nest(d.shape, [&](std::size_t i) { return text(std::move(strings[i])); });
  }
  // Opaque NUMPY:<dtype>: raw numpy bytes.
  const std::string& dt = d.info.opaque_dtype;
  const std::size_t size = H5Tget_size(ftype.get());
  if (dt.size() < 3)
    throw FormatError(context + ": opaque dtype tag 'NUMPY:" + dt + "' is not a numpy dtype");
  const bool swap = dt[0] == '>';
  const char kind = dt[1];
  // The tag's item size (bytes; characters for 'U') must be the opaque
  // type's: "<U4294967295" over 4-byte items is not what numpy wrote.
  {
    std::uint64_t items = 0;
    const char* first = dt.data() + 2;
    const auto [end, ec] = std::from_chars(first, dt.data() + dt.size(), items);
    const std::uint64_t bytes = kind == 'U' ? items * 4 : items;
    if (ec != std::errc() || end != dt.data() + dt.size() || items == 0 ||
        (kind == 'U' && items > (std::uint64_t{1} << 60)) || bytes != size)
      throw FormatError(context + ": opaque dtype tag 'NUMPY:" + dt.substr(0, 40) +
                        "' does not describe its " + std::to_string(size) + "-byte items");
  }
  std::vector<unsigned char> buf(static_cast<std::size_t>(n) * size);
  if (n > 0)
    check(H5Dread(d.id.get(), ftype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "H5Dread",
          context);
  auto leaf = [&](std::size_t i) -> json {
    const unsigned char* p = buf.data() + i * size;
    switch (kind) {
      case 'b':
        return json(*p != 0);
      case 'i':
        if (size == 1) return json(static_cast<int64_t>(static_cast<signed char>(*p)));
        if (size == 2) return json(static_cast<int64_t>(load<int16_t>(p, swap)));
        if (size == 4) return json(static_cast<int64_t>(load<int32_t>(p, swap)));
        if (size == 8) return json(load<int64_t>(p, swap));
        break;
      case 'u':
        if (size == 1) return json(static_cast<uint64_t>(*p));
        if (size == 2) return json(static_cast<uint64_t>(load<uint16_t>(p, swap)));
        if (size == 4) return json(static_cast<uint64_t>(load<uint32_t>(p, swap)));
        if (size == 8) return json(load<uint64_t>(p, swap));
        break;
      case 'f':
        if (size == 4) return json(static_cast<double>(load<float>(p, swap)));
        if (size == 8) return json(load<double>(p, swap));
        break;
      case 'U': {
        std::u32string s;
        for (std::size_t k = 0; k + 4 <= size; k += 4) {
          char32_t c = load<char32_t>(p + k, swap);
          if (c == 0) break;
          if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            throw FormatError(context +
                              ": a numpy str holding a code point past U+10FFFF or "
                              "a surrogate, which is not Unicode text");
          s.push_back(c);
        }
        return json(utf8(s));
      }
      case 'S':
        return text(std::string(reinterpret_cast<const char*>(p),
                                strnlen(reinterpret_cast<const char*>(p), size)));
      default:
        break;
    }
    throw FormatError(context + ": opaque non-tensor of numpy dtype '" + dt +
                      "' is not supported (bool, int, uint, float, str and bytes are)");
  };
  return nest(d.shape, leaf);
}

}  // namespace tensordict::detail::h5
