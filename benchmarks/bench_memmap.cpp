// Memory-mapped storage next to its floors: raw write()/read() of the same
// bytes, and torch::save. Naming as in bench_core.cpp: BM_<op>/<variant>.
// Files go to $TENSORDICT_BENCH_DIR (default: the system temp dir).
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace td = tensordict;

namespace {

fs::path bench_dir() {
  const char* env = std::getenv("TENSORDICT_BENCH_DIR");
  fs::path p = env ? fs::path(env) : fs::temp_directory_path() / "tensordict-bench";
  fs::create_directories(p);
  return p;
}

// 8 leaves of [1024, cols] floats: cols 8192 is 256 MiB in all, 3200 is 100 MiB.
td::TensorDict big_td(int64_t cols) {
  static std::map<int64_t, td::TensorDict> made;
  auto it = made.find(cols);
  if (it == made.end()) {
    td::TensorDict out(std::vector<int64_t>{1024});
    for (int i = 0; i < 8; ++i) out.set("leaf" + std::to_string(i), torch::randn({1024, cols}));
    it = made.emplace(cols, out).first;
  }
  return it->second;
}

// 2,000 small leaves (100 groups of 20), 4 KiB each.
td::TensorDict many_td() {
  static td::TensorDict d = [] {
    td::TensorDict out(std::vector<int64_t>{16});
    for (int g = 0; g < 100; ++g)
      for (int i = 0; i < 20; ++i)
        out.set({"g" + std::to_string(g), "x" + std::to_string(i)}, torch::randn({16, 64}));
    return out;
  }();
  return d;
}

void raw_write(const std::string& path, const torch::Tensor& t) {
  // Replace the previous file as memmap() does (unlink, create).
  ::unlink(path.c_str());
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  const char* p = static_cast<const char*>(t.data_ptr());
  std::size_t n = t.nbytes(), done = 0;
  while (done < n) {
    auto w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(done));
    if (w <= 0) break;
    done += static_cast<std::size_t>(w);
  }
  ::close(fd);
}

void report(benchmark::State& state, int64_t bytes) {
  state.SetBytesProcessed(state.iterations() * bytes);
}

int64_t td_bytes(const td::TensorDict& d) {
  int64_t n = 0;
  for (auto& v : d.values(true, true)) n += static_cast<int64_t>(v.tensor().nbytes());
  return n;
}

void BM_save_td(benchmark::State& state, int64_t cols) {
  auto d = big_td(cols);
  auto dir = bench_dir() / ("save_td" + std::to_string(cols));
  for (auto _ : state) {
    td::TensorDictBase m = d.memmap(dir.string());
    benchmark::DoNotOptimize(m);
  }
  report(state, td_bytes(d));
}
void BM_save_floor(benchmark::State& state, int64_t cols) {
  auto d = big_td(cols);
  auto dir = bench_dir() / ("save_raw" + std::to_string(cols));
  fs::create_directories(dir);
  std::vector<torch::Tensor> leaves;
  for (auto& v : d.values(true, true)) leaves.push_back(v.tensor());
  for (auto _ : state) {
    int i = 0;
    for (auto& t : leaves) raw_write((dir / ("leaf" + std::to_string(i++))).string(), t);
  }
  report(state, td_bytes(d));
}
void BM_save_torch_save(benchmark::State& state, int64_t cols) {
  auto d = big_td(cols);
  auto file = bench_dir() / "save_torch.pt";
  std::vector<torch::Tensor> leaves;
  for (auto& v : d.values(true, true)) leaves.push_back(v.tensor());
  for (auto _ : state) torch::save(leaves, file.string());
  report(state, td_bytes(d));
}

void BM_save_2000_small_td(benchmark::State& state) {
  auto d = many_td();
  auto dir = bench_dir() / "many_td";
  for (auto _ : state) {
    td::TensorDictBase m = d.memmap(dir.string());
    benchmark::DoNotOptimize(m);
  }
  report(state, td_bytes(d));
}
void BM_save_2000_small_floor(benchmark::State& state) {
  auto d = many_td();
  auto dir = bench_dir() / "many_raw";
  std::vector<std::pair<fs::path, torch::Tensor>> files;
  for (auto& [k, v] : d.items(true, true)) files.emplace_back(dir / k.join("/"), v.tensor());
  for (auto& [p, t] : files) fs::create_directories(p.parent_path());
  for (auto _ : state)
    for (auto& [p, t] : files) raw_write(p.string(), t);
  report(state, td_bytes(d));
}

