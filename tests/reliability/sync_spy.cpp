// libtensordict_sync_spy.so: loaded with LD_PRELOAD into
// tensordict_reliability_child by the durability tests (test_durable.cpp).
// It records, in call order, every fsync, fdatasync and msync (with the path
// of the file or directory synced) and every successful rename, then calls
// the C library's own function. It changes nothing else.
//
//   TD_SYNC_SPY_LOG   file the records are appended to, one per line:
//                     "fsync\t<path>", "fdatasync\t<path>", "msync\t<path>",
//                     "rename\t<from>\t<to>", "fail\t<path>"
//   TD_SYNC_SPY_FAIL  an fnmatch pattern: fsync and fdatasync of a path it
//                     matches fail with EIO (a disk error), without syncing
#include <dlfcn.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

void record(const std::string& line) {
  const char* log = std::getenv("TD_SYNC_SPY_LOG");
  if (!log) return;
  const int saved = errno;
  const int fd = ::open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    // One write per record: lines from several threads do not interleave.
    const std::string text = line + "\n";
    [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());
    ::close(fd);
  }
  errno = saved;
}

std::string fd_path(int fd) {
  char buf[4096];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n < 0 ? "?" : std::string(buf, static_cast<std::size_t>(n));
}

// The file mapped at `addr`, from /proc/self/maps.
std::string mapped_path(const void* addr) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return "?";
  std::string out = "?";
  char line[4096 + 256];
  while (std::fgets(line, sizeof(line), maps)) {
    unsigned long start = 0, end = 0;
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &start, &end, &path_at) < 2) continue;
    if (a < start || a >= end) continue;
    out = line + path_at;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    break;
  }
  std::fclose(maps);
  return out;
}

bool must_fail(const std::string& path) {
  const char* pattern = std::getenv("TD_SYNC_SPY_FAIL");
  return pattern && *pattern && ::fnmatch(pattern, path.c_str(), 0) == 0;
}

int sync_call(const char* name, int fd, int (*real)(int)) {
  const std::string path = fd_path(fd);
  if (must_fail(path)) {
    record(std::string("fail\t") + path);
    errno = EIO;
    return -1;
  }
  record(std::string(name) + "\t" + path);
  return real(fd);
}

}  // namespace

extern "C" {

int fsync(int fd) {
  static auto real = next<int (*)(int)>("fsync");
  return sync_call("fsync", fd, real);
}

int fdatasync(int fd) {
  static auto real = next<int (*)(int)>("fdatasync");
  return sync_call("fdatasync", fd, real);
}

int msync(void* addr, size_t length, int flags) {
  static auto real = next<int (*)(void*, size_t, int)>("msync");
  record("msync\t" + mapped_path(addr));
  return real(addr, length, flags);
}

// The C library declares these three noexcept (__THROW) in C++.
int rename(const char* from, const char* to) noexcept {
  static auto real = next<int (*)(const char*, const char*)>("rename");
  const int rc = real(from, to);
  if (rc == 0) record(std::string("rename\t") + from + "\t" + to);
  return rc;
}

int renameat(int fromfd, const char* from, int tofd, const char* to) noexcept {
  static auto real = next<int (*)(int, const char*, int, const char*)>("renameat");
  const int rc = real(fromfd, from, tofd, to);
  if (rc == 0) record(std::string("rename\t") + from + "\t" + to);
  return rc;
}

int renameat2(int fromfd, const char* from, int tofd, const char* to, unsigned int flags) noexcept {
  static auto real = next<int (*)(int, const char*, int, const char*, unsigned int)>("renameat2");
  const int rc = real(fromfd, from, tofd, to, flags);
  if (rc == 0) record(std::string("rename\t") + from + "\t" + to);
  return rc;
}

}  // extern "C"
