// Shared memory: a memmap directory under /dev/shm, attached by name from
// other processes (share_memory_, attach_shared, unlink_shared).
#include "core/internal.h"

#include <tensordict/storage/shared.h>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <random>
#include <string>

namespace fs = std::filesystem;

namespace tensordict {

namespace {
const char* kShmRoot = "/dev/shm";
std::string new_shm_name() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return std::string(kShmRoot) + "/tensordict-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++) + "-" + std::to_string(rd());
}
}  // namespace

namespace {
// A level of a tensordict moved to shared memory: its files are in /dev/shm.
void mark_shared(Node& node) {
  FileBacking& files = detail::mutable_file_backing(node);
  files.memmap = false;
  files.shared = true;
}
}  // namespace

TensorDictBase& TensorDictBase::share_memory_() {
  if (is_shared()) return *this;
  detail::refuse_outside_storage(*this, "share_memory_",
                                 "so it cannot be moved to shared memory in place");
  if (!fs::is_directory(kShmRoot))
    throw StorageError("share_memory_: " + std::string(kShmRoot) + " is not available");
  memmap_(new_shm_name());
  mark_shared(node());
  for (auto& [k, v] : items(true, false))
    if (v.is_tensordict()) mark_shared(v.tensordict().node());
  return *this;
}

std::string TensorDictBase::shared_name() const {
  return is_shared() ? detail::saved_path_of(node()) : std::string();
}

TensorDictBase attach_shared(const std::string& name) {
  TensorDictBase out = load_memmap(name);
  out.lock_();
  detail::mutable_file_backing(out.node()).shared = true;
  return out;
}

void unlink_shared(const std::string& name) {
  fs::path p = fs::weakly_canonical(name);
  if (p.parent_path() != fs::path(kShmRoot) || p.filename().string().rfind("tensordict-", 0) != 0)
    throw ValueError("unlink_shared: '" + name + "' is not a tensordict shared-memory name");
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw StorageError("unlink_shared: cannot remove " + p.string() + ": " + ec.message());
}

}  // namespace tensordict
