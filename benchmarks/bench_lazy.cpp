// Lazy stacks: get and index on a lazy stack of 64 members (batch 100 each,
// 3 leaves, one of them nested), next to the floor: the same work written as a
// loop over the members' raw tensors. Naming as in bench_core.cpp.
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"

#include <vector>

namespace td = tensordict;
using namespace torch::indexing;

namespace {

constexpr int64_t kMembers = 64;
constexpr int64_t kRows = 100;
constexpr double kMinTime = 0.2;

struct Data {
  std::vector<td::TensorDictBase> members;
  td::LazyStackedTensorDict stack{std::vector<td::TensorDictBase>{td::TensorDict()}};
  // The floor's data: per member, its leaves as raw tensors (obs, reward, next.obs).
  std::vector<std::vector<torch::Tensor>> raw;
  Data() {
    for (int64_t m = 0; m < kMembers; ++m) {
      td::TensorDict t(std::vector<int64_t>{kRows});
      t.set("obs", torch::randn({kRows, 8}));
      t.set("reward", torch::randn({kRows, 1}));
      t.set({"next", "obs"}, torch::randn({kRows, 8}));
      members.push_back(t);
      raw.push_back({t.get("obs"), t.get("reward"), t.get({"next", "obs"})});
    }
    stack = td::lazy_stack(members);
  }
};
Data& data() {
  static Data d;
  return d;
}

// ---- get: a leaf stacked from every member ------------------------------------------

void lazy_get_td(benchmark::State& state, const td::NestedKey& key) {
  auto& d = data();
  for (auto _ : state) {
    torch::Tensor t = d.stack.get(key);
    benchmark::DoNotOptimize(t);
  }
}
// `leaf`: the key's position in Data::raw.
void lazy_get_floor(benchmark::State& state, std::size_t leaf) {
  auto& d = data();
  std::vector<torch::Tensor> leaves(kMembers);
  for (auto _ : state) {
    for (int64_t m = 0; m < kMembers; ++m) leaves[m] = d.raw[m][leaf];
    torch::Tensor t = torch::stack(leaves);
    benchmark::DoNotOptimize(t);
  }
}
void BM_lazy_get_td(benchmark::State& state) { lazy_get_td(state, "obs"); }
void BM_lazy_get_floor(benchmark::State& state) { lazy_get_floor(state, 0); }
void BM_lazy_get_nested_td(benchmark::State& state) { lazy_get_td(state, {"next", "obs"}); }
void BM_lazy_get_nested_floor(benchmark::State& state) { lazy_get_floor(state, 2); }

// ---- index: a row of every member (the result is a lazy stack) -------------------------

void BM_lazy_index_row_td(benchmark::State& state) {
  auto& d = data();
  int64_t i = 0;
  for (auto _ : state) {
    td::TensorDictBase r = d.stack.index({Slice(), i++ % kRows});
    benchmark::DoNotOptimize(r);
  }
}
void BM_lazy_index_row_floor(benchmark::State& state) {
  auto& d = data();
  int64_t i = 0;
  std::vector<std::vector<torch::Tensor>> out(kMembers, std::vector<torch::Tensor>(3));
  for (auto _ : state) {
    int64_t k = i++ % kRows;
    for (int64_t m = 0; m < kMembers; ++m)
      for (std::size_t l = 0; l < 3; ++l) out[m][l] = d.raw[m][l].select(0, k);
    benchmark::DoNotOptimize(out);
  }
}

// ---- index: members selected by an index tensor (no data touched) -----------------------

torch::Tensor member_idx() {
  static torch::Tensor idx = torch::randint(0, kMembers, {32}, torch::kLong);
  return idx;
}

void BM_lazy_index_members_td(benchmark::State& state) {
  auto& d = data();
  auto idx = member_idx();
  for (auto _ : state) {
    td::TensorDictBase r = d.stack.index({idx});
    benchmark::DoNotOptimize(r);
  }
}
void BM_lazy_index_members_floor(benchmark::State& state) {
  auto& d = data();
  auto idx = member_idx();
  std::vector<std::vector<torch::Tensor>*> out(32);
  for (auto _ : state) {
    auto acc = idx.accessor<int64_t, 1>();
    for (int64_t j = 0; j < idx.size(0); ++j) out[j] = &d.raw[acc[j]];
    benchmark::DoNotOptimize(out);
  }
}

// ---- index: one member (the member itself) ---------------------------------------------

void BM_lazy_index_member_td(benchmark::State& state) {
  auto& d = data();
  int64_t i = 0;
  for (auto _ : state) {
    td::TensorDictBase r = d.stack[i++ % kMembers];
    benchmark::DoNotOptimize(r);
  }
}
void BM_lazy_index_member_floor(benchmark::State& state) {
  auto& d = data();
  int64_t i = 0;
  for (auto _ : state) {
    td::TensorDictBase r = d.members[i++ % kMembers];
    benchmark::DoNotOptimize(r);
  }
}

void register_all() {
  const NamedBench benchmarks[] = {
      {"BM_lazy_get/tensordict", BM_lazy_get_td},
      {"BM_lazy_get/floor", BM_lazy_get_floor},
      {"BM_lazy_get_nested/tensordict", BM_lazy_get_nested_td},
      {"BM_lazy_get_nested/floor", BM_lazy_get_nested_floor},
      {"BM_lazy_index_row/tensordict", BM_lazy_index_row_td},
      {"BM_lazy_index_row/floor", BM_lazy_index_row_floor},
      {"BM_lazy_index_members/tensordict", BM_lazy_index_members_td},
      {"BM_lazy_index_members/floor", BM_lazy_index_members_floor},
      {"BM_lazy_index_member/tensordict", BM_lazy_index_member_td},
      {"BM_lazy_index_member/floor", BM_lazy_index_member_floor},
  };
  register_min_time(benchmarks, kMinTime);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
