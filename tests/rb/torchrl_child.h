#pragma once
// Runs tests/rb/python/torchrl_slice_writer.py in the real TorchRL
// (TENSORDICT_RB_TORCHRL_PYTHON) as a child process and parses the JSON line
// it prints.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace tensordict::rb::test {

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
