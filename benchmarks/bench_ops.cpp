// Tensor-like operations on a tensordict of 10 leaves nested 2 levels with
// batch 100,000, each next to its floor: the same op applied leaf by leaf by
// hand on raw tensors. Each floor iteration builds a fresh result container
// and drops it at the end, as the tensordict result is dropped: otherwise the
// two would free their results at different times and measure the allocator
// (a floor that kept last iteration's results alive ran 2-5x faster on the
// 10 MB apply and 3x slower on clone). Naming as in bench_core.cpp: BM_<op>/<variant>.
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"

#include <vector>

namespace td = tensordict;
using namespace torch::indexing;

namespace {

constexpr int64_t kBatch = 100'000;
constexpr double kMinTime = 0.2;

// 4 leaves at the root, 3 under "nested", 3 under ("nested", "deeper").
td::TensorDict make_td() {
  td::TensorDict out(std::vector<int64_t>{kBatch});
  out.set("obs", torch::randn({kBatch, 8}));
  out.set("action", torch::randn({kBatch, 4}));
  out.set("reward", torch::randn({kBatch, 1}));
  out.set("done", torch::zeros({kBatch, 1}, torch::kBool));
  out.set({"nested", "a"}, torch::randn({kBatch, 3}));
  out.set({"nested", "b"}, torch::randint(0, 10, {kBatch}, torch::kLong));
  out.set({"nested", "c"}, torch::randn({kBatch, 2, 2}));
  out.set({"nested", "deeper", "x"}, torch::randn({kBatch, 5}));
  out.set({"nested", "deeper", "y"}, torch::randn({kBatch}));
  out.set({"nested", "deeper", "z"}, torch::randint(0, 255, {kBatch, 3}, torch::kUInt8));
  return out;
}

// The floor's data: the same 10 tensors in a flat vector.
std::vector<torch::Tensor> leaves_of(const td::TensorDict& data) {
  std::vector<torch::Tensor> out;
  for (auto& v : data.values(true, true)) out.push_back(v.tensor());
  return out;
}

struct Data {
  td::TensorDict td = make_td();
  std::vector<torch::Tensor> raw = leaves_of(td);
};
Data& data() {
  static Data d;
  return d;
}

void BM_index_int_td(benchmark::State& state) {
  auto& d = data();
  int64_t i = 0;
  for (auto _ : state) {
    td::TensorDict r = d.td[i++ % kBatch];
    benchmark::DoNotOptimize(r);
  }
}
void BM_index_int_floor(benchmark::State& state) {
  auto& d = data();
  int64_t i = 0;
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    int64_t k = i++ % kBatch;
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j].select(0, k);
    benchmark::DoNotOptimize(out);
  }
}

void BM_index_slice_td(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    td::TensorDict r = d.td.index({Slice(100, 1100)});
    benchmark::DoNotOptimize(r);
  }
}
void BM_index_slice_floor(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j].slice(0, 100, 1100);
    benchmark::DoNotOptimize(out);
  }
}

torch::Tensor sample_idx() {
  static torch::Tensor idx = torch::randint(0, kBatch, {256}, torch::kLong);
  return idx;
}

void BM_index_long_td(benchmark::State& state) {
  auto& d = data();
  auto idx = sample_idx();
  for (auto _ : state) {
    td::TensorDict r = d.td.index({idx});
    benchmark::DoNotOptimize(r);
  }
}
void BM_index_long_floor(benchmark::State& state) {
  auto& d = data();
  auto idx = sample_idx();
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j].index_select(0, idx);
    benchmark::DoNotOptimize(out);
  }
}

torch::Tensor sample_mask() {
  static torch::Tensor mask = torch::rand({kBatch}) < 0.01;  // ~1,000 rows
  return mask;
}

void BM_index_mask_td(benchmark::State& state) {
  auto& d = data();
  auto mask = sample_mask();
  for (auto _ : state) {
    td::TensorDict r = d.td.index({mask});
    benchmark::DoNotOptimize(r);
  }
}
void BM_index_mask_floor(benchmark::State& state) {
  auto& d = data();
  auto mask = sample_mask();
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    auto idx = mask.nonzero().squeeze(1);  // the mask converted once
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j].index_select(0, idx);
    benchmark::DoNotOptimize(out);
  }
}

void BM_index_put_int_td(benchmark::State& state) {
  auto& d = data();
  td::TensorDictBase row = d.td[0].clone();
  int64_t i = 0;
  for (auto _ : state) {
    d.td.index_put_({i++ % kBatch}, row);
  }
}
void BM_index_put_int_floor(benchmark::State& state) {
  auto& d = data();
  std::vector<torch::Tensor> row;
  for (auto& t : d.raw) row.push_back(t[0].clone());
  int64_t i = 0;
  for (auto _ : state) {
    int64_t k = i++ % kBatch;
    for (std::size_t j = 0; j < d.raw.size(); ++j) d.raw[j].select(0, k).copy_(row[j]);
  }
}

