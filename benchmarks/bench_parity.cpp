// The rows the Python peer (benchmarks/peers/tensordict_peer.py, suite "parity")
// times that no other binary has, each next to its floor by hand in raw
// LibTorch: to(dtype), consolidate and from_consolidated, state dict save and
// load, indexing and stack of a flat layout (bench_ops has the nested one),
// the cost of td[i], update and stack of 64 against the number of leaves
// (10, 100, 1000) and the depth of nesting (1, 3, 8), and the memory a
// tensordict of 10,000 leaves adds per leaf. Naming as in bench_core.cpp:
// BM_<op>/<variant>[/<args>]; the Python rows are BM_<op>/python[/<args>].
// Files go to $TENSORDICT_BENCH_DIR (default: the system temp dir).
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace fs = std::filesystem;
namespace td = tensordict;
using namespace torch::indexing;

namespace {

constexpr int64_t kBatch = 100'000;
constexpr double kMinTime = 0.2;

fs::path bench_dir() {
  const char* env = std::getenv("TENSORDICT_BENCH_DIR");
  fs::path p = env ? fs::path(env) : fs::temp_directory_path() / "tensordict-bench";
  p /= "parity";
  fs::create_directories(p);
  return p;
}

// The 10 leaves of bench_ops (batch 100,000), nested 2 levels as there or all
// at the root (the flat layout).
td::TensorDict make_td(bool flat) {
  auto key = [flat](std::initializer_list<std::string_view> nested) {
    if (!flat) return td::NestedKey(nested);
    return td::NestedKey(std::string(*(nested.end() - 1)));
  };
  td::TensorDict out(std::vector<int64_t>{kBatch});
  out.set("obs", torch::randn({kBatch, 8}));
  out.set("action", torch::randn({kBatch, 4}));
  out.set("reward", torch::randn({kBatch, 1}));
  out.set("done", torch::zeros({kBatch, 1}, torch::kBool));
  out.set(key({"nested", "a"}), torch::randn({kBatch, 3}));
  out.set(key({"nested", "b"}), torch::randint(0, 10, {kBatch}, torch::kLong));
  out.set(key({"nested", "c"}), torch::randn({kBatch, 2, 2}));
  out.set(key({"nested", "deeper", "x"}), torch::randn({kBatch, 5}));
  out.set(key({"nested", "deeper", "y"}), torch::randn({kBatch}));
  out.set(key({"nested", "deeper", "z"}), torch::randint(0, 255, {kBatch, 3}, torch::kUInt8));
  return out;
}

std::vector<torch::Tensor> leaves_of(const td::TensorDictBase& data) {
  std::vector<torch::Tensor> out;
  for (auto& v : data.values(true, true)) out.push_back(v.tensor());
  return out;
}

struct Data {
  td::TensorDict nested = make_td(false);
  td::TensorDict flat = make_td(true);
  std::vector<torch::Tensor> raw = leaves_of(nested);
};
Data& data() {
  static Data d;
  return d;
}

// ---- to(dtype) -------------------------------------------------------------------

void BM_to_float64_td(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    td::TensorDictBase r = d.nested.to(torch::kDouble);
    benchmark::DoNotOptimize(r);
  }
}
void BM_to_float64_floor(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j].to(torch::kDouble);
    benchmark::DoNotOptimize(out);
  }
}

// ---- consolidate, from_consolidated -------------------------------------------------

