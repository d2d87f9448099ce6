// tensordict::distributed and tensordict::map next to their floors.
//
// send/recv: rank 0 (this process, running Google Benchmark) sends a 10-leaf
// tensordict of 1 MB or 100 MB to rank 1 (a copy of this program started
// with --peer), which receives it into a preallocated tensordict of the same
// structure and answers with one int64; an iteration ends with that answer.
// Floors, by hand with the same ProcessGroupGloo: one send per tensor into
// preallocated tensors (floor_per_tensor), and one flat buffer packed and
// unpacked with memcpy (floor), and the same with one 64-byte message from the
// receiver crossing it, its receive posted when the send starts
// (floor_one_message_back: what a message back costs when nobody listens for
// it ahead). tensordict is Auto, which checks both structures (its sender
// listens for the next expectation between transfers); tensordict_receiver_checks
// is Auto with StructureCheck::Receiver (no message back).
// BM_send_<size>_paired runs both floors and one of the two in turn within one
// benchmark and reports the ratio to the better floor as counters (see
// run_paired). map: 1M rows on 2 threads against the same chunks computed by a
// hand loop on 2 std::threads.
#include <benchmark/benchmark.h>
#include <tensordict/distributed.h>
#include <tensordict/map.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "bench_main.h"
#include "support/gloo_group.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

extern char** environ;
namespace td = tensordict;

namespace {

constexpr int kLeaves = 10;
constexpr int kCommandTag = 100;
constexpr int kAckTag = 101;
enum Op : int64_t {
  kQuit,
  kTdAuto,
  kTdConsolidated,
  kTdPerLeaf,
  kHandPerTensor,
  kHandFlat,
  kHandFlatOneBack,
  kTdReceiverChecks,
  kPairedReceiverChecks,
  kPairedBothSides
};

c10::intrusive_ptr<c10d::ProcessGroup> g_pg;

// 10 leaves of `bytes` / 10 each, batch [rows], nested one level for half.
td::TensorDict make_td(int64_t bytes, bool zeros) {
  const int64_t per_leaf = bytes / kLeaves / 4;  // float32
  const int64_t rows = 100;
  td::TensorDict out(std::vector<int64_t>{rows});
  for (int i = 0; i < kLeaves; ++i) {
    auto t = zeros ? torch::zeros({rows, per_leaf / rows}) : torch::randn({rows, per_leaf / rows});
    if (i % 2)
      out.set({"nested", "leaf" + std::to_string(i)}, t);
    else
      out.set("leaf" + std::to_string(i), t);
  }
  return out;
}

std::vector<torch::Tensor> leaves_of(const td::TensorDictBase& t) {
  std::vector<torch::Tensor> out;
  for (const auto& key : t.keys(true, true)) out.push_back(t.get(key));
  return out;
}

int64_t total_bytes(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += static_cast<int64_t>(t.nbytes());
  return n;
}

void send_tensor(torch::Tensor t, int dst, int tag) {
  std::vector<torch::Tensor> v{std::move(t)};
  g_pg->send(v, dst, tag)->wait();
}
void recv_tensor(torch::Tensor t, int src, int tag) {
  std::vector<torch::Tensor> v{std::move(t)};
  g_pg->recv(v, src, tag)->wait();
}

void pack(const std::vector<torch::Tensor>& ts, torch::Tensor& flat) {
  auto* p = static_cast<uint8_t*>(flat.data_ptr());
  for (const auto& t : ts) {
    std::memcpy(p, t.data_ptr(), t.nbytes());
    p += t.nbytes();
  }
}
void unpack(const torch::Tensor& flat, std::vector<torch::Tensor>& ts) {
  const auto* p = static_cast<const uint8_t*>(flat.data_ptr());
  for (auto& t : ts) {
    std::memcpy(t.data_ptr(), p, t.nbytes());
    p += t.nbytes();
  }
}

// One message per tensor (`post` is a send or a recv), all posted, then waited.
template <class Post>
void per_tensor(const std::vector<torch::Tensor>& ts, Post post) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const auto& t : ts) {
    std::vector<torch::Tensor> v{t};
    works.push_back(post(v));
  }
  for (auto& w : works) w->wait();
}

