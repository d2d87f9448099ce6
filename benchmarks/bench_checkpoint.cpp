// Module checkpoints: saving and loading the 101 MB transformer of
// examples/checkpoint_model.h (25.3 M float32 parameters in 80 tensors) with
// tensordict (from_module + memmap, load_memmap + to_module) next to
//  - the floor: raw write()/read() of the same parameter bytes, one file per
//    tensor (the same number of files as the memmap directory), on one thread;
//  - torch::save / torch::load of the module (a second variant).
// The save benchmarks call no fsync (neither do memmap() and torch::save by
// default): they measure writing into the page cache. BM_ckpt_save_durable_100MB
// measures what memmap(dir, {.durable = true}) adds: every file and directory
// fsync()ed, next to a floor that writes and fsyncs each file, then the
// directory. torch::save truncates its previous
// file (std::ofstream), memmap() and the floor unlink and recreate theirs. Files go to
// $TENSORDICT_BENCH_DIR (default: the system temp dir); results/checkpoint.md says which was used.
#include <benchmark/benchmark.h>
#include <tensordict/module.h>
#include <tensordict/tensordict.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include "bench_main.h"
#include "checkpoint_model.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace td = tensordict;

namespace {

fs::path bench_dir() {
  const char* env = std::getenv("TENSORDICT_BENCH_DIR");
  fs::path p =
      (env ? fs::path(env) : fs::temp_directory_path() / "tensordict-bench") / "checkpoint";
  fs::create_directories(p);
  return p;
}

example::Transformer& model() {
  static example::Transformer m = [] {
    torch::manual_seed(0);
    return example::Transformer(example::model_size("100mb"));
  }();
  return m;
}

// The module's tensors in from_module order, with a flat file name each.
struct Leaf {
  std::string file;
  at::Tensor tensor;
};
std::vector<Leaf> leaves(const fs::path& dir) {
  std::vector<Leaf> out;
  for (const auto& [k, v] : td::from_module(*model()).items(true, true))
    out.push_back({(dir / (k.join(".") + ".bin")).string(), v.tensor()});
  return out;
}

// Another instance of the same architecture (its own memory), so that a
// zero-copy load does not change the model the other benchmarks read.
example::Transformer fresh_model() { return example::Transformer(example::model_size("100mb")); }

// Reads one byte of every 4 KiB page of every tensor of the module; with
// `write`, writes it back (what a training step's in-place update does to a
// copy-on-write mapping: each page is copied on its first write).
unsigned touch_pages(const torch::nn::Module& m, bool write = false) {
  unsigned sum = 0;
  for (const auto& [k, v] : td::from_module(m).items(true, true)) {
    volatile char* p = static_cast<char*>(v.tensor().data_ptr());
    const std::size_t n = v.tensor().nbytes();
    for (std::size_t i = 0; i < n; i += 4096) {
      const char c = p[i];
      sum += static_cast<unsigned char>(c);
      if (write) p[i] = c;
    }
  }
  return sum;
}

int64_t model_bytes() {
  int64_t n = 0;
  for (const auto& l : leaves("")) n += static_cast<int64_t>(l.tensor.nbytes());
  return n;
}

void report(benchmark::State& state) {
  state.SetBytesProcessed(state.iterations() * model_bytes());
}

void write_all(int fd, const char* p, std::size_t n) {
  for (std::size_t done = 0; done < n;) {
    auto w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(done));
    if (w <= 0) throw std::runtime_error("pwrite failed");
    done += static_cast<std::size_t>(w);
  }
}
void read_all(int fd, char* p, std::size_t n) {
  for (std::size_t done = 0; done < n;) {
    auto r = ::pread(fd, p + done, n - done, static_cast<off_t>(done));
    if (r <= 0) throw std::runtime_error("pread failed");
    done += static_cast<std::size_t>(r);
  }
}

// ---- save -----------------------------------------------------------------------