void BM_load_read_td(benchmark::State& state, int64_t cols) {
  auto d = big_td(cols);
  auto dir = bench_dir() / ("load_td" + std::to_string(cols));
  d.memmap(dir.string());
  for (auto _ : state) {
    td::TensorDictBase l = td::load_memmap(dir.string());
    double s = 0;
    for (auto& v : l.values(true, true)) s += v.tensor().sum().item<double>();
    benchmark::DoNotOptimize(s);
  }
  report(state, td_bytes(d));
}
void BM_load_read_floor(benchmark::State& state, int64_t cols) {
  auto d = big_td(cols);
  auto dir = bench_dir() / ("load_raw" + std::to_string(cols));
  fs::create_directories(dir);
  std::vector<std::string> files;
  int i = 0;
  for (auto& v : d.values(true, true)) {
    files.push_back((dir / ("leaf" + std::to_string(i++))).string());
    raw_write(files.back(), v.tensor());
  }
  torch::Tensor buf = torch::empty({1024, cols});
  for (auto _ : state) {
    double s = 0;
    for (auto& f : files) {
      int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
      char* p = static_cast<char*>(buf.data_ptr());
      std::size_t n = buf.nbytes(), done = 0;
      while (done < n) {
        auto r = ::pread(fd, p + done, n - done, static_cast<off_t>(done));
        if (r <= 0) break;
        done += static_cast<std::size_t>(r);
      }
      ::close(fd);
      s += buf.sum().item<double>();
    }
    benchmark::DoNotOptimize(s);
  }
  report(state, td_bytes(d));
}

// 1,000,000 rows of uint8[3, 64, 64]: a 12 GiB sparse file, no RAM.
void BM_memmap_like_1M_rows_td(benchmark::State& state) {
  auto dir = bench_dir() / "like_td";
  td::TensorDict proto({{"obs", torch::zeros({}, torch::kUInt8).expand({1'000'000, 3, 64, 64})}},
                       {1'000'000});
  for (auto _ : state) {
    td::TensorDictBase m = proto.memmap_like(dir.string());
    benchmark::DoNotOptimize(m);
  }
}
void BM_memmap_like_1M_rows_floor(benchmark::State& state) {
  auto file = bench_dir() / "like_raw.bin";
  for (auto _ : state) {
    ::unlink(file.c_str());
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (::ftruncate(fd, 1'000'000LL * 3 * 64 * 64) != 0) state.SkipWithError("ftruncate");
    ::close(fd);
  }
}

void register_all() {
  using Fn = void (*)(benchmark::State&);
  using SizedFn = void (*)(benchmark::State&, int64_t);
  const std::pair<const char*, SizedFn> heavy[] = {
      {"BM_save_%s/tensordict", BM_save_td},
      {"BM_save_%s/floor", BM_save_floor},
      {"BM_save_%s/torch_save", BM_save_torch_save},
      {"BM_load_read_%s/tensordict", BM_load_read_td},
      {"BM_load_read_%s/floor", BM_load_read_floor},
  };
  for (const auto& [size, cols] : {std::pair<const char*, int64_t>{"256MB", 8192}, {"100MB", 3200}})
    for (const auto& [pattern, fn] : heavy) {
      char name[64];
      std::snprintf(name, sizeof(name), pattern, size);
      benchmark::RegisterBenchmark(name, fn, cols)
          ->Iterations(6)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  const std::pair<const char*, Fn> light[] = {
      {"BM_save_2000_small/tensordict", BM_save_2000_small_td},
      {"BM_save_2000_small/floor", BM_save_2000_small_floor},
      {"BM_memmap_like_1M_rows/tensordict", BM_memmap_like_1M_rows_td},
      {"BM_memmap_like_1M_rows/floor", BM_memmap_like_1M_rows_floor},
  };
  for (const auto& [name, fn] : light)
    benchmark::RegisterBenchmark(name, fn)
        ->MinTime(0.5)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  int rc = run_benchmarks(argc, argv, register_all);
  fs::remove_all(bench_dir());
  return rc;
}