td::TransferOptions options_for(int64_t op) {
  td::TransferOptions o;
  if (op == kTdConsolidated) o.mode = td::TransferMode::Consolidated;
  if (op == kTdPerLeaf) o.mode = td::TransferMode::PerLeaf;
  if (op == kTdReceiverChecks) o.check = td::StructureCheck::Receiver;
  return o;
}

// The paired benchmark's transfers in iteration `i`: the flat floor, the
// per-tensor floor and the tensordict (`td`: kTdReceiverChecks or kTdAuto,
// which checks both sides), in an order that rotates.
constexpr int kPairedTurns = 3;
Op paired_turn(int64_t i, int turn, Op td) {
  const Op order[kPairedTurns] = {kHandFlat, kHandPerTensor, td};
  return order[(i + turn) % kPairedTurns];
}
Op paired_td(int64_t paired_op) {
  return paired_op == kPairedReceiverChecks ? kTdReceiverChecks : kTdAuto;
}

// Rank 1: serves commands {op, bytes, iterations} until kQuit.
void serve() {
  torch::Tensor cmd = torch::empty({3}, torch::kLong);
  torch::Tensor ack = torch::ones({1}, torch::kLong);
  torch::Tensor note = torch::ones({8}, torch::kLong);
  while (true) {
    recv_tensor(cmd, 0, kCommandTag);
    const int64_t op = cmd[0].item<int64_t>();
    const int64_t bytes = cmd[1].item<int64_t>();
    const int64_t iterations = cmd[2].item<int64_t>();
    if (op == kQuit) return;
    td::TensorDict target = make_td(bytes, true);
    std::vector<torch::Tensor> ts = leaves_of(target);
    torch::Tensor flat = torch::empty({total_bytes(ts)}, torch::kByte);
    if (op == kPairedReceiverChecks || op == kPairedBothSides) {
      for (int64_t i = 0; i < iterations; ++i) {
        for (int turn = 0; turn < kPairedTurns; ++turn) {
          switch (const Op turn_op = paired_turn(i, turn, paired_td(op))) {
            case kHandFlat:
              recv_tensor(flat, 0, 0);
              unpack(flat, ts);
              break;
            case kHandPerTensor:
              per_tensor(ts, [](std::vector<torch::Tensor>& v) { return g_pg->recv(v, 0, 0); });
              break;
            default:
              td::recv(target, *g_pg, 0, options_for(turn_op));
          }
          send_tensor(ack, 0, kAckTag);
        }
      }
      continue;
    }
    for (int64_t i = 0; i < iterations; ++i) {
      if (op == kHandPerTensor) {
        per_tensor(ts, [](std::vector<torch::Tensor>& v) { return g_pg->recv(v, 0, 0); });
      } else if (op == kHandFlat) {
        recv_tensor(flat, 0, 0);
        unpack(flat, ts);
      } else if (op == kHandFlatOneBack) {
        std::vector<torch::Tensor> v{note};
        auto noted = g_pg->send(v, 0, 0);
        recv_tensor(flat, 0, 0);
        unpack(flat, ts);
        noted->wait();
      } else {
        td::recv(target, *g_pg, 0, options_for(op));
      }
      send_tensor(ack, 0, kAckTag);
    }
  }
}

void command(int64_t op, int64_t bytes, int64_t iterations) {
  send_tensor(torch::tensor({op, bytes, iterations}, torch::kLong), 1, kCommandTag);
}

void run_send(benchmark::State& state, Op op, int64_t bytes) {
  td::TensorDict src = make_td(bytes, false);
  std::vector<torch::Tensor> ts = leaves_of(src);
  torch::Tensor flat = torch::empty({total_bytes(ts)}, torch::kByte);
  torch::Tensor ack = torch::empty({1}, torch::kLong);
  torch::Tensor note = torch::empty({8}, torch::kLong);
  command(op, bytes, state.max_iterations);
  for (auto _ : state) {
    if (op == kHandPerTensor) {
      per_tensor(ts, [](std::vector<torch::Tensor>& v) { return g_pg->send(v, 1, 0); });
    } else if (op == kHandFlat) {
      pack(ts, flat);
      send_tensor(flat, 1, 0);
    } else if (op == kHandFlatOneBack) {
      std::vector<torch::Tensor> v{note};
      auto noted = g_pg->recv(v, 1, 0);
      pack(ts, flat);
      send_tensor(flat, 1, 0);
      noted->wait();
    } else {
      td::send(src, *g_pg, 1, options_for(op));
    }
    recv_tensor(ack, 1, kAckTag);
  }
  state.SetBytesProcessed(state.iterations() * total_bytes(ts));
}

