// The rows the Redis benchmarks write and read (bench_redis, bench_redis_cluster):
// 10 float32 leaves of 64 values, 256 bytes per row and leaf; and hiredis by hand.
#pragma once
#include <tensordict/schema.h>
#include <tensordict/tensor_dict.h>
#include <torch/torch.h>

#include <hiredis/hiredis.h>

#include <string_view>

#include <string>
#include <vector>

namespace redis_bench {

constexpr int kLeaves = 10;
constexpr int64_t kWidth = 64;
constexpr int64_t kRowBytes = kWidth * 4;

inline tensordict::Schema schema() {
  tensordict::Schema s;
  for (int i = 0; i < kLeaves; ++i) s.add("leaf" + std::to_string(i), {{kWidth}, torch::kFloat32});
  return s;
}

inline tensordict::TensorDict row() {
  tensordict::TensorDict r(std::vector<int64_t>{});
  for (int i = 0; i < kLeaves; ++i) r.set("leaf" + std::to_string(i), torch::randn({kWidth}));
  return r;
}

/// Appends one command to the hiredis pipeline of `c`.
inline void append_command(redisContext* c, const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto a : args) argv.push_back(a.data()), lens.push_back(a.size());
  redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
}

}  // namespace redis_bench