std::vector<td::TensorDictBase> rows64(const td::TensorDict& src) {
  std::vector<td::TensorDictBase> out;
  for (int64_t i = 0; i < 64; ++i) out.push_back(src[i * 7]);
  return out;
}

void BM_stack64_td(benchmark::State& state) {
  auto rows = rows64(data().td);
  for (auto _ : state) {
    td::TensorDict r = td::stack(rows, 0);
    benchmark::DoNotOptimize(r);
  }
}
// The floor of stack/cat keeps each part as its own list of leaves (what
// hand-written code would hold) and gathers the per-leaf lists inside the
// timed loop, as the tensordict has to.
template <class Combine>
void combine_floor(benchmark::State& state, const std::vector<td::TensorDictBase>& inputs,
                   Combine combine) {
  std::vector<std::vector<torch::Tensor>> parts;
  parts.reserve(inputs.size());
  for (auto& p : inputs) parts.push_back(leaves_of(td::TensorDict(p.node_ptr())));
  std::vector<torch::Tensor> per_leaf;
  for (auto _ : state) {
    std::vector<torch::Tensor> out(parts[0].size());
    for (std::size_t j = 0; j < out.size(); ++j) {
      per_leaf.clear();
      for (auto& p : parts) per_leaf.push_back(p[j]);
      out[j] = combine(per_leaf);
    }
    benchmark::DoNotOptimize(out);
  }
}

void BM_stack64_floor(benchmark::State& state) {
  combine_floor(state, rows64(data().td),
                [](const std::vector<torch::Tensor>& l) { return torch::stack(l, 0); });
}

std::vector<td::TensorDictBase> slices64(const td::TensorDict& src) {
  std::vector<td::TensorDictBase> out;
  for (int64_t i = 0; i < 64; ++i) out.push_back(src.index({Slice(i * 16, i * 16 + 16)}));
  return out;
}

void BM_cat64_td(benchmark::State& state) {
  auto parts = slices64(data().td);
  for (auto _ : state) {
    td::TensorDict r = td::cat(parts, 0);
    benchmark::DoNotOptimize(r);
  }
}
void BM_cat64_floor(benchmark::State& state) {
  combine_floor(state, slices64(data().td),
                [](const std::vector<torch::Tensor>& l) { return torch::cat(l, 0); });
}

void BM_apply_td(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    td::TensorDictBase r = d.td.apply([](const torch::Tensor& t) { return t * 2; });
    benchmark::DoNotOptimize(r);
  }
}
void BM_apply_floor(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j] * 2;
    benchmark::DoNotOptimize(out);
  }
}

void BM_clone_td(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    td::TensorDictBase r = d.td.clone();
    benchmark::DoNotOptimize(r);
  }
}
void BM_clone_floor(benchmark::State& state) {
  auto& d = data();
  for (auto _ : state) {
    std::vector<torch::Tensor> out(d.raw.size());
    for (std::size_t j = 0; j < d.raw.size(); ++j) out[j] = d.raw[j].clone();
    benchmark::DoNotOptimize(out);
  }
}

void BM_update_td(benchmark::State& state) {
  auto& d = data();
  td::TensorDictBase dest = d.td.copy();
  td::TensorDictBase src = d.td.copy();
  for (auto _ : state) {
    dest.update(src);
    benchmark::DoNotOptimize(dest);
  }
}
void BM_update_floor(benchmark::State& state) {
  auto& d = data();
  std::unordered_map<std::string, torch::Tensor> dest, src;
  int j = 0;
  for (auto& t : d.raw) {
    dest["k" + std::to_string(j)] = t;
    src["k" + std::to_string(j++)] = t;
  }
  for (auto _ : state) {
    for (auto& [k, v] : src) dest[k] = v;
    benchmark::DoNotOptimize(dest);
  }
}

void register_all() {
  const NamedBench benchmarks[] = {
      {"BM_index_int/tensordict", BM_index_int_td},
      {"BM_index_int/floor", BM_index_int_floor},
      {"BM_index_slice/tensordict", BM_index_slice_td},
      {"BM_index_slice/floor", BM_index_slice_floor},
      {"BM_index_long256/tensordict", BM_index_long_td},
      {"BM_index_long256/floor", BM_index_long_floor},
      {"BM_index_mask/tensordict", BM_index_mask_td},
      {"BM_index_mask/floor", BM_index_mask_floor},
      {"BM_index_put_int/tensordict", BM_index_put_int_td},
      {"BM_index_put_int/floor", BM_index_put_int_floor},
      {"BM_stack64/tensordict", BM_stack64_td},
      {"BM_stack64/floor", BM_stack64_floor},
      {"BM_cat64/tensordict", BM_cat64_td},
      {"BM_cat64/floor", BM_cat64_floor},
      {"BM_apply_mul2/tensordict", BM_apply_td},
      {"BM_apply_mul2/floor", BM_apply_floor},
      {"BM_clone/tensordict", BM_clone_td},
      {"BM_clone/floor", BM_clone_floor},
      {"BM_update/tensordict", BM_update_td},
      {"BM_update/floor", BM_update_floor},
  };
  register_min_time(benchmarks, kMinTime);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