void BM_consolidate_td(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    td::TensorDictBase r = d.nested.consolidate();
    benchmark::DoNotOptimize(r);
  }
}
// One uint8 buffer, each leaf copied into its 8-byte-aligned range and viewed
// back in its dtype and shape.
void BM_consolidate_floor(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    int64_t total = 0;
    std::vector<int64_t> offsets;
    for (auto& t : d.raw) {
      offsets.push_back(total);
      total += (static_cast<int64_t>(t.nbytes()) + 7) / 8 * 8;
    }
    torch::Tensor buffer = torch::empty({total}, torch::kUInt8);
    std::vector<torch::Tensor> out(d.raw.size());
    for (std::size_t j = 0; j < d.raw.size(); ++j) {
      const auto& t = d.raw[j];
      out[j] = buffer.narrow(0, offsets[j], static_cast<int64_t>(t.nbytes()))
                   .view(t.scalar_type())
                   .view(t.sizes());
      out[j].copy_(t);
    }
    benchmark::DoNotOptimize(out);
  }
}

std::string consolidated_file() {
  static const std::string path = [] {
    auto p = (bench_dir() / "consolidated.bin").string();
    data().nested.consolidate(p);
    return p;
  }();
  return path;
}

void BM_from_consolidated_td(benchmark::State& state) {
  const auto path = consolidated_file();
  for (auto _ : state) {
    td::TensorDictBase r = td::TensorDict::from_consolidated(path);
    benchmark::DoNotOptimize(r);
  }
}
// The file mapped copy-on-write (torch::from_file, as Python does) and each
// leaf viewed at the offset the metadata gave once, outside the loop.
void BM_from_consolidated_floor(benchmark::State& state) {
  const auto path = consolidated_file();
  const auto size = static_cast<int64_t>(fs::file_size(path));
  td::TensorDictBase ref = td::TensorDict::from_consolidated(path);
  const auto* base = static_cast<const char*>(ref.consolidated_storage().data_ptr());
  struct Leaf {
    int64_t offset;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  std::vector<Leaf> leaves;
  for (auto& t : leaves_of(ref))
    leaves.push_back(
        {static_cast<const char*>(t.data_ptr()) - base, t.scalar_type(), t.sizes().vec()});
  for (auto _ : state) {
    torch::Tensor file = torch::from_file(path, false, size, torch::kUInt8);
    std::vector<torch::Tensor> out;
    out.reserve(leaves.size());
    for (auto& l : leaves) {
      const int64_t n = c10::multiply_integers(l.shape) * c10::elementSize(l.dtype);
      out.push_back(file.narrow(0, l.offset, n).view(l.dtype).view(l.shape));
    }
    benchmark::DoNotOptimize(out);
  }
}

// ---- state dict save and load ---------------------------------------------------------

void BM_state_dict_save_td(benchmark::State& state) {
  auto& d = data();
  const auto path = (bench_dir() / "state_dict_td.pt").string();
  for (auto _ : state) td::save_state_dict(d.nested.state_dict(), path);
}
void BM_state_dict_save_floor(benchmark::State& state) {
  auto& d = data();
  const auto path = (bench_dir() / "state_dict_floor.pt").string();
  for (auto _ : state) torch::save(d.raw, path);
}

void BM_state_dict_load_td(benchmark::State& state) {
  auto& d = data();
  const auto path = (bench_dir() / "state_dict_load_td.pt").string();
  td::save_state_dict(d.nested.state_dict(), path);
  td::TensorDictBase target = d.nested.clone();
  for (auto _ : state) {
    target.load_state_dict(td::load_state_dict_file(path));
    benchmark::DoNotOptimize(target);
  }
}
void BM_state_dict_load_floor(benchmark::State& state) {
  auto& d = data();
  const auto path = (bench_dir() / "state_dict_load_floor.pt").string();
  torch::save(d.raw, path);
  std::vector<torch::Tensor> target;
  for (auto& t : d.raw) target.push_back(t.clone());
  for (auto _ : state) {
    std::vector<torch::Tensor> loaded;
    torch::load(loaded, path);
    for (std::size_t j = 0; j < target.size(); ++j) target[j].copy_(loaded[j]);
    benchmark::DoNotOptimize(target);
  }
}

// ---- flat layout: td[i], td[256 random rows], stack of 64 ------------------------------

void BM_index_int_flat_td(benchmark::State& state) {
  auto& d = data();
  int64_t i = 0;
  for (auto _ : state) {
    td::TensorDict r = d.flat[i++ % kBatch];
    benchmark::DoNotOptimize(r);
  }
}
void select_floor(benchmark::State& state, const std::vector<torch::Tensor>& raw, int64_t rows) {
  int64_t i = 0;
  for (auto _ : state) {
    std::vector<torch::Tensor> out(raw.size());
    const int64_t k = i++ % rows;
    for (std::size_t j = 0; j < raw.size(); ++j) out[j] = raw[j].select(0, k);
    benchmark::DoNotOptimize(out);
  }
}
void BM_index_int_flat_floor(benchmark::State& state) { select_floor(state, data().raw, kBatch); }

void BM_index_long256_flat_td(benchmark::State& state) {
  auto& d = data();
  auto idx = torch::randint(0, kBatch, {256}, torch::kLong);
  for (auto _ : state) {
    td::TensorDict r = d.flat.index({idx});
    benchmark::DoNotOptimize(r);
  }
}
void BM_index_long256_flat_floor(benchmark::State& state) {
  auto& d = data();
  auto idx = torch::randint(0, kBatch, {256}, torch::kLong);
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j].index_select(0, idx);
    benchmark::DoNotOptimize(out);
  }
}