// Both floors and the tensordict (`paired_op`: StructureCheck::Receiver, or
// the default that checks both sides) in turn, transfer by transfer, each
// timed alone: all three see the same state of the machine, which on a
// shared VM drifts by more than the gap between them from one repetition to
// the next. Counters: the mean time of each (us); ratio_of_sums, the
// tensordict's total over the better floor's (by total); median_ratio, the
// median over iterations of the tensordict's time over that floor's in the
// same iteration.
void run_paired(benchmark::State& state, Op paired_op, int64_t bytes) {
  td::TensorDict src = make_td(bytes, false);
  std::vector<torch::Tensor> ts = leaves_of(src);
  torch::Tensor flat = torch::empty({total_bytes(ts)}, torch::kByte);
  torch::Tensor ack = torch::empty({1}, torch::kLong);
  const Op td_op = paired_td(paired_op);
  const td::TransferOptions td_options = options_for(td_op);
  command(paired_op, bytes, state.max_iterations);
  using clock = std::chrono::steady_clock;
  std::vector<double> flat_t, per_tensor_t, td_t;  // seconds, per iteration
  int64_t i = 0;
  for (auto _ : state) {
    for (int turn = 0; turn < kPairedTurns; ++turn) {
      const Op op = paired_turn(i, turn, td_op);
      const auto start = clock::now();
      switch (op) {
        case kHandFlat:
          pack(ts, flat);
          send_tensor(flat, 1, 0);
          break;
        case kHandPerTensor:
          per_tensor(ts, [](std::vector<torch::Tensor>& v) { return g_pg->send(v, 1, 0); });
          break;
        default:
          td::send(src, *g_pg, 1, td_options);
      }
      recv_tensor(ack, 1, kAckTag);
      const double took = std::chrono::duration<double>(clock::now() - start).count();
      (op == kHandFlat ? flat_t : op == kHandPerTensor ? per_tensor_t : td_t).push_back(took);
    }
    ++i;
  }
  auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  // The better floor by total time; the per-iteration ratios against it.
  const std::vector<double>& floor_t = sum(flat_t) <= sum(per_tensor_t) ? flat_t : per_tensor_t;
  std::vector<double> ratios;
  for (std::size_t k = 0; k < td_t.size(); ++k) ratios.push_back(td_t[k] / floor_t[k]);
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  const double n = static_cast<double>(state.iterations());
  state.counters["floor_us"] = sum(floor_t) / n * 1e6;
  state.counters["flat_us"] = sum(flat_t) / n * 1e6;
  state.counters["per_tensor_us"] = sum(per_tensor_t) / n * 1e6;
  state.counters["td_us"] = sum(td_t) / n * 1e6;
  state.counters["ratio_of_sums"] = sum(td_t) / sum(floor_t);
  state.counters["median_ratio"] = ratios.empty() ? 0 : ratios[ratios.size() / 2];
  state.SetBytesProcessed(state.iterations() * 3 * total_bytes(ts));
}

constexpr int64_t kMB = int64_t{1000} * 1000;

#define TD_SEND_BENCH(size_name, bytes)                                                           \
  void BM_send_##size_name##_floor(benchmark::State& s) { run_send(s, kHandFlat, bytes); }        \
  void BM_send_##size_name##_per_tensor(benchmark::State& s) {                                    \
    run_send(s, kHandPerTensor, bytes);                                                           \
  }                                                                                               \
  void BM_send_##size_name##_one_back(benchmark::State& s) {                                      \
    run_send(s, kHandFlatOneBack, bytes);                                                         \
  }                                                                                               \
  void BM_send_##size_name##_td(benchmark::State& s) { run_send(s, kTdAuto, bytes); }             \
  void BM_send_##size_name##_td_consolidated(benchmark::State& s) {                               \
    run_send(s, kTdConsolidated, bytes);                                                          \
  }                                                                                               \
  void BM_send_##size_name##_td_per_leaf(benchmark::State& s) { run_send(s, kTdPerLeaf, bytes); } \
  void BM_send_##size_name##_td_receiver_checks(benchmark::State& s) {                            \
    run_send(s, kTdReceiverChecks, bytes);                                                        \
  }                                                                                               \
  void BM_send_##size_name##_paired(benchmark::State& s) {                                        \
    run_paired(s, kPairedReceiverChecks, bytes);                                                  \
  }                                                                                               \
  void BM_send_##size_name##_paired_both_sides(benchmark::State& s) {                             \
    run_paired(s, kPairedBothSides, bytes);                                                       \
  }

