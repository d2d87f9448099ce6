// Small helpers shared by the example programs: a scoped temporary directory,
// one-line printing of a 1-D tensor, a named check, and reading a text file.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace example {

// A fresh directory under the system temp dir, removed when the guard goes.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& stem)
      : path(std::filesystem::temp_directory_path() /
             ("tensordict_" + stem + "_" + std::to_string(std::random_device{}()))) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// A 1-D tensor on one line: [0, 1, 2].
inline std::string row(const at::Tensor& t) {
  at::Tensor v = t.to(at::kDouble).contiguous();
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < v.numel(); ++i) out << (i ? ", " : "") << v.data_ptr<double>()[i];
  out << "]";
  return out.str();
}

// Prints what failed; returns `ok` so that checks chain with `ok &= check(...)`.
inline bool check(bool ok, std::string_view what) {
  if (!ok) std::cerr << "FAILED: " << what << "\n";
  return ok;
}

// The whole content of a text file ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace example
