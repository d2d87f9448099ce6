#pragma once
// [envs, steps] storages of every kind for the [env, time] buffer tests
// (test_env_time_buffer.cpp, test_env_time_samplers.cpp): memory, memmap (a
// directory on disk), shared memory and, when built, an HDF5 file and the
// Redis stores of redis_storages.h; the files are removed when the holder
// goes (the Redis servers die with the test process).
#include "rb/redis_storages.h"

#include <tensordict/schema.h>
#include <tensordict/storage/shared.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::rb::test {

/// The storage kinds the [env, time] tests run over: every storage, as the
/// lazily made ones (redis_storages.h).
inline std::vector<std::string> env_storage_kinds() { return lazy_storage_kinds(); }

class EnvStorages {
 public:
  /// Storages of `schema`'s entries, [envs, steps] unless make() is told otherwise.
  EnvStorages(Schema schema, int64_t envs, int64_t steps)
      : schema_(std::move(schema)), envs_(envs), steps_(steps) {}
  EnvStorages(const EnvStorages&) = delete;
  EnvStorages& operator=(const EnvStorages&) = delete;
  ~EnvStorages() {
    for (const std::string& name : shared_) unlink_shared(name);
    for (const std::filesystem::path& dir : dirs_) std::filesystem::remove_all(dir);
  }

  /// A fresh directory path (not created), removed with the holder.
  std::filesystem::path dir(const std::string& name) {
    std::filesystem::path d = std::filesystem::temp_directory_path() /
                              ("tensordict-rb-env-" + name + "-" + std::to_string(::getpid()) +
                               "-" + std::to_string(dirs_.size()));
    std::filesystem::remove_all(d);
    dirs_.push_back(d);
    return d;
  }

  /// A pre-allocated storage of `kind` (env_storage_kinds()).
  TensorDictBase make(const std::string& kind) { return make(kind, envs_, steps_); }
  TensorDictBase make(const std::string& kind, int64_t envs, int64_t steps) {
    const std::vector<int64_t> shape{envs, steps};
    if (kind == "memmap")
      return from_schema(schema_, shape, storage::Memmap{dir("memmap").string()});
    if (kind == "shared") {
      TensorDictBase st = from_schema(schema_, shape, storage::Shared{});
      shared_.push_back(st.shared_name());
      return st;
    }
    if (kind == "h5") {
      const std::filesystem::path d = dir("h5");
      std::filesystem::create_directories(d);
      return from_schema(schema_, shape, "h5", {{"filename", (d / "b.h5").string()}});
    }
#ifdef TENSORDICT_RB_TEST_REDIS
    if (is_redis_kind(kind)) return make_redis_storage(kind, schema_, shape);
#endif
    return from_schema(schema_, shape);
  }

 private:
  Schema schema_;
  int64_t envs_, steps_;
  std::vector<std::filesystem::path> dirs_;
  std::vector<std::string> shared_;
};

}  // namespace tensordict::rb::test