// Stack of 64 rows (td[7 i]); the floor keeps each row as its own list of
// leaves and gathers the per-leaf lists inside the loop, as bench_ops does.
void stack64_td(benchmark::State& state, const td::TensorDict& src) {
  std::vector<td::TensorDictBase> rows;
  for (int64_t i = 0; i < 64; ++i) rows.push_back(src[i * 7]);
  for (auto _ : state) {
    td::TensorDict r = td::stack(rows, 0);
    benchmark::DoNotOptimize(r);
  }
}
void stack64_floor(benchmark::State& state, const std::vector<torch::Tensor>& raw) {
  std::vector<std::vector<torch::Tensor>> rows;
  for (int64_t i = 0; i < 64; ++i) {
    rows.emplace_back();
    for (auto& t : raw) rows.back().push_back(t.select(0, i * 7));
  }
  std::vector<torch::Tensor> per_leaf;
  for (auto _ : state) {
    std::vector<torch::Tensor> out(raw.size());
    for (std::size_t j = 0; j < out.size(); ++j) {
      per_leaf.clear();
      for (auto& r : rows) per_leaf.push_back(r[j]);
      out[j] = torch::stack(per_leaf, 0);
    }
    benchmark::DoNotOptimize(out);
  }
}
void BM_stack64_flat_td(benchmark::State& state) { stack64_td(state, data().flat); }
void BM_stack64_flat_floor(benchmark::State& state) { stack64_floor(state, data().raw); }

// ---- scaling: leaves (10, 100, 1000) and depth (1, 3, 8) --------------------------------
// Leaves of float32[1000, 4], batch [1000]. BM_<op>_leaves/<variant>/<n>: n
// leaves "leaf<i>" at the root. BM_<op>_depth/<variant>/<d>: 10 leaves, each
// under the same chain of d - 1 nested tensordicts "n1", ..., "n<d-1>".

constexpr int64_t kScaleRows = 1000;

std::vector<std::string> chain(int64_t depth, int64_t leaf) {
  std::vector<std::string> key;
  for (int64_t l = 1; l < depth; ++l) key.push_back("n" + std::to_string(l));
  key.push_back("leaf" + std::to_string(leaf));
  return key;
}

td::TensorDict scaled_td(int64_t leaves, int64_t depth) {
  td::TensorDict out(std::vector<int64_t>{kScaleRows});
  for (int64_t i = 0; i < leaves; ++i)
    out.set(td::NestedKey(chain(depth, i)), torch::randn({kScaleRows, 4}));
  return out;
}
td::TensorDict leaves_td(benchmark::State& state) { return scaled_td(state.range(0), 1); }
td::TensorDict depth_td(benchmark::State& state) { return scaled_td(10, state.range(0)); }

