#pragma once
// Runs tests/rb/python/torchrl_slice_writer.py in the real TorchRL
// (TENSORDICT_RB_TORCHRL_PYTHON) as a child process and parses the JSON line
// it prints.
#include <tensordict/rb/slice_sampler.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tensordict::rb::test {

/// A case compared with TorchRL's slice sampler: the buffer's layout (1-D or
/// [env, time]) and the sampler's options.
template <class Layout>
struct SliceCase {
  Layout layout;
  int64_t slice_len;
  bool by_traj;
  bool strict;
  int64_t span_left = 0;  // SliceSamplerOptions::kWholeSpan (-1) is TorchRL's True
  int64_t span_right = 0;
  bool pad = false;
};

/// "1,2,3": a list argument of the child script.
inline std::string join(const std::vector<int64_t>& v) {
  std::ostringstream out;
  for (std::size_t k = 0; k < v.size(); ++k) out << (k ? "," : "") << v[k];
  return out.str();
}

/// A span in a test's name: "whole" for kWholeSpan.
inline std::string span_name(int64_t span) {
  return span == SliceSamplerOptions::kWholeSpan ? "whole" : std::to_string(span);
}

inline nlohmann::json run_torchrl(const std::string& args) {
  const std::string command = std::string("\"") + TENSORDICT_RB_TORCHRL_PYTHON + "\" \"" +
                              TENSORDICT_RB_TORCHRL_SCRIPT + "\" " + args;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  const int status = pclose(pipe.release());
  if (status != 0 || out.empty())
    throw std::runtime_error(command + " failed (status " + std::to_string(status) + "): " + out);
  // The script prints one JSON line (TorchRL's own logging goes to stderr).
  const std::size_t last = out.find_last_not_of('\n');
  const std::size_t begin = out.rfind('\n', last);
  return nlohmann::json::parse(out.substr(begin == std::string::npos ? 0 : begin + 1));
}

}  // namespace tensordict::rb::test