void save_td(benchmark::State& state, const char* name, const td::MemmapOptions& options) {
  auto dir = bench_dir() / name;
  for (auto _ : state) {
    td::TensorDictBase saved = td::from_module(*model()).memmap(dir.string(), options);
    benchmark::DoNotOptimize(saved);
  }
  report(state);
}
void BM_ckpt_save_td(benchmark::State& state) { save_td(state, "td", {}); }
// The same with one writer thread, like the floor.
void BM_ckpt_save_td_1thread(benchmark::State& state) { save_td(state, "td1", {.num_threads = 1}); }
// Durable: the bytes are on the disk when the call returns.
void BM_ckpt_save_td_durable(benchmark::State& state) {
  save_td(state, "td_durable", {.durable = true});
}
// One file per tensor written with write(); with `sync`, each fsync()ed, then
// the directory (what a durable save must do at the least).
void save_floor(benchmark::State& state, const fs::path& dir, bool sync) {
  fs::create_directories(dir);
  const auto files = leaves(dir);
  for (auto _ : state) {
    for (const auto& l : files) {
      // Replace the previous file as memmap() does (unlink, create): on ext4,
      // O_TRUNC over pages still being written back is about 3x slower.
      ::unlink(l.file.c_str());
      int fd = ::open(l.file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      write_all(fd, static_cast<const char*>(l.tensor.data_ptr()), l.tensor.nbytes());
      if (sync) ::fsync(fd);
      ::close(fd);
    }
    if (sync) {
      int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      ::fsync(d);
      ::close(d);
    }
  }
  report(state);
}
void BM_ckpt_save_floor(benchmark::State& state) { save_floor(state, bench_dir() / "raw", false); }
void BM_ckpt_save_floor_fsync(benchmark::State& state) {
  save_floor(state, bench_dir() / "raw_fsync", true);
}
void BM_ckpt_save_torch_save(benchmark::State& state) {
  auto file = bench_dir() / "model.pt";
  for (auto _ : state) torch::save(model(), file.string());
  report(state);
}

// ---- load into the module ----------------------------------------------------------
//
// Each load benchmark runs twice: warm, with the heap bench_main.h keeps
// (freed blocks are reused, so torch::load's new tensors land in memory that
// is already faulted in), and cold, where every iteration starts from a
// trimmed heap (malloc_trim(0), not timed), as in a process that loads a
// checkpoint once: memory new to the process is faulted in (zeroed by the
// kernel) on first write.

void trim_heap(benchmark::State& state, bool cold) {
  if (!cold) return;
  state.PauseTiming();
  ::malloc_trim(0);
  state.ResumeTiming();
}

void BM_ckpt_load_td(benchmark::State& state, bool cold) {
  auto dir = bench_dir() / "load_td";
  td::from_module(*model()).memmap(dir.string());
  for (auto _ : state) {
    trim_heap(state, cold);
    td::to_module(td::load_memmap(dir.string()), *model());
  }
  report(state);
}
// Zero-copy: the module's tensors are mapped copy-on-write from the files
// (share_storage); no data is read until it is used. With `touch`, then one
// read of every 4 KiB page of every tensor: what the first forward pass pays
// on top of the zero-copy load; with `Touch::Write`, one write per page: what
// the first optimizer step pays (docs/checkpoint.md, why the default copies).
enum class Touch { None, Read, Write };
void BM_ckpt_load_td_shared(benchmark::State& state, bool cold, Touch touch) {
  auto dir = bench_dir() / "load_td_shared";
  td::from_module(*model()).memmap(dir.string());
  example::Transformer m = fresh_model();
  for (auto _ : state) {
    trim_heap(state, cold);
    td::to_module(td::load_memmap(dir.string(), {.writable = false}), *m, {.share_storage = true});
    if (touch != Touch::None) benchmark::DoNotOptimize(touch_pages(*m, touch == Touch::Write));
  }
  report(state);
}
void BM_ckpt_load_floor(benchmark::State& state, bool cold) {
  auto dir = bench_dir() / "load_raw";
  fs::create_directories(dir);
  const auto files = leaves(dir);
  for (const auto& l : files) {
    int fd = ::open(l.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    write_all(fd, static_cast<const char*>(l.tensor.data_ptr()), l.tensor.nbytes());
    ::close(fd);
  }
  for (auto _ : state) {
    trim_heap(state, cold);
    // read() straight into the parameters' memory (what to_module must write).
    for (const auto& l : files) {
      int fd = ::open(l.file.c_str(), O_RDONLY | O_CLOEXEC);
      read_all(fd, static_cast<char*>(l.tensor.data_ptr()), l.tensor.nbytes());
      ::close(fd);
    }
  }
  report(state);
}
void BM_ckpt_load_torch_load(benchmark::State& state, bool cold) {
  auto file = bench_dir() / "load.pt";
  torch::save(model(), file.string());
  for (auto _ : state) {
    trim_heap(state, cold);
    torch::load(model(), file.string());
  }
  report(state);
}

void register_all() {
  using Fn = void (*)(benchmark::State&);
  const std::pair<const char*, Fn> saves[] = {
      {"BM_ckpt_save_100MB/tensordict", BM_ckpt_save_td},
      {"BM_ckpt_save_100MB/tensordict_1thread", BM_ckpt_save_td_1thread},
      {"BM_ckpt_save_100MB/floor", BM_ckpt_save_floor},
      {"BM_ckpt_save_100MB/torch_save", BM_ckpt_save_torch_save},
      {"BM_ckpt_save_durable_100MB/tensordict", BM_ckpt_save_td_durable},
      {"BM_ckpt_save_durable_100MB/floor", BM_ckpt_save_floor_fsync},
  };
  auto setup = [](benchmark::internal::Benchmark* b) {
    b->Iterations(10)->Unit(benchmark::kMillisecond)->UseRealTime();
  };
  for (const auto& [name, fn] : saves) setup(benchmark::RegisterBenchmark(name, fn));
  for (bool cold : {false, true}) {
    const std::string op = cold ? "BM_ckpt_load_cold_100MB/" : "BM_ckpt_load_100MB/";
    auto reg = [&](const char* variant, auto fn, auto... args) {
      setup(benchmark::RegisterBenchmark((op + variant).c_str(), fn, args...));
    };
    reg("tensordict", BM_ckpt_load_td, cold);
    reg("tensordict_shared", BM_ckpt_load_td_shared, cold, Touch::None);
    reg("tensordict_shared_touch", BM_ckpt_load_td_shared, cold, Touch::Read);
    reg("tensordict_shared_write", BM_ckpt_load_td_shared, cold, Touch::Write);
    reg("floor", BM_ckpt_load_floor, cold);
    reg("torch_load", BM_ckpt_load_torch_load, cold);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rc = run_benchmarks(argc, argv, register_all);
  fs::remove_all(bench_dir());
  return rc;
}