TD_SEND_BENCH(1MB, 1 * kMB)
TD_SEND_BENCH(2MB, 2 * kMB)
TD_SEND_BENCH(4MB, 4 * kMB)
TD_SEND_BENCH(8MB, 8 * kMB)
TD_SEND_BENCH(16MB, 16 * kMB)
TD_SEND_BENCH(100MB, 100 * kMB)

// ---- map over 1M rows on 2 threads ----------------------------------------------
constexpr int64_t kRows = int64_t{1000} * 1000;

td::TensorDict map_input() {
  static td::TensorDict d({{"obs", torch::randn({kRows, 8})}, {"reward", torch::randn({kRows})}},
                          {kRows});
  return d;
}

torch::Tensor score(const torch::Tensor& obs, const torch::Tensor& reward) {
  return obs.pow(2).sum(-1) + reward;
}

void BM_map_1M_rows_td(benchmark::State& state) {
  td::TensorDict in = map_input();
  td::MapOptions opts;
  opts.num_workers = 2;
  for (auto _ : state) {
    auto out = td::map(
        in,
        [](const td::TensorDictBase& c) {
          return td::TensorDictBase(
              td::TensorDict({{"score", score(c.get("obs"), c.get("reward"))}}, c.batch_size()));
        },
        opts);
    benchmark::DoNotOptimize(out);
  }
}

void BM_map_1M_rows_floor(benchmark::State& state) {
  td::TensorDict in = map_input();
  const torch::Tensor obs = in.get("obs");
  const torch::Tensor reward = in.get("reward");
  for (auto _ : state) {
    torch::Tensor out = torch::empty({kRows});
    std::vector<std::thread> pool;
    for (int64_t t = 0; t < 2; ++t)
      pool.emplace_back([&, t] {
        const int64_t start = t * kRows / 2, len = kRows / 2;
        out.narrow(0, start, len)
            .copy_(score(obs.narrow(0, start, len), reward.narrow(0, start, len)));
      });
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(out);
  }
}

