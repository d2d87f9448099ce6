// The replay buffer of examples/replay_buffer (a tensordict::rb::ReplayBuffer
// over a from_schema storage) next to hand-written floors:
// writing one transition and a batch of 256 (floor: memcpy of each leaf's
// bytes into the same preallocated storage), and a uniform sample of 256
// (floor: randint + index_select on each raw leaf tensor).
//
// Buffers hold 1,024 transitions of 41.4 KiB (obs and next/obs uint8[84,84,3],
// action float[4], reward float, done bool). Every row is written once before
// timing, so no benchmark measures the first-touch page faults of a fresh
// memmap file. Files go to $TENSORDICT_BENCH_DIR (default: the temp dir).
#include <benchmark/benchmark.h>
#include "bench_main.h"
#include "replay_buffer.h"

#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace td = tensordict;
using replay::Buffer;

namespace {

constexpr int64_t kCapacity = 1024;
constexpr int64_t kBatch = 256;

fs::path bench_dir() {
  const char* env = std::getenv("TENSORDICT_BENCH_DIR");
  fs::path p = env ? fs::path(env) : fs::temp_directory_path() / "tensordict-bench";
  fs::create_directories(p);
  return p;
}

td::TensorDict transitions(int64_t n) {
  auto frames = [&] { return torch::randint(256, {n, 84, 84, 3}, torch::kUInt8); };
  return td::TensorDict({{"obs", frames()},
                         {"action", torch::randn({n, 4})},
                         {"reward", torch::randn({n})},
                         {"done", torch::rand({n}).lt(0.02)},
                         {"next", td::TensorDict({{"obs", frames()}}, {n})}},
                        {n});
}

// One buffer per storage, filled once so that every page exists.
Buffer& buffer(const std::string& storage) {
  static std::map<std::string, Buffer> buffers;
  auto it = buffers.find(storage);
  if (it == buffers.end()) {
    std::optional<fs::path> dir;
    if (storage == "memmap") dir = bench_dir() / "replay";
    Buffer rb = Buffer::create(kCapacity, storage, dir);
    rb.buffer().extend(transitions(kCapacity));
    it = buffers.emplace(storage, std::move(rb)).first;
  }
  return it->second;
}

// The buffer's leaves as raw tensors, in a fixed order, with the matching
// leaves of a source tensordict.
std::vector<torch::Tensor> leaves(const td::TensorDictBase& d) {
  return {d.get("obs"), d.get("action"), d.get("reward"), d.get("done"), d.get({"next", "obs"})};
}

const std::string kStorages[] = {"memmap", "memory"};

template <bool kFloor>
void write_one(benchmark::State& state, const std::string& storage) {
  Buffer& rb = buffer(storage);
  td::TensorDict one = transitions(1)[0];
  std::vector<torch::Tensor> dst = leaves(rb.storage());
  std::vector<torch::Tensor> src = leaves(one);
  int64_t row = 0;
  for (auto _ : state) {
    if constexpr (kFloor) {
      memcpy_rows(dst, src, row, 1);
      row = (row + 1) % kCapacity;
    } else {
      benchmark::DoNotOptimize(rb.buffer().add(one));
    }
  }
  state.SetItemsProcessed(state.iterations());
}

template <bool kFloor>
void write_batch(benchmark::State& state, const std::string& storage) {
  Buffer& rb = buffer(storage);
  td::TensorDict batch = transitions(kBatch);
  std::vector<torch::Tensor> dst = leaves(rb.storage());
  std::vector<torch::Tensor> src = leaves(batch);
  int64_t row = 0;
  for (auto _ : state) {
    if constexpr (kFloor) {
      memcpy_rows(dst, src, row, kBatch);
      row = (row + kBatch) % kCapacity;  // kCapacity is a multiple of kBatch: no wrap
    } else {
      benchmark::DoNotOptimize(rb.buffer().extend(batch));
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

template <bool kFloor>
void sample(benchmark::State& state, const std::string& storage) {
  Buffer& rb = buffer(storage);
  std::vector<torch::Tensor> src = leaves(rb.storage());
  tensordict::rb::RandomSampler uniform;
  for (auto _ : state) {
    if constexpr (kFloor) {
      torch::Tensor idx = torch::randint(kCapacity, {kBatch}, torch::kLong);
      std::vector<torch::Tensor> out;
      out.reserve(src.size());
      for (const auto& t : src) out.push_back(t.index_select(0, idx));
      benchmark::DoNotOptimize(out);
    } else {
      replay::Transition batch = rb.at(uniform.sample(rb.size(), kBatch, nullptr).index);
      benchmark::DoNotOptimize(batch);
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void register_all() {
  for (const std::string& s : kStorages) {
    auto add = [&](const char* op, void (*fn)(benchmark::State&, const std::string&),
                   const char* variant) {
      benchmark::RegisterBenchmark(
          ("BM_replay_" + std::string(op) + "/" + variant + "/" + s).c_str(),
          [fn, s](benchmark::State& st) { fn(st, s); })
          ->MinTime(0.3);
    };
    add("write_one", write_one<false>, "tensordict");
    add("write_one", write_one<true>, "floor");
    add("write_batch256", write_batch<false>, "tensordict");
    add("write_batch256", write_batch<true>, "floor");
    add("sample256", sample<false>, "tensordict");
    add("sample256", sample<true>, "floor");
  }
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
