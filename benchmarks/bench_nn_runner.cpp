// The batching runner of tensordict::nn (docs/nn_batching.md): 8 actor
// threads stepping a small MLP policy (obs[4] -> 64 -> 64 -> action[2]),
// through one BatchingRunner (batches up to 32) next to the floor, where each
// actor thread calls the module alone on its own row.
//
// Here the ratio is a speed-up: runner time / floor time for the same number
// of rows, so 0.33 means 3x the floor's throughput (the target). Each
// actor benchmark also reports rows_per_s (items_per_second), the latency of
// one row from its call to its result (p50_us, p90_us, p99_us over every row
// of every iteration) and, for the runner, the mean rows per forward
// (mean_batch).
//
// torch's intra-op threads are set to 1: the machine has 2 cores, the actors
// already use both, and ops on a few hundred numbers are below LibTorch's
// grain size anyway; a pool would only add contention.
//
// BM_assemble_32_rows separates the tensordict cost of a batch: stacking 32
// rows with tensordict::stack and cutting the output into 32 result rows,
// next to torch::stack and select on the raw tensors.
#include <benchmark/benchmark.h>
#include <tensordict/nn/batching_runner.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace td = tensordict;
using td::nn::BatchingRunner;

namespace {

constexpr int kActors = 8;
constexpr int kRowsPerActor = 256;  // per iteration: 2,048 rows
constexpr std::size_t kMaxBatch = 32;
constexpr int kRowPool = 16;  // distinct observations each actor cycles through
constexpr double kMinTime = 1.0;

// obs -> action through Linear(4, 64), ReLU, Linear(64, 64), ReLU, Linear(64, 2).
class MlpPolicy : public td::nn::TensorDictModuleBase {
 public:
  MlpPolicy() : TensorDictModuleBase("MlpPolicy", {"obs"}, {"action"}) {
    mlp_ =
        register_module("mlp", torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::ReLU(),
                                                     torch::nn::Linear(64, 64), torch::nn::ReLU(),
                                                     torch::nn::Linear(64, 2)));
  }
  void forward_into(const td::TensorDictBase& in, td::TensorDictBase& out) override {
    write_outputs(out, {mlp_->forward(read_inputs(in).at(0))});
  }
  torch::nn::Sequential& mlp() { return mlp_; }

 private:
  torch::nn::Sequential mlp_{nullptr};
};

std::shared_ptr<MlpPolicy> policy() {
  static auto shared = std::make_shared<MlpPolicy>();
  return shared;
}

std::vector<td::TensorDict> actor_rows() {
  std::vector<td::TensorDict> rows;
  rows.reserve(kRowPool);
  for (int i = 0; i < kRowPool; ++i) rows.push_back(td::TensorDict({{"obs", torch::randn({4})}}));
  return rows;
}

// CPU time (user + system) and context switches of every thread of the
// process so far.
struct ProcessUsage {
  double cpu_seconds = 0;
  double switches = 0;
};

ProcessUsage process_usage() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime),
          static_cast<double>(usage.ru_nvcsw + usage.ru_nivcsw)};
}

double percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto at = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1));
  return sorted[at];
}

// Runs kActors threads per iteration; each calls step(actor, row, latencies)
// for its kRowsPerActor rows and appends one latency (us) per row. Sets the
// throughput and the latency percentiles.
template <class Step>
void drive_actors(benchmark::State& state, Step step) {
  std::vector<std::vector<td::TensorDict>> rows;
  rows.reserve(kActors);
  for (int a = 0; a < kActors; ++a) rows.push_back(actor_rows());
  std::vector<std::vector<double>> latencies(kActors);
  const ProcessUsage start = process_usage();
  for (auto _ : state) {
    std::vector<std::thread> actors;
    actors.reserve(kActors);
    for (int a = 0; a < kActors; ++a) {
      actors.emplace_back([&, a] {
        at::init_num_threads();  // at::set_num_threads(1) for this thread's OpenMP too
        step(rows[a], latencies[a]);
      });
    }
    for (auto& actor : actors) actor.join();
  }
  const ProcessUsage end = process_usage();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  const int64_t rows_done = state.iterations() * kActors * kRowsPerActor;
  state.SetItemsProcessed(rows_done);
  // The work a row costs in CPU time of all threads, which a busy machine
  // does not inflate the way it inflates wall time, and the context switches
  // (a blocked thread woken) per row, the runner's price on few cores.
  state.counters["cpu_us_per_row"] =
      (end.cpu_seconds - start.cpu_seconds) * 1e6 / static_cast<double>(rows_done);
  state.counters["switches_per_row"] =
      (end.switches - start.switches) / static_cast<double>(rows_done);
  state.counters["p50_us"] = percentile(all, 0.50);
  state.counters["p90_us"] = percentile(all, 0.90);
  state.counters["p99_us"] = percentile(all, 0.99);
}

double micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

// The floor: each actor calls the module alone on its row, as it would
// without a runner.
void BM_actors8_mlp_floor(benchmark::State& state) {
  auto module = policy();
  drive_actors(state, [&](std::vector<td::TensorDict>& rows, std::vector<double>& latency) {
    torch::NoGradGuard no_grad;
    for (int i = 0; i < kRowsPerActor; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto result = module->forward(rows[i % kRowPool]);
      benchmark::DoNotOptimize(result);
      latency.push_back(micros_since(start));
    }
  });
}

