// Helpers shared by the typed-layer tests (TypedTensorDict, TensorClass): a
// scoped temporary directory and reading a file back as text.
#pragma once
#include "pch.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

namespace td_test {

/// A fresh directory under the system temp dir (named after `stem`, the
/// process and a counter), removed when the guard goes.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& stem = "td_typed") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
};

/// The whole content of a file ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace td_test
