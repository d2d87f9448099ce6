// The C++ side of the interop suite (ctest -L python): runs the real Python
// tensordict in a child process (peer.py), and writes and checks the "truth"
// beside each case, a layout that is not under test (truth.py describes it).
//
// A suite SUITE has two directions, each one Python process:
//   Python -> C++: run_suite("SUITE", "write", dir) makes dir/<case>/ for every
//     Python case; each C++ case reads its storage with the library and checks
//     it with matches_truth(td, dir/<case>/truth).
//   C++ -> Python: the C++ cases write dir/<case>/ (storage + write_truth), then
//     run_suite("SUITE", "check", dir) returns {case: "OK" or what differs}.
#pragma once

#include <tensordict/tensor_dict.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace td_python {

namespace fs = std::filesystem;

/// A new empty directory under the temporary directory, unique to this process.
fs::path fresh_dir(const std::string& name);

struct PeerRun {
  int rc;
  std::string out;
};

/// Runs TENSORDICT_PYTHON peer.py `args` (already quoted), output captured.
PeerRun run_peer(const std::string& args, const fs::path& log);

/// peer.py SUITE ACTION DIR; returns DIR/results.json. Fails the calling test
/// (and returns an empty object) when the peer itself fails.
nlohmann::json run_suite(const std::string& suite, const std::string& action, const fs::path& dir);

/// Distinctive values of `dtype` (memmap_cases.py's values(), written again
/// here): signs, fractions, NaN, -0.0, infinities, and values above 2^63.
at::Tensor distinctive_values(at::ScalarType dtype, std::vector<int64_t> shape);

/// distinctive_values of float32.
inline at::Tensor f32(std::vector<int64_t> shape) {
  return distinctive_values(at::kFloat, std::move(shape));
}

/// The bytes of a file ("" when it cannot be read).
std::string read_file(const fs::path& path);

/// Writes what `td` holds into `dir` (truth.py's layout).
void write_truth(const tensordict::TensorDictBase& td, const fs::path& dir);

/// Whether `td` holds exactly what the truth in `dir` says: batch size, keys
/// (nested levels and non-tensors included), kinds, dtypes, shapes, devices
/// and every byte.
::testing::AssertionResult matches_truth(const tensordict::TensorDictBase& td, const fs::path& dir);

/// A TensorDict of the truth's structure holding zeros (non-tensors as they
/// are): the target a state dict is loaded into.
tensordict::TensorDict zeros_like_truth(const fs::path& dir);

/// The peer's verdict on `name` in `results` (an AssertionResult naming it).
::testing::AssertionResult peer_ok(const nlohmann::json& results, const std::string& name);

/// "'<path>'" for a shell command line.
std::string quoted(const fs::path& path);

}  // namespace td_python
