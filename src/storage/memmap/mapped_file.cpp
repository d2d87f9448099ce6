// MemoryMappedTensor: tensors over mmap()ed files, and the raw file I/O the
// memmap directories use (write() for saving, mmap() for reading).
#include "storage/memmap/mapped_file.h"

#include <tensordict/detail/format.h>
#include <tensordict/errors.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>

#include <ATen/ATen.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace tensordict {
namespace detail {

namespace {

// Owned by the DataPtr of a mapped storage: unmapped when the last tensor
// viewing it goes away. Its address identifies mapped storages (filename()).
struct MappedFile {
  void* addr = nullptr;
  std::size_t length = 0;
  std::string path;
  bool shared = false;  // MAP_SHARED: the mapped bytes are the file's bytes
  dev_t dev = 0;        // identity of the mapped file, to recognise it again
  ino_t ino = 0;
};

void release_mapping(void* ctx) {
  auto* m = static_cast<MappedFile*>(ctx);
  if (m->addr) ::munmap(m->addr, m->length);
  delete m;
}

std::string errno_text() { return std::strerror(errno); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::vector<int64_t> row_major_strides(at::IntArrayRef shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

at::Tensor wrap_mapping(MappedFile file, at::ScalarType dtype, at::IntArrayRef shape) {
  void* addr = file.addr;
  const std::size_t length = file.length;
  auto* ctx = new MappedFile(std::move(file));
  c10::DataPtr ptr(addr, ctx, &release_mapping, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), length, std::move(ptr),
                       /*allocator=*/nullptr, /*resizable=*/false);
  auto strides = row_major_strides(shape);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, shape, strides);
}

}  // namespace

int64_t numel_of(at::IntArrayRef shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

int64_t checked_numel(at::IntArrayRef shape, const std::string& what) {
  int64_t n = 1;
  for (auto s : shape)
    if (s < 0)
      throw ShapeError(what + ": the shape " + format_shape(shape) + " has a negative size");
  for (auto s : shape) {
    if (s == 0) return 0;
    if (n > std::numeric_limits<int64_t>::max() / s)
      throw ShapeError(what + ": the shape " + format_shape(shape) +
                       " has more elements than an int64 counts");
    n *= s;
  }
  return n;
}

std::size_t checked_nbytes(int64_t numel, at::ScalarType dtype, const std::string& what) {
  const auto item = static_cast<int64_t>(c10::elementSize(dtype));
  if (numel > std::numeric_limits<int64_t>::max() / item)
    throw ShapeError(what + ": " + std::to_string(numel) + " elements of " +
                     torch_dtype_repr(dtype) + " are more bytes than an int64 counts");
  return static_cast<std::size_t>(numel * item);
}

at::Tensor map_file(const std::string& path, at::ScalarType dtype, at::IntArrayRef shape,
                    bool writable, const std::string& what, bool write_through_links) {
  const int64_t numel = checked_numel(shape, "cannot map " + path + what);
  const std::size_t nbytes = checked_nbytes(numel, dtype, "cannot map " + path + what);
  if (nbytes == 0) return at::empty(shape, at::TensorOptions().dtype(dtype));
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer (it is
  // refused below, as everything that is not a regular file).
  const int flags = O_CLOEXEC | O_NONBLOCK;
  Fd f;
  f.fd = ::open(path.c_str(),
                (writable ? O_RDWR : O_RDONLY) | flags | (write_through_links ? 0 : O_NOFOLLOW));
  if (f.fd < 0 && writable &&
      (errno == EACCES || errno == EROFS || errno == EPERM || errno == ELOOP)) {
    // A file we may not write (read-only fixture, read-only mount) is mapped
    // copy-on-write, as Python's from_file(shared=<file writable>) does. So
    // is a symbolic link in a loaded directory: its target may lie anywhere,
    // and writes through the tensordict must not reach it.
    f.fd = ::open(path.c_str(), O_RDONLY | flags);
    writable = false;
  }
  if (f.fd < 0) throw FormatError("cannot open " + path + what + ": " + errno_text());
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw StorageError("cannot stat " + path + what + ": " + errno_text());
  if (!S_ISREG(st.st_mode)) throw FormatError("cannot map " + path + what + ": not a regular file");
  if (static_cast<std::size_t>(st.st_size) < nbytes)
    throw FormatError("truncated file " + path + what + ": it has " + std::to_string(st.st_size) +
                      " bytes, " + std::to_string(nbytes) + " are needed for shape " +
                      format_shape(shape) + " of " + torch_dtype_repr(dtype));
  // Read-only opens are mapped copy-on-write so that an in-place op on the
  // tensor cannot crash the process (as Python's from_file(shared=False)).
  void* addr =
      ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, writable ? MAP_SHARED : MAP_PRIVATE, f.fd, 0);
  if (addr == MAP_FAILED) throw StorageError("cannot map " + path + what + ": " + errno_text());
  return wrap_mapping(MappedFile{addr, nbytes, path, writable, st.st_dev, st.st_ino}, dtype, shape);
}

void write_file(const std::string& path, const at::Tensor& tensor, bool copy_data,
                const std::string& what, bool durable) {
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
    throw StorageError("refusing to write through the symbolic link " + path + what);
  // An existing file is unlinked and a new one created, never truncated:
  // truncation would pull the pages from under every mapping of the old file
  // (the source of this very copy, a module loaded with share_storage, another
  // process), which would then die of SIGBUS; an unlinked file lives on for
  // them. On ext4 it is also about 3x faster than truncating pages that are
  // still being written back.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw StorageError("cannot replace " + path + what + ": " + errno_text());
  Fd f;
  f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (f.fd < 0) throw StorageError("cannot create " + path + what + ": " + errno_text());
  const std::size_t nbytes = static_cast<std::size_t>(tensor.numel()) * tensor.element_size();
  if (!copy_data) {
    // The blocks are reserved now (they still read as zeros): a sparse file
    // on a full disk would be a SIGBUS at the first write to an unbacked
    // page, long after this call. posix_fallocate returns the error itself.
    if (nbytes > 0) {
      int rc;
      do rc = ::posix_fallocate(f.fd, 0, static_cast<off_t>(nbytes));
      while (rc == EINTR);
      if (rc != 0) {
        ::unlink(path.c_str());
        throw StorageError("cannot allocate " + std::to_string(nbytes) + " bytes for " + path +
                           what + ": " + std::strerror(rc));
      }
    }
  } else {
    at::Tensor src = tensor.detach();
    if (src.device().type() != c10::kCPU) src = src.cpu();
    src = src.resolve_conj().resolve_neg().contiguous();
    const std::string error =
        write_all(f.fd, static_cast<const char*>(src.data_ptr()), nbytes, path + what);
    if (!error.empty()) throw StorageError(error);
  }
  if (durable) fsync_fd(f.fd, path + what, "memmap");
}

bool sync_mapping(const at::Tensor& tensor, std::vector<const void*>& synced) {
  if (!tensor.defined() || !tensor.has_storage()) return false;
  const auto& ptr = tensor.storage().data_ptr();
  if (ptr.get_deleter() != &release_mapping) return false;
  const auto* m = static_cast<const MappedFile*>(ptr.get_context());
  if (!m->shared) return false;
  if (std::find(synced.begin(), synced.end(), m) != synced.end()) return true;
  if (::msync(m->addr, m->length, MS_SYNC) != 0)
    throw StorageError("flush: cannot msync " + m->path + ": " + errno_text() +
                       " (writes to it may not be on the disk)");
  synced.push_back(m);
  return true;
}

std::optional<std::string> mapped_filename(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return std::nullopt;
  const auto& ptr = tensor.storage().data_ptr();
  if (ptr.get_deleter() != &release_mapping) return std::nullopt;
  return static_cast<const MappedFile*>(ptr.get_context())->path;
}

bool is_whole_mapping(const at::Tensor& tensor) {
  if (!mapped_filename(tensor)) return false;
  return tensor.storage_offset() == 0 && tensor.is_contiguous() &&
         static_cast<std::size_t>(tensor.nbytes()) == tensor.storage().nbytes();
}

bool read_mapped_into(const at::Tensor& src, const at::Tensor& dst) {
  if (!is_whole_mapping(src) || src.is_conj() || src.is_neg()) return false;
  const auto* m = static_cast<const MappedFile*>(src.storage().data_ptr().get_context());
  if (!m->shared || dst.device().type() != c10::kCPU || !dst.is_contiguous() ||
      dst.scalar_type() != src.scalar_type() || dst.nbytes() != src.nbytes() ||
      !dst.has_storage() || dst.data_ptr() == src.data_ptr())
    return false;
  Fd f;
  f.fd = ::open(m->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return false;
  struct stat st {};
  // Another file now at that path (replaced by a rename): copy from the mapping.
  if (::fstat(f.fd, &st) != 0 || st.st_dev != m->dev || st.st_ino != m->ino ||
      static_cast<std::size_t>(st.st_size) < m->length)
    return false;
  char* out = static_cast<char*>(dst.data_ptr());
  const std::size_t nbytes = dst.nbytes();
  std::size_t done = 0;
  while (done < nbytes) {
    std::size_t chunk = std::min<std::size_t>(nbytes - done, std::size_t{1} << 30);
    ssize_t n = ::pread(f.fd, out + done, chunk, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw StorageError(
          "cannot read " + m->path + " (" + std::to_string(done) + " of " + std::to_string(nbytes) +
          " bytes read): " + (n < 0 ? errno_text() : std::string("unexpected end of file")));
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace detail

at::Tensor MemoryMappedTensor::from_filename(const std::string& filename, at::ScalarType dtype,
                                             at::IntArrayRef shape, bool writable) {
  return detail::map_file(filename, dtype, shape, writable, "");
}

at::Tensor MemoryMappedTensor::empty(const std::string& filename, at::IntArrayRef shape,
                                     at::ScalarType dtype) {
  detail::checked_nbytes(
      detail::checked_numel(shape, "MemoryMappedTensor::empty(" + filename + ")"), dtype,
      "MemoryMappedTensor::empty(" + filename + ")");
  at::Tensor meta = at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta));
  detail::write_file(filename, meta, /*copy_data=*/false, "");
  return detail::map_file(filename, dtype, shape, true, "");
}

at::Tensor MemoryMappedTensor::zeros(const std::string& filename, at::IntArrayRef shape,
                                     at::ScalarType dtype) {
  return empty(filename, shape, dtype);
}

at::Tensor MemoryMappedTensor::from_tensor(const at::Tensor& tensor, const std::string& filename) {
  detail::write_file(filename, tensor, /*copy_data=*/true, "");
  return detail::map_file(filename, tensor.scalar_type(), tensor.sizes(), true, "");
}

std::optional<std::string> MemoryMappedTensor::filename(const at::Tensor& tensor) {
  return detail::mapped_filename(tensor);
}

}  // namespace tensordict
