// Container overhead of the in-memory TensorDict, each operation next to its
// floor: the same work written by hand with standard maps of torch::Tensor.
//
// Naming (read by benchmarks/run.py): BM_<op>/<variant>, where the variant is
// "floor" for the hand-written baseline and anything else ("tensordict",
// "tensordict_for_each", ...) for a tensordict implementation of the same op.
// run.py divides every variant's time by the floor of the same op.
//
// The leaves are small ([4, 3] floats) so that what is measured is the
// container, not the tensor math. Every benchmark keeps its result alive with
// benchmark::DoNotOptimize.
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>
#include <tensordict/typed_tensor_dict.h>
#include <torch/torch.h>
#include "bench_main.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace td = tensordict;

namespace {

using FlatMap = std::unordered_map<std::string, torch::Tensor>;
using NestedMap = std::unordered_map<std::string, FlatMap>;

constexpr double kMinTime = 0.2;  // seconds per benchmark; the binary runs in ~5 s

// Representative RL keys (names of varied lengths, as in TorchRL).
const std::vector<std::string> kFlatKeys = {"observation", "action",         "reward",     "done",
                                            "terminated",  "truncated",      "step_count", "pixels",
                                            "state_value", "sample_log_prob"};
const std::vector<std::string> kTopKeys = {"observation", "action",     "done",  "terminated",
                                           "truncated",   "step_count", "pixels"};
const std::vector<std::string> kNextKeys = {"observation", "reward", "done"};
// Worst case for a level that is scanned linearly: every top-level key has the
// length of "next" and "next" comes last, so each comparison reaches memcmp.
const std::vector<std::string> kSameLengthTopKeys = {"key0", "key1", "key2", "key3",
                                                     "key4", "key5", "key6"};

torch::Tensor small_leaf() { return torch::randn({4, 3}); }

// 10 leaves of shape [4, 3], batch size [4].
td::TensorDict make_flat_td() {
  td::TensorDict out(std::vector<int64_t>{4});
  for (const auto& k : kFlatKeys) out.set(k, small_leaf());
  return out;
}

FlatMap make_flat_map() {
  FlatMap out;
  for (const auto& k : kFlatKeys) out.emplace(k, small_leaf());
  return out;
}

// 10 leaves in total: 7 at the top level, then "next" with 3 (one is "reward").
td::TensorDict make_nested_td(const std::vector<std::string>& top) {
  td::TensorDict out(std::vector<int64_t>{4});
  for (const auto& k : top) out.set(k, small_leaf());
  for (const auto& k : kNextKeys) out.set({"next", k}, small_leaf());
  return out;
}

// The same tree as raw nested maps: "" holds the top-level leaves.
NestedMap make_nested_map(const std::vector<std::string>& top) {
  NestedMap out;
  for (const auto& k : top) out[""].emplace(k, small_leaf());
  for (const auto& k : kNextKeys) out["next"].emplace(k, small_leaf());
  return out;
}

// ---- typed accessor: its floor is the untyped get of the same key -------------

struct Flat : td::TypedTensorDict<Flat> {
  TENSORDICT_FIELDS(observation, action, reward, done, terminated, truncated, step_count, pixels,
                    state_value, sample_log_prob);
};

void BM_typed_get_typed(benchmark::State& state) {
  Flat data = Flat::from_tensordict(make_flat_td());
  for (auto _ : state) {
    torch::Tensor t = data.terminated();
    benchmark::DoNotOptimize(t);
  }
}
void BM_typed_get_floor(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  for (auto _ : state) {
    torch::Tensor t = data.get("terminated");
    benchmark::DoNotOptimize(t);
  }
}

// ---- get: one-level key ------------------------------------------------------

void BM_get_tensordict(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  for (auto _ : state) {
    torch::Tensor t = data.get("terminated");
    benchmark::DoNotOptimize(t);
  }
}

void BM_get_floor(benchmark::State& state) {
  FlatMap data = make_flat_map();
  benchmark::DoNotOptimize(data);  // escapes: lookups cannot be hoisted
  for (auto _ : state) {
    torch::Tensor t = data.at("terminated");
    benchmark::DoNotOptimize(t);
  }
}

// ---- nested get: two-level key -------------------------------------------------

void nested_get_tensordict(benchmark::State& state, const std::vector<std::string>& top) {
  td::TensorDict data = make_nested_td(top);
  for (auto _ : state) {
    torch::Tensor t = data.get({"next", "reward"});
    benchmark::DoNotOptimize(t);
  }
}

void nested_get_floor(benchmark::State& state, const std::vector<std::string>& top) {
  NestedMap data = make_nested_map(top);
  benchmark::DoNotOptimize(data);  // escapes: lookups cannot be hoisted
  for (auto _ : state) {
    torch::Tensor t = data.at("next").at("reward");
    benchmark::DoNotOptimize(t);
  }
}

void BM_nested_get_tensordict(benchmark::State& state) { nested_get_tensordict(state, kTopKeys); }
void BM_nested_get_floor(benchmark::State& state) { nested_get_floor(state, kTopKeys); }
void BM_nested_get_same_length_keys_tensordict(benchmark::State& state) {
  nested_get_tensordict(state, kSameLengthTopKeys);
}
void BM_nested_get_same_length_keys_floor(benchmark::State& state) {
  nested_get_floor(state, kSameLengthTopKeys);
}

// ---- set: replace an existing key ----------------------------------------------

void BM_set_tensordict(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  torch::Tensor value = small_leaf();
  for (auto _ : state) {
    data.set("terminated", value);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(data);
}

void BM_set_floor(benchmark::State& state) {
  FlatMap data = make_flat_map();
  torch::Tensor value = small_leaf();
  benchmark::DoNotOptimize(data);  // escapes: lookups cannot be hoisted
  for (auto _ : state) {
    data["terminated"] = value;
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(data);
}

// ---- update: every key of a 10-key tensordict from another -----------------------

void BM_update_tensordict(benchmark::State& state) {
  td::TensorDict dst = make_flat_td();
  td::TensorDict src = make_flat_td();
  for (auto _ : state) {
    dst.update(src);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(dst);
}

void BM_update_floor(benchmark::State& state) {
  FlatMap dst = make_flat_map();
  FlatMap src = make_flat_map();
  benchmark::DoNotOptimize(dst);
  benchmark::DoNotOptimize(src);
  for (auto _ : state) {
    for (const auto& [k, v] : src) dst[k] = v;
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(dst);
}

// ---- keys: iterate the 10 keys, touching each ------------------------------------

void BM_keys_tensordict(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  for (auto _ : state) {
    for (const auto& k : data.keys()) benchmark::DoNotOptimize(k.front().data());
  }
}

// The same walk through for_each, which hands out each key without building
// the vector that keys() returns.
void BM_keys_tensordict_for_each(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  for (auto _ : state) {
    data.for_each([](const td::NestedKey& k, const td::Value&) {
      benchmark::DoNotOptimize(k.front().data());
    });
  }
}

// The same walk through keys_view(): the keys read in place, as string_views.
void BM_keys_tensordict_keys_view(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  for (auto _ : state) {
    for (std::string_view k : data.keys_view()) benchmark::DoNotOptimize(k.data());
  }
}

void BM_keys_floor(benchmark::State& state) {
  FlatMap data = make_flat_map();
  benchmark::DoNotOptimize(data);  // escapes: lookups cannot be hoisted
  for (auto _ : state) {
    for (const auto& [k, v] : data) benchmark::DoNotOptimize(k.data());
  }
}

// ---- items: iterate the 10 (key, tensor) pairs, touching each tensor ---------------

void BM_items_tensordict(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  for (auto _ : state) {
    for (const auto& [k, v] : data.items())
      benchmark::DoNotOptimize(v.tensor().unsafeGetTensorImpl());
  }
}

void BM_items_tensordict_items_view(benchmark::State& state) {
  td::TensorDict data = make_flat_td();
  for (auto _ : state) {
    for (auto [k, v] : data.items_view())
      benchmark::DoNotOptimize(std::get<0>(v.variant()).unsafeGetTensorImpl());
  }
}

void BM_items_floor(benchmark::State& state) {
  FlatMap data = make_flat_map();
  benchmark::DoNotOptimize(data);  // escapes: lookups cannot be hoisted
  for (auto _ : state) {
    for (const auto& [k, v] : data) benchmark::DoNotOptimize(v.unsafeGetTensorImpl());
  }
}

void register_all() {
  const NamedBench benchmarks[] = {
      {"BM_typed_get/typed", BM_typed_get_typed},
      {"BM_typed_get/floor", BM_typed_get_floor},
      {"BM_get/tensordict", BM_get_tensordict},
      {"BM_get/floor", BM_get_floor},
      {"BM_nested_get/tensordict", BM_nested_get_tensordict},
      {"BM_nested_get/floor", BM_nested_get_floor},
      {"BM_nested_get_same_length_keys/tensordict", BM_nested_get_same_length_keys_tensordict},
      {"BM_nested_get_same_length_keys/floor", BM_nested_get_same_length_keys_floor},
      {"BM_set/tensordict", BM_set_tensordict},
      {"BM_set/floor", BM_set_floor},
      {"BM_update/tensordict", BM_update_tensordict},
      {"BM_update/floor", BM_update_floor},
      {"BM_keys/tensordict", BM_keys_tensordict},
      {"BM_keys/tensordict_for_each", BM_keys_tensordict_for_each},
      {"BM_keys/tensordict_keys_view", BM_keys_tensordict_keys_view},
      {"BM_keys/floor", BM_keys_floor},
      {"BM_items/tensordict", BM_items_tensordict},
      {"BM_items/tensordict_items_view", BM_items_tensordict_items_view},
      {"BM_items/floor", BM_items_floor},
  };
  register_min_time(benchmarks, kMinTime);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