template <td::TensorDict (*Make)(benchmark::State&)>
void index_int_td(benchmark::State& state) {
  td::TensorDict d = Make(state);
  int64_t i = 0;
  for (auto _ : state) {
    td::TensorDict r = d[i++ % kScaleRows];
    benchmark::DoNotOptimize(r);
  }
}
template <td::TensorDict (*Make)(benchmark::State&)>
void index_int_floor(benchmark::State& state) {
  select_floor(state, leaves_of(Make(state)), kScaleRows);
}

template <td::TensorDict (*Make)(benchmark::State&)>
void update_td(benchmark::State& state) {
  td::TensorDict dest = Make(state), src = Make(state);
  for (auto _ : state) {
    dest.update(src);
    benchmark::DoNotOptimize(dest);
  }
}
// The floor of update: a flat map of the joined key paths, as in bench_ops.
template <td::TensorDict (*Make)(benchmark::State&)>
void update_floor(benchmark::State& state) {
  std::unordered_map<std::string, torch::Tensor> dest, src;
  const td::TensorDict made = Make(state);
  for (auto& [k, v] : made.items(true, true)) {
    dest[k.join(".")] = v.tensor();
    src[k.join(".")] = v.tensor();
  }
  for (auto _ : state) {
    for (auto& [k, v] : src) dest[k] = v;
    benchmark::DoNotOptimize(dest);
  }
}

template <td::TensorDict (*Make)(benchmark::State&)>
void stack64_scaled_td(benchmark::State& state) {
  stack64_td(state, Make(state));
}
template <td::TensorDict (*Make)(benchmark::State&)>
void stack64_scaled_floor(benchmark::State& state) {
  stack64_floor(state, leaves_of(Make(state)));
}

// ---- memory per leaf --------------------------------------------------------------------
// Building a tensordict of 10,000 leaves from tensors made beforehand; the
// counters are the heap bytes (mallinfo2) and resident bytes (/proc/self/statm)
// the container adds per leaf, measured once on fresh builds kept alive. The
// floor is an std::unordered_map of the same keys and tensors.

constexpr int64_t kMemoryLeaves = 10'000;

const std::vector<torch::Tensor>& memory_leaves() {
  static const std::vector<torch::Tensor> leaves = [] {
    std::vector<torch::Tensor> out;
    for (int64_t i = 0; i < kMemoryLeaves; ++i) out.push_back(torch::zeros({4}));
    return out;
  }();
  return leaves;
}
const std::vector<std::string>& memory_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (int64_t i = 0; i < kMemoryLeaves; ++i) out.push_back("leaf" + std::to_string(i));
    return out;
  }();
  return keys;
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// 10 containers built and kept, so that memory freed earlier and reused counts
// less (as the Python row does).
constexpr int kMemoryCopies = 10;

template <class Build>
void leaf_memory(benchmark::State& state, Build build) {
  (void)memory_leaves();
  (void)memory_keys();
  malloc_trim(0);
  const int64_t heap0 = static_cast<int64_t>(mallinfo2().uordblks), rss0 = resident_bytes();
  {
    std::vector<decltype(build())> kept;
    kept.reserve(kMemoryCopies);
    for (int c = 0; c < kMemoryCopies; ++c) kept.push_back(build());
    const int64_t heap1 = static_cast<int64_t>(mallinfo2().uordblks), rss1 = resident_bytes();
    const double leaves = static_cast<double>(kMemoryLeaves) * kMemoryCopies;
    state.counters["heap_bytes_per_leaf"] = static_cast<double>(heap1 - heap0) / leaves;
    state.counters["rss_bytes_per_leaf"] = static_cast<double>(rss1 - rss0) / leaves;
    benchmark::DoNotOptimize(kept);
  }
  for (auto _ : state) {
    auto r = build();
    benchmark::DoNotOptimize(r);
  }
}
void BM_leaf_memory_10k_td(benchmark::State& state) {
  leaf_memory(state, [] {
    const auto& leaves = memory_leaves();
    const auto& keys = memory_keys();
    td::TensorDict out(std::vector<int64_t>{4});
    for (int64_t i = 0; i < kMemoryLeaves; ++i) out.set(keys[i], leaves[i]);
    return out;
  });
}
void BM_leaf_memory_10k_floor(benchmark::State& state) {
  leaf_memory(state, [] {
    const auto& leaves = memory_leaves();
    const auto& keys = memory_keys();
    std::unordered_map<std::string, torch::Tensor> out;
    for (int64_t i = 0; i < kMemoryLeaves; ++i) out.emplace(keys[i], leaves[i]);
    return out;
  });
}

