#pragma once
// The main() every benchmark binary shares: seed, register, run.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <utility>

using BenchFn = void (*)(benchmark::State&);
using NamedBench = std::pair<const char*, BenchFn>;

/// Registers every (name, function) pair with the same minimum time.
template <std::size_t N>
void register_min_time(const NamedBench (&benchmarks)[N], double min_time) {
  for (const auto& [name, fn] : benchmarks) benchmark::RegisterBenchmark(name, fn)->MinTime(min_time);
}

inline int run_benchmarks(int argc, char** argv, void (*register_all)()) {
  torch::manual_seed(0);
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
