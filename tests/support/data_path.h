// Where the test data (fixtures copied from Python tensordict) lives.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace td_test {

/// $TENSORDICT_TEST_DATA (set by ctest), else the source tree's tests/data.
inline std::filesystem::path data_path() {
  if (const char* env = std::getenv("TENSORDICT_TEST_DATA"); env && *env)
    return std::filesystem::path(env);
#ifdef TENSORDICT_TEST_DATA_DIR
  return std::filesystem::path(TENSORDICT_TEST_DATA_DIR);
#else
  return std::filesystem::path("tests/data");
#endif
}

/// data_path() / relative.
inline std::filesystem::path data_path(const std::string& relative) {
  return data_path() / relative;
}

}  // namespace td_test
