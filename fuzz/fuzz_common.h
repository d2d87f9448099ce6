// Shared by the fuzz targets (issue #19): a private scratch directory, file
// helpers, and the seed writer. A target passes when every input either
// works or throws a tensordict::Error; anything else (a crash, a sanitizer
// report, another exception escaping) is a finding.
#pragma once

#include <tensordict/tensordict.h>

#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace td_fuzz {

namespace fs = std::filesystem;

/// One scratch directory per process, emptied before each input.
inline const fs::path& scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("td-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

inline void reset_scratch() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(scratch(), ec)) fs::remove_all(e.path(), ec);
}

inline void write_file(const fs::path& p, const void* data, std::size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace td_fuzz

/// Each target writes its seed inputs (made by the library itself) to `dir`.
void td_fuzz_write_seeds(const char* dir);

namespace td_fuzz {

/// LLVMFuzzerInitialize: with $TD_FUZZ_WRITE_SEEDS set, the target writes its
/// seeds there and exits (scripts/run-fuzzers.sh builds the corpora so).
inline int initialize() {
  if (const char* dir = std::getenv("TD_FUZZ_WRITE_SEEDS")) {
    td_fuzz_write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

/// A small tensordict of every entry kind, the source of the seeds.
inline tensordict::TensorDict sample() {
  namespace td = tensordict;
  td::TensorDict t(std::vector<int64_t>{3});
  t.set("a", torch::arange(6, torch::kFloat).reshape({3, 2}));
  t.set({"sub", "b"}, torch::arange(3, torch::kLong));
  t.set({"sub", "flag"}, torch::tensor({true, false, true}));
  t.set("s", td::NonTensorData(nlohmann::json{{"k", {1, 2.5, "x"}}}));
  return t;
}

}  // namespace td_fuzz
