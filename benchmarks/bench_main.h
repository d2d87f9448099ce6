#pragma once
// The main() every benchmark binary shares: seed, register, run.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

inline int run_benchmarks(int argc, char** argv, void (*register_all)()) {
  torch::manual_seed(0);
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
