// tensordict::nn next to the same work by hand: a TensorDictModule over a
// small MLP (64-64-2, batch 32) against `module->forward(td.get(k))` plus
// `td.set(...)`, a TensorDictSequential of two modules against the two calls
// by hand, and lerp_ over the parameters of a 10-layer MLP (the soft update
// of a target network) against at::_foreach_lerp_ over a vector of the same
// tensors. The module calls run without autograd (an actor's inference); the
// per-call cost of the wrapper is what the ratio shows. Naming as in
// bench_core.cpp: BM_<op>/<variant>.
#include <benchmark/benchmark.h>
#include <tensordict/module.h>
#include <tensordict/nn/sequential.h>
#include <tensordict/nn/tensor_dict_module.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include <torch/version.h>
#include "bench_main.h"

#include <memory>
#include <vector>

namespace td = tensordict;
using td::nn::TensorDictModule;
using td::nn::TensorDictSequential;
using Keys = std::vector<td::NestedKey>;

namespace {

constexpr int64_t kBatch = 32;
constexpr double kMinTime = 0.3;

torch::nn::Sequential mlp() {
  return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 2));
}

td::TensorDict observation() {
  return td::TensorDict({{"observation", torch::randn({kBatch, 64})}}, {kBatch});
}

// ---- one module ------------------------------------------------------------------

void BM_module_mlp_td(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto net = mlp();
  auto module = std::make_shared<TensorDictModule>(net, Keys{"observation"}, Keys{"action_value"});
  auto data = observation();
  for (auto _ : state) {
    (*module)(data);
    benchmark::DoNotOptimize(data);
  }
}
void BM_module_mlp_floor(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto net = mlp();
  auto data = observation();
  for (auto _ : state) {
    data.set("action_value", net->forward(data.get("observation")));
    benchmark::DoNotOptimize(data);
  }
}

// ---- two modules in sequence ------------------------------------------------------

void BM_sequential2_td(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto encoder = torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU());
  auto head = torch::nn::Linear(64, 2);
  TensorDictSequential seq(
      {std::make_shared<TensorDictModule>(encoder, Keys{"observation"}, Keys{"hidden"}),
       std::make_shared<TensorDictModule>(head, Keys{"hidden"}, Keys{"action_value"})});
  auto data = observation();
  for (auto _ : state) {
    seq(data);
    benchmark::DoNotOptimize(data);
  }
}
void BM_sequential2_floor(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto encoder = torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU());
  auto head = torch::nn::Linear(64, 2);
  auto data = observation();
  for (auto _ : state) {
    data.set("hidden", encoder->forward(data.get("observation")));
    data.set("action_value", head->forward(data.get("hidden")));
    benchmark::DoNotOptimize(data);
  }
}

// ---- soft update of a target network's parameters --------------------------------

// 10 Linear(64, 64) layers: 20 parameter leaves, nested one level.
torch::nn::Sequential deep_mlp() {
  torch::nn::Sequential net;
  for (int i = 0; i < 10; ++i) net->push_back(torch::nn::Linear(64, 64));
  return net;
}

struct Params {
  td::TensorDict online = td::from_module(*deep_mlp());
  td::TensorDict target = td::from_module(*deep_mlp());
  std::vector<at::Tensor> online_raw, target_raw;
  Params() {
    for (auto& v : online.values(true, true)) online_raw.push_back(v.tensor());
    for (auto& v : target.values(true, true)) target_raw.push_back(v.tensor());
  }
};
Params& params() {
  static Params p;
  return p;
}

void BM_lerp_params_td(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto& p = params();
  for (auto _ : state) {
    p.target.lerp_(p.online, 0.005);
    benchmark::DoNotOptimize(p.target);
  }
}
void BM_lerp_params_floor(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto& p = params();
  for (auto _ : state) {
#if TORCH_VERSION_MAJOR >= 2
    at::_foreach_lerp_(p.target_raw, p.online_raw, 0.005);
#else  // LibTorch 1.13 has no fused lerp
    for (std::size_t i = 0; i < p.target_raw.size(); ++i)
      p.target_raw[i].lerp_(p.online_raw[i], 0.005);
#endif
    benchmark::DoNotOptimize(p.target_raw);
  }
}
// The leaf-by-leaf loop lerp_ replaces, for scale.
void BM_lerp_params_loop(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto& p = params();
  for (auto _ : state) {
    for (std::size_t i = 0; i < p.target_raw.size(); ++i)
      p.target_raw[i].lerp_(p.online_raw[i], 0.005);
    benchmark::DoNotOptimize(p.target_raw);
  }
}

void register_all() {
  // One intra-op thread: tensors this small gain nothing from more, and on a
  // shared 2-core machine OpenMP's waiting threads would measure the load of
  // the machine rather than the wrapper (an actor thread runs this way too).
  at::set_num_threads(1);
  const NamedBench benchmarks[] = {
      {"BM_module_mlp/tensordict", BM_module_mlp_td},
      {"BM_module_mlp/floor", BM_module_mlp_floor},
      {"BM_sequential2/tensordict", BM_sequential2_td},
      {"BM_sequential2/floor", BM_sequential2_floor},
      {"BM_lerp_params/tensordict", BM_lerp_params_td},
      {"BM_lerp_params/floor", BM_lerp_params_floor},
      {"BM_lerp_params/leaf_loop", BM_lerp_params_loop},
  };
  register_min_time(benchmarks, kMinTime);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