void register_all() {
  // Names as run.py pairs them: BM_<op>/<variant>.
  const NamedBench benches[] = {
      {"BM_send_1MB/floor", BM_send_1MB_floor},
      {"BM_send_1MB/floor_per_tensor", BM_send_1MB_per_tensor},
      // The flat buffer with one 64-byte message back, crossing it: what any
      // transfer costs that tells the sender about the receiver's structure.
      {"BM_send_1MB/floor_one_message_back", BM_send_1MB_one_back},
      {"BM_send_1MB/tensordict", BM_send_1MB_td},
      {"BM_send_1MB/tensordict_consolidated", BM_send_1MB_td_consolidated},
      {"BM_send_1MB/tensordict_per_leaf", BM_send_1MB_td_per_leaf},
      {"BM_send_1MB/tensordict_receiver_checks", BM_send_1MB_td_receiver_checks},
      // Not a variant against a floor: both in one run, see run_paired.
      {"BM_send_1MB_paired/floors_and_receiver_checks", BM_send_1MB_paired},
      {"BM_send_1MB_paired/floors_and_both_sides", BM_send_1MB_paired_both_sides},
      // 2, 4, 8 and 16 MB: where one buffer stops beating one message per leaf.
      {"BM_send_2MB/floor", BM_send_2MB_floor},
      {"BM_send_2MB/floor_per_tensor", BM_send_2MB_per_tensor},
      {"BM_send_2MB/tensordict", BM_send_2MB_td},
      {"BM_send_2MB/tensordict_consolidated", BM_send_2MB_td_consolidated},
      {"BM_send_2MB/tensordict_per_leaf", BM_send_2MB_td_per_leaf},
      {"BM_send_4MB/floor", BM_send_4MB_floor},
      {"BM_send_4MB/floor_per_tensor", BM_send_4MB_per_tensor},
      {"BM_send_4MB/floor_one_message_back", BM_send_4MB_one_back},
      {"BM_send_4MB/tensordict", BM_send_4MB_td},
      {"BM_send_4MB/tensordict_consolidated", BM_send_4MB_td_consolidated},
      {"BM_send_4MB/tensordict_per_leaf", BM_send_4MB_td_per_leaf},
      {"BM_send_4MB/tensordict_receiver_checks", BM_send_4MB_td_receiver_checks},
      {"BM_send_4MB_paired/floors_and_receiver_checks", BM_send_4MB_paired},
      {"BM_send_4MB_paired/floors_and_both_sides", BM_send_4MB_paired_both_sides},
      {"BM_send_8MB/floor", BM_send_8MB_floor},
      {"BM_send_8MB/floor_per_tensor", BM_send_8MB_per_tensor},
      {"BM_send_8MB/tensordict", BM_send_8MB_td},
      {"BM_send_8MB/tensordict_consolidated", BM_send_8MB_td_consolidated},
      {"BM_send_8MB/tensordict_per_leaf", BM_send_8MB_td_per_leaf},
      {"BM_send_8MB/tensordict_receiver_checks", BM_send_8MB_td_receiver_checks},
      {"BM_send_8MB_paired/floors_and_receiver_checks", BM_send_8MB_paired},
      {"BM_send_8MB_paired/floors_and_both_sides", BM_send_8MB_paired_both_sides},
      {"BM_send_16MB/floor", BM_send_16MB_floor},
      {"BM_send_16MB/floor_per_tensor", BM_send_16MB_per_tensor},
      {"BM_send_16MB/tensordict", BM_send_16MB_td},
      {"BM_send_16MB/tensordict_consolidated", BM_send_16MB_td_consolidated},
      {"BM_send_16MB/tensordict_per_leaf", BM_send_16MB_td_per_leaf},
      {"BM_send_16MB/tensordict_receiver_checks", BM_send_16MB_td_receiver_checks},
      {"BM_send_16MB_paired/floors_and_receiver_checks", BM_send_16MB_paired},
      {"BM_send_16MB_paired/floors_and_both_sides", BM_send_16MB_paired_both_sides},
      {"BM_send_100MB/floor", BM_send_100MB_floor},
      {"BM_send_100MB/floor_per_tensor", BM_send_100MB_per_tensor},
      {"BM_send_100MB/tensordict", BM_send_100MB_td},
      {"BM_send_100MB/tensordict_consolidated", BM_send_100MB_td_consolidated},
      {"BM_send_100MB/tensordict_per_leaf", BM_send_100MB_td_per_leaf},
      {"BM_send_100MB/tensordict_receiver_checks", BM_send_100MB_td_receiver_checks},
      {"BM_send_100MB_paired/floors_and_receiver_checks", BM_send_100MB_paired},
      {"BM_send_100MB_paired/floors_and_both_sides", BM_send_100MB_paired_both_sides},
      {"BM_map_1M_rows/floor", BM_map_1M_rows_floor},
      {"BM_map_1M_rows/tensordict", BM_map_1M_rows_td},
  };
  register_min_time(benches, 0.5);
}

c10::intrusive_ptr<c10d::ProcessGroup> make_group(const std::string& store_path, int rank) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, 2);
  return td_test::make_gloo_group(store, rank, 2, std::chrono::minutes(10));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--peer") {
    g_pg = make_group(argv[2], 1);
    serve();
    g_pg->barrier()->wait();
    return 0;
  }
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / "td-bench-dist-XXXXXX").string();
  if (!mkdtemp(dir.data())) return 1;
  const std::string store = dir + "/store";
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args{exe, "--peer", store};
  std::vector<char*> cargs;
  cargs.reserve(args.size() + 1);
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t peer = 0;
  if (posix_spawn(&peer, exe.c_str(), nullptr, nullptr, cargs.data(), environ) != 0) return 1;
  g_pg = make_group(store, 0);
  const int rc = run_benchmarks(argc, argv, register_all);
  command(kQuit, 0, 0);
  g_pg->barrier()->wait();
  int status = 0;
  waitpid(peer, &status, 0);
  fs::remove_all(dir);
  return rc;
}