// The same without tensordicts: each actor calls the torch MLP on its tensor.
void BM_actors8_mlp_direct_tensor(benchmark::State& state) {
  auto mlp = policy()->mlp();
  drive_actors(state, [&](std::vector<td::TensorDict>& rows, std::vector<double>& latency) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> obs;
    obs.reserve(rows.size());
    for (auto& row : rows) obs.push_back(row.get("obs"));
    for (int i = 0; i < kRowsPerActor; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto action = mlp->forward(obs[i % kRowPool]);
      benchmark::DoNotOptimize(action);
      latency.push_back(micros_since(start));
    }
  });
}

// Through the runner; `in_flight` rows per actor are submitted before the
// actor waits for them (an actor stepping that many environments), so that
// 8 actors can fill batches of up to 8 * in_flight rows: run() for one row,
// run_all() for several. `spin` is BatchingRunnerOptions::spin (0: a waiting
// thread sleeps at once).
void runner_actors(benchmark::State& state, std::chrono::microseconds max_wait, int in_flight,
                   std::chrono::microseconds spin = td::nn::BatchingRunnerOptions{}.spin) {
  td::nn::BatchingRunnerOptions options;
  options.max_batch = kMaxBatch;
  options.max_wait = max_wait;
  options.spin = spin;
  BatchingRunner runner(policy(), options);
  drive_actors(state, [&](std::vector<td::TensorDict>& rows, std::vector<double>& latency) {
    std::vector<td::TensorDictBase> step(in_flight);
    for (int i = 0; i < kRowsPerActor; i += in_flight) {
      const auto started = std::chrono::steady_clock::now();
      if (in_flight == 1) {
        auto result = runner.run(rows[i % kRowPool]);
        benchmark::DoNotOptimize(result);
      } else {
        for (int k = 0; k < in_flight; ++k) step[k] = rows[(i + k) % kRowPool];
        auto results = runner.run_all(step);
        benchmark::DoNotOptimize(results);
      }
      const double micros = micros_since(started);
      for (int k = 0; k < in_flight; ++k) latency.push_back(micros);
    }
  });
  auto stats = runner.stats();
  state.counters["mean_batch"] =
      static_cast<double>(stats.rows_succeeded) / static_cast<double>(stats.batched_forwards);
}

void BM_actors8_mlp_runner(benchmark::State& state) {
  runner_actors(state, std::chrono::microseconds(0), 1);
}
void BM_actors8_mlp_runner_wait100us(benchmark::State& state) {
  runner_actors(state, std::chrono::microseconds(100), 1);
}
void BM_actors8_mlp_runner_4_in_flight(benchmark::State& state) {
  runner_actors(state, std::chrono::microseconds(0), 4);
}
void BM_actors8_mlp_runner_no_spin(benchmark::State& state) {
  runner_actors(state, std::chrono::microseconds(0), 1, std::chrono::microseconds(0));
}
void BM_actors8_mlp_runner_4_in_flight_no_spin(benchmark::State& state) {
  runner_actors(state, std::chrono::microseconds(0), 4, std::chrono::microseconds(0));
}

// ---- assembling one batch of 32 rows and cutting its output ---------------------

void BM_assemble_32_rows_floor(benchmark::State& state) {
  std::vector<torch::Tensor> obs;
  obs.reserve(32);
  for (int i = 0; i < 32; ++i) obs.push_back(torch::randn({4}));
  auto output = torch::randn({32, 2});
  for (auto _ : state) {
    auto batch = torch::stack(obs);
    benchmark::DoNotOptimize(batch);
    for (int64_t i = 0; i < 32; ++i) {
      auto row = output.select(0, i);
      benchmark::DoNotOptimize(row);
    }
  }
}

void BM_assemble_32_rows_tensordict(benchmark::State& state) {
  std::vector<td::TensorDictBase> rows;
  rows.reserve(32);
  for (int i = 0; i < 32; ++i) rows.push_back(td::TensorDict({{"obs", torch::randn({4})}}));
  td::TensorDict output({{"action", torch::randn({32, 2})}}, {32});
  for (auto _ : state) {
    auto batch = td::stack(rows);
    benchmark::DoNotOptimize(batch);
    // What the runner hands each caller: its row of the out_keys.
    td::TensorDictBase selected = output.select({"action"});
    for (int64_t i = 0; i < 32; ++i) {
      td::TensorDictBase row = selected[i];
      benchmark::DoNotOptimize(row);
    }
  }
}

void register_all() {
  at::set_num_threads(1);
  policy();  // built before any timing, with the seed of run_benchmarks
  const NamedBench actor_benchmarks[] = {
      {"BM_actors8_mlp/floor", BM_actors8_mlp_floor},
      {"BM_actors8_mlp/direct_tensor", BM_actors8_mlp_direct_tensor},
      {"BM_actors8_mlp/runner", BM_actors8_mlp_runner},
      {"BM_actors8_mlp/runner_wait100us", BM_actors8_mlp_runner_wait100us},
      {"BM_actors8_mlp/runner_4_in_flight", BM_actors8_mlp_runner_4_in_flight},
      {"BM_actors8_mlp/runner_no_spin", BM_actors8_mlp_runner_no_spin},
      {"BM_actors8_mlp/runner_4_in_flight_no_spin", BM_actors8_mlp_runner_4_in_flight_no_spin},
  };
  for (const auto& [name, fn] : actor_benchmarks) {
    benchmark::RegisterBenchmark(name, fn)->MinTime(kMinTime)->UseRealTime()->Unit(
        benchmark::kMillisecond);
  }
  const NamedBench assembly_benchmarks[] = {
      {"BM_assemble_32_rows/floor", BM_assemble_32_rows_floor},
      {"BM_assemble_32_rows/tensordict", BM_assemble_32_rows_tensordict},
  };
  register_min_time(assembly_benchmarks, 0.3);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
