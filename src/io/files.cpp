// Writing files whole and syncing them (io/files.h).
#include "io/files.h"

#include <tensordict/errors.h>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace tensordict::detail {

namespace {

std::string errno_text() { return std::strerror(errno); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string write_all(int fd, const char* data, std::size_t size, const std::string& path) {
  std::size_t done = 0;
  while (done < size) {
    std::size_t chunk = std::min<std::size_t>(size - done, std::size_t{1} << 30);
    ssize_t n = ::pwrite(fd, data + done, chunk, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return "cannot write " + path + " (" + std::to_string(done) + " of " + std::to_string(size) +
             " bytes written): " + errno_text();
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

void write_new_file(const std::string& path, const std::function<void(const ByteSink&)>& produce,
                    bool durable, const std::string& op) {
  Fd f;
  f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (f.fd < 0) throw StorageError(op + ": cannot create " + path + ": " + errno_text());
  // Small pieces (zip headers, a pickle) are gathered so that each costs no
  // system call of its own; large ones (tensor bytes) are written from where
  // they are.
  constexpr std::size_t kGather = std::size_t{64} << 10;
  std::vector<char> pending;
  std::size_t written = 0;
  auto write_out = [&](const char* data, std::size_t size) {
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(f.fd, data + done, std::min<std::size_t>(size - done, 1u << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw StorageError(op + ": cannot write " + path + " (" + std::to_string(written + done) +
                           " bytes written): " + errno_text());
      done += static_cast<std::size_t>(n);
    }
    written += size;
  };
  produce([&](const char* data, std::size_t size) {
    if (size < kGather) {
      pending.insert(pending.end(), data, data + size);
      if (pending.size() < kGather) return;
      write_out(pending.data(), pending.size());
      pending.clear();
      return;
    }
    if (!pending.empty()) {
      write_out(pending.data(), pending.size());
      pending.clear();
    }
    write_out(data, size);
  });
  if (!pending.empty()) write_out(pending.data(), pending.size());
  std::string error = durable ? fsync_error(f.fd, path) : std::string();
  const int fd = f.fd;
  f.fd = -1;
  // close() reports what a file system without fsync defers (NFS quotas).
  if (::close(fd) != 0 && error.empty()) error = "cannot write " + path + ": " + errno_text();
  if (!error.empty()) throw StorageError(op + ": " + error);
}

void write_new_file(const std::string& path, const char* data, std::size_t size, bool durable,
                    const std::string& op) {
  write_new_file(
      path, [&](const ByteSink& sink) { sink(data, size); }, durable, op);
}

std::string fsync_error(int fd, const std::string& path) {
  // fsync is not restarted after a signal on every system: retried on EINTR.
  while (::fsync(fd) != 0)
    if (errno != EINTR) return "cannot fsync " + path + ": " + errno_text();
  return {};
}

void fsync_fd(int fd, const std::string& path, const std::string& op) {
  if (std::string error = fsync_error(fd, path); !error.empty())
    throw StorageError(op + ": " + error);
}

void fsync_path(const std::string& path, const std::string& op) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (f.fd < 0) throw StorageError(op + ": cannot open " + path + " to fsync it: " + errno_text());
  fsync_fd(f.fd, path, op);
}

}  // namespace tensordict::detail
