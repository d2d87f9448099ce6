// The C++ side of the checkpoint exchanges with TorchRL
// (tests/rb/python/torchrl_interop.sh):
//   tensordict_rb_checkpoint_peer write DIR --sampler S --capacity C --rows N
//   tensordict_rb_checkpoint_peer check DIR --sampler S --capacity C --rows N
// `write` fills a buffer by the procedure of torchrl_checkpoint.py and dumps
// it; `check` loads DIR (written by TorchRL) into a fresh buffer and checks it
// (exit status 1 and a message naming what differed).
#include <tensordict/errors.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "rb/torchrl_procedure.h"

namespace rb = tensordict::rb;

int main(int argc, char** argv) {
  std::string command, dir, sampler;
  int64_t capacity = 0, rows = 0, envs = 0;
  if (argc >= 3) {
    command = argv[1];
    dir = argv[2];
  }
  for (int k = 3; k + 1 < argc; k += 2) {
    const std::string flag = argv[k];
    if (flag == "--sampler")
      sampler = argv[k + 1];
    else if (flag == "--capacity")
      capacity = std::atoll(argv[k + 1]);
    else if (flag == "--rows")
      rows = std::atoll(argv[k + 1]);
    else if (flag == "--envs")  // an [env, time] buffer of `envs` envs
      envs = std::atoll(argv[k + 1]);
  }
  if ((command != "write" && command != "check") || dir.empty() || sampler.empty() ||
      capacity < 1 || rows < 1 || envs < 0 || (envs && capacity % envs)) {
    std::fprintf(stderr,
                 "usage: %s write|check DIR --sampler random|without_replacement|prioritized "
                 "--capacity C --rows N [--envs E]\n",
                 argv[0]);
    return 2;
  }
  try {
    // [env, time]: `write` fills a pre-allocated [envs, capacity / envs]
    // storage; `check` loads into a lazy ndim=2 buffer never written, whose
    // storage the checkpoint makes.
    rb::ReplayBuffer buffer =
        !envs                ? rb::ReplayBuffer(capacity, rb::test::make_sampler(sampler, capacity))
        : command == "write" ? rb::ReplayBuffer(rb::test::env_storage(envs, capacity),
                                                rb::test::make_sampler(sampler, capacity))
                             : rb::ReplayBuffer(capacity, rb::test::make_sampler(sampler, capacity),
                                                "memory", {}, nullptr, /*ndim=*/2);
    if (command == "write") {
      buffer.manual_seed(7);
      rb::test::fill(buffer, rows, envs);
      buffer.dumps(dir);
      std::printf("checkpoint_peer: wrote %s (%s, capacity %lld, %lld rows)\n", dir.c_str(),
                  sampler.c_str(), static_cast<long long>(capacity), static_cast<long long>(rows));
      return 0;
    }
    buffer.loads(dir);
    const std::string differs =
        envs ? rb::test::check_loaded_env(buffer, sampler, capacity, envs, rows)
             : rb::test::check_loaded(buffer, sampler, capacity, rows);
    if (!differs.empty()) {
      std::fprintf(stderr, "checkpoint_peer: %s: %s\n", dir.c_str(), differs.c_str());
      return 1;
    }
    std::printf("checkpoint_peer: %s loads in C++ and matches (%s, capacity %lld, %lld rows)\n",
                dir.c_str(), sampler.c_str(), static_cast<long long>(capacity),
                static_cast<long long>(rows));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_peer: %s: %s\n", dir.c_str(), e.what());
    return 1;
  }
}
