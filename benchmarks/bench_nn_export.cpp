// Models exported from Python, driven through tensordicts, each next to its
// floor: the same call written by hand (tensors taken from the tensordict,
// the IValues or the input vector built by hand, the model called, the
// outputs set back under their keys). The ratio is what the tensordict layer
// (key handling, dict typing, the pytree order, the input checks) adds.
//
// The models come from tests/nn/python/make_models.py, run before this binary
// into the directory TENSORDICT_NN_MODELS names (scripts/benchmark-report.sh
// does both): the policy of examples/policy/export_policy.py (observation
// float[B, 4] -> action, ("policy", "logits")) as TorchScript and as an
// AOTInductor package, and a traced MLP (float[B, 3] -> float[B, 2]). B = 32.
//
// Naming (read by benchmarks/run.py): BM_<op>/floor and BM_<op>/tensordict.
#include <benchmark/benchmark.h>
#include <tensordict/nn/aoti_module.h>
#include <tensordict/nn/script_module.h>
#include <tensordict/tensordict.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>
#include "bench_main.h"

#ifdef TENSORDICT_HAVE_AOTI
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace td = tensordict;
namespace tdnn = tensordict::nn;

namespace {

constexpr double kMinTime = 0.3;
constexpr int64_t kBatch = 32;

std::string model_path(const char* file) {
  const char* dir = std::getenv("TENSORDICT_NN_MODELS");
  if (dir == nullptr || *dir == '\0') {
    std::fprintf(stderr,
                 "bench_nn_export: set TENSORDICT_NN_MODELS to a directory written by "
                 "tests/nn/python/make_models.py\n");
    std::exit(2);
  }
  return std::string(dir) + "/" + file;
}

// The TorchScript executor profiles and optimizes a graph in its first runs:
// both variants run the model this many times before they are timed.
constexpr int kWarmup = 20;

// Times `call` after the warm-up. Each call_* below is one call of a variant,
// kept out of line so that callgrind can count its instructions: under
// `valgrind --tool=callgrind --collect-atstart=no` only the timed loops are
// counted (the TorchScript executor's one-time optimization is not), and
// call_*'s inclusive count over its number of calls is a call's cost.
template <class Call>
void time_calls(benchmark::State& state, td::TensorDict& data, Call&& call) {
  for (int i = 0; i < kWarmup; ++i) call();
  CALLGRIND_TOGGLE_COLLECT;
  for (auto _ : state) {
    call();
    benchmark::DoNotOptimize(data);
  }
  CALLGRIND_TOGGLE_COLLECT;
}

td::TensorDict policy_input() {
  return td::TensorDict({{"observation", torch::randn({kBatch, 4})}}, {kBatch});
}

// ---- TorchScript, positional: traced MLP, "obs" -> "logits" -------------------

[[gnu::noinline]] void call_script_positional_tensordict(tdnn::ScriptTensorDictModule& module,
                                                         td::TensorDict& data) {
  module.forward(data);
}

[[gnu::noinline]] void call_script_positional_floor(torch::jit::Module& module,
                                                    td::TensorDict& data) {
  std::vector<c10::IValue> args{data.get("obs")};
  data.set("logits", module.forward(std::move(args)).toTensor());
}

void BM_script_positional_tensordict(benchmark::State& state) {
  auto module = tdnn::ScriptTensorDictModule::load(model_path("mlp_traced.pt"),
                                                   tdnn::PositionalCall{{"obs"}, {"logits"}});
  td::TensorDict data({{"obs", torch::randn({kBatch, 3})}}, {kBatch});
  torch::NoGradGuard no_grad;
  time_calls(state, data, [&] { call_script_positional_tensordict(*module, data); });
}

void BM_script_positional_floor(benchmark::State& state) {
  auto module = torch::jit::load(model_path("mlp_traced.pt"));
  td::TensorDict data({{"obs", torch::randn({kBatch, 3})}}, {kBatch});
  torch::NoGradGuard no_grad;
  time_calls(state, data, [&] { call_script_positional_floor(module, data); });
}

// ---- TorchScript, Dict[str, Tensor]: the policy, flat names ----------------------

[[gnu::noinline]] void call_script_dict_tensordict(tdnn::ScriptTensorDictModule& module,
                                                   td::TensorDict& data) {
  module.forward(data);
}

[[gnu::noinline]] void call_script_dict_floor(torch::jit::Module& module, td::TensorDict& data) {
  c10::impl::GenericDict inputs(c10::StringType::get(), c10::TensorType::get());
  inputs.insert("observation", data.get("observation"));
  std::vector<c10::IValue> args;
  args.emplace_back(std::move(inputs));
  auto outputs = module.forward(args).toGenericDict();
  data.set("action", outputs.at("action").toTensor());
  data.set({"policy", "logits"}, outputs.at("policy.logits").toTensor());
}

void BM_script_dict_tensordict(benchmark::State& state) {
  auto module = tdnn::ScriptTensorDictModule::load(
      model_path("policy_scripted.pt"),
      tdnn::DictCall{
          {"observation"}, tdnn::KeyLayout::flattened("."), {"action", {"policy", "logits"}}});
  auto data = policy_input();
  torch::NoGradGuard no_grad;
  time_calls(state, data, [&] { call_script_dict_tensordict(*module, data); });
}

void BM_script_dict_floor(benchmark::State& state) {
  auto module = torch::jit::load(model_path("policy_scripted.pt"));
  auto data = policy_input();
  torch::NoGradGuard no_grad;
  time_calls(state, data, [&] { call_script_dict_floor(module, data); });
}

#ifdef TENSORDICT_HAVE_AOTI
// ---- AOTInductor package: the policy, nested dict out -----------------------------

[[gnu::noinline]] void call_aoti_dict_tensordict(tdnn::AOTITensorDictModule& module,
                                                 td::TensorDict& data) {
  module.forward(data);
}

[[gnu::noinline]] void call_aoti_dict_floor(torch::inductor::AOTIModelPackageLoader& loader,
                                            td::TensorDict& data) {
  std::vector<at::Tensor> inputs{data.get("observation")};
  auto outputs = loader.boxed_run(std::move(inputs));
  data.set("action", outputs[0]);
  data.set({"policy", "logits"}, std::move(outputs[1]));
}

void BM_aoti_dict_tensordict(benchmark::State& state) {
  tdnn::AOTITensorDictModule module(model_path("policy.pt2"),
                                    tdnn::DictCall{{}, tdnn::KeyLayout::nested()});
  auto data = policy_input();
  time_calls(state, data, [&] { call_aoti_dict_tensordict(module, data); });
}

void BM_aoti_dict_floor(benchmark::State& state) {
  torch::inductor::AOTIModelPackageLoader loader(model_path("policy.pt2"));
  auto data = policy_input();
  time_calls(state, data, [&] { call_aoti_dict_floor(loader, data); });
}
#endif

void register_all() {
  // One intra-op thread: a model this small gains nothing from more, and on a
  // shared machine the pool's waits would be most of what is measured.
  torch::set_num_threads(1);
  const NamedBench benchmarks[] = {
      {"BM_script_positional/tensordict", BM_script_positional_tensordict},
      {"BM_script_positional/floor", BM_script_positional_floor},
      {"BM_script_dict/tensordict", BM_script_dict_tensordict},
      {"BM_script_dict/floor", BM_script_dict_floor},
#ifdef TENSORDICT_HAVE_AOTI
      {"BM_aoti_dict/tensordict", BM_aoti_dict_tensordict},
      {"BM_aoti_dict/floor", BM_aoti_dict_floor},
#endif
  };
  register_min_time(benchmarks, kMinTime);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
