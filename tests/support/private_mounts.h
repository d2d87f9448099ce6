#pragma once
// A private mount namespace for a test's child process (single-threaded: a
// fork, or a program of its own), as root or through a user namespace, so
// that it can mount a small tmpfs (a full disk) that no other process sees.
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace td_test {

inline bool write_text_file(const char* path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out.flush());
}

inline bool private_mounts() {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  if (::unshare(CLONE_NEWNS) != 0) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    write_text_file("/proc/self/setgroups", "deny");
    if (!write_text_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n") ||
        !write_text_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n"))
      return false;
  }
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

/// A tmpfs of `size` ("2m") at `dir`, in a private mount namespace.
inline bool mount_small_tmpfs(const std::string& dir, const char* size) {
  return private_mounts() &&
         ::mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
}

}  // namespace td_test
