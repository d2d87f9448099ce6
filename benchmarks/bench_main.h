#pragma once
// The main() every benchmark binary shares: seed, register, run.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

using BenchFn = void (*)(benchmark::State&);
using NamedBench = std::pair<const char*, BenchFn>;

/// Runs `b` for `min_time` seconds, or for exactly $TENSORDICT_BENCH_ITERATIONS
/// iterations when that is set: benchmarks/callgrind.py counts instructions
/// over two fixed iteration counts (this Google Benchmark has no
/// --benchmark_min_time=<N>x, and a registered MinTime wins over the flag).
inline benchmark::internal::Benchmark* run_length(benchmark::internal::Benchmark* b,
                                                  double min_time) {
  if (const char* n = std::getenv("TENSORDICT_BENCH_ITERATIONS"))
    return b->Iterations(std::strtoll(n, nullptr, 10));
  return b->MinTime(min_time);
}

/// Registers every (name, function) pair with the same minimum time.
template <std::size_t N>
void register_min_time(const NamedBench (&benchmarks)[N], double min_time) {
  for (const auto& [name, fn] : benchmarks)
    run_length(benchmark::RegisterBenchmark(name, fn), min_time);
}

/// The floor of a row write: the bytes of each source leaf (`rows` rows of
/// it) copied with memcpy to row `row` of the matching destination leaf.
inline void memcpy_rows(const std::vector<torch::Tensor>& dst,
                        const std::vector<torch::Tensor>& src, int64_t row, int64_t rows) {
  for (size_t k = 0; k < dst.size(); ++k) {
    const size_t n = src[k].nbytes();
    std::memcpy(static_cast<char*>(dst[k].data_ptr()) + row * static_cast<int64_t>(n / rows),
                src[k].data_ptr(), n);
  }
}

inline int run_benchmarks(int argc, char** argv, void (*register_all)()) {
  // Freed blocks of up to 32 MB stay in the heap and are reused, instead of
  // being unmapped and faulted in again (zeroed by the kernel) on the next
  // iteration. Without this, a tensordict and its floor that free their
  // results at different moments measure the page-fault state of glibc's
  // allocator more than their own work (the 10 MB apply ran 0.97x alone and
  // 2.5x right after its floor). A caching allocator is what LibTorch uses on
  // GPUs for the same reason.
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024);
  torch::manual_seed(0);
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