void register_all() {
  const NamedBench benchmarks[] = {
      {"BM_to_float64/tensordict", BM_to_float64_td},
      {"BM_to_float64/floor", BM_to_float64_floor},
      {"BM_consolidate/tensordict", BM_consolidate_td},
      {"BM_consolidate/floor", BM_consolidate_floor},
      {"BM_from_consolidated/tensordict", BM_from_consolidated_td},
      {"BM_from_consolidated/floor", BM_from_consolidated_floor},
      {"BM_state_dict_save/tensordict", BM_state_dict_save_td},
      {"BM_state_dict_save/floor", BM_state_dict_save_floor},
      {"BM_state_dict_load/tensordict", BM_state_dict_load_td},
      {"BM_state_dict_load/floor", BM_state_dict_load_floor},
      {"BM_index_int_flat/tensordict", BM_index_int_flat_td},
      {"BM_index_int_flat/floor", BM_index_int_flat_floor},
      {"BM_index_long256_flat/tensordict", BM_index_long256_flat_td},
      {"BM_index_long256_flat/floor", BM_index_long256_flat_floor},
      {"BM_stack64_flat/tensordict", BM_stack64_flat_td},
      {"BM_stack64_flat/floor", BM_stack64_flat_floor},
      {"BM_leaf_memory_10k/tensordict", BM_leaf_memory_10k_td},
      {"BM_leaf_memory_10k/floor", BM_leaf_memory_10k_floor},
  };
  register_min_time(benchmarks, kMinTime);
  const NamedBench leaves[] = {
      {"BM_index_int_leaves/tensordict", index_int_td<leaves_td>},
      {"BM_index_int_leaves/floor", index_int_floor<leaves_td>},
      {"BM_update_leaves/tensordict", update_td<leaves_td>},
      {"BM_update_leaves/floor", update_floor<leaves_td>},
      {"BM_stack64_leaves/tensordict", stack64_scaled_td<leaves_td>},
      {"BM_stack64_leaves/floor", stack64_scaled_floor<leaves_td>},
  };
  for (const auto& [name, fn] : leaves)
    run_length(benchmark::RegisterBenchmark(name, fn)->Arg(10)->Arg(100)->Arg(1000), kMinTime);
  const NamedBench depth[] = {
      {"BM_index_int_depth/tensordict", index_int_td<depth_td>},
      {"BM_index_int_depth/floor", index_int_floor<depth_td>},
      {"BM_update_depth/tensordict", update_td<depth_td>},
      {"BM_update_depth/floor", update_floor<depth_td>},
      {"BM_stack64_depth/tensordict", stack64_scaled_td<depth_td>},
      {"BM_stack64_depth/floor", stack64_scaled_floor<depth_td>},
  };
  for (const auto& [name, fn] : depth)
    run_length(benchmark::RegisterBenchmark(name, fn)->Arg(1)->Arg(3)->Arg(8), kMinTime);
}

}  // namespace

int main(int argc, char** argv) {
  int rc = run_benchmarks(argc, argv, register_all);
  fs::remove_all(bench_dir());
  return rc;
}
