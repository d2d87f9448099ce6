// The Redis storage on a 3-master Redis Cluster this binary starts
// (tests/support/redis_cluster.h), next to the same commands written by hand
// with hiredis in the same run:
// - writes from 1, 2 and 4 actor processes (this binary re-executed with
//   --actor) into one store and into a sharded store (3 blocks, one per
//   master): total rows per second, `floor` being actors that send the same
//   MULTI / SETRANGE x 10 / EXEC per row by hand to the node of the row;
// - td[256 random] of a sharded store (one pipeline per node, all nodes at
//   once) against one store of the same data (one node), and the sharded
//   read by hand (the same pipelines, written to every node before reading).
// Naming as in bench_core.cpp: BM_<op>/<variant>; `floor` is by hand.
#include <benchmark/benchmark.h>
#include <tensordict/storage/redis.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"
#include "redis_bench_rows.h"
#include "support/redis_cluster.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

extern char** environ;

namespace td = tensordict;

namespace {

using namespace redis_bench;

constexpr int64_t kRows = 6000;  // 3 blocks of 2000 rows when sharded
constexpr int64_t kRowsPerActor = 1500;

td_test::RedisCluster& cluster() {
  static auto c = std::make_unique<td_test::RedisCluster>();
  return *c;
}

td::storage::Redis on_cluster(const std::string& td_id, bool sharded) {
  td::storage::Redis r;
  r.host = "127.0.0.1";
  r.port = cluster().port(0);
  r.cluster = true;
  r.td_id = td_id;
  r.sharded = sharded;
  return r;
}

td::TensorDictBase& store(bool sharded) {
  static td::TensorDictBase one =
      td::from_schema(schema(), {kRows}, on_cluster("bench-one", false));
  static td::TensorDictBase blocks =
      td::from_schema(schema(), {kRows}, on_cluster("bench-sharded", true));
  return sharded ? blocks : one;
}

// ---- hand-written hiredis ---------------------------------------------------------

struct Raw {
  explicit Raw(const std::string& address) {
    const auto colon = address.rfind(':');
    c = redisConnect(address.substr(0, colon).c_str(), std::stoi(address.substr(colon + 1)));
  }
  ~Raw() { redisFree(c); }
  void append(const std::vector<std::string_view>& args) { append_command(c, args); }
  void flush() {
    int done = 0;
    while (!done && redisBufferWrite(c, &done) == REDIS_OK) {
    }
  }
  redisReply* reply() {
    void* r = nullptr;
    redisGetReply(c, &r);
    return static_cast<redisReply*>(r);
  }
  void replies(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) freeReplyObject(reply());
  }
  redisContext* c;
};

// Where each row lives: block ids (one for a plain store), rows per block,
// and the node of each block, as a hand-written client would learn them.
struct Layout {
  std::vector<std::string> ids;
  int64_t block_rows = kRows;
  std::vector<std::string> nodes;
};

Layout layout(bool sharded) {
  Layout l;
  auto& s = store(sharded);
  l.ids = sharded ? td::redis::block_ids(s) : std::vector<std::string>{td::redis::td_id(s)};
  if (sharded) l.block_rows = td::redis::block_rows(s);
  for (const auto& id : l.ids) {
    const int slot = std::stoi(cluster().node(0).command({"CLUSTER", "KEYSLOT", "{" + id + "}"}));
    l.nodes.push_back(cluster().address(cluster().owner(slot)));
  }
  return l;
}

// ---- actor processes ----------------------------------------------------------------

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// argv: --actor <td|raw> <sharded 0|1> <seed port> <actor> <actors> <start_us> <layout...>
int actor_main(int argc, char** argv) {
  const std::string mode = argv[2];
  const bool sharded = std::string(argv[3]) == "1";
  const int seed_port = std::stoi(argv[4]);
  const int64_t actor = std::stoll(argv[5]), actors = std::stoll(argv[6]);
  const int64_t start_us = std::stoll(argv[7]);
  const int64_t block_rows = std::stoll(argv[8]);
  std::vector<std::string> ids, nodes;
  for (int i = 9; i + 1 < argc; i += 2) ids.push_back(argv[i]), nodes.push_back(argv[i + 1]);
  auto r = row();
  std::vector<at::Tensor> leaves;
  leaves.reserve(kLeaves);
  for (int l = 0; l < kLeaves; ++l) leaves.push_back(r.get("leaf" + std::to_string(l)));
  auto rows_of = [&](int64_t k) { return (actor + k * actors) * 7919 % kRows; };
  int64_t t0 = 0, t1 = 0;
  if (mode == "td") {
    td::storage::Redis o;
    o.host = "127.0.0.1";
    o.port = seed_port;
    o.cluster = true;
    o.td_id = sharded ? ids.front().substr(0, ids.front().rfind('-')) : ids.front();
    auto s = td::redis::from_store(o);
    while (now_us() < start_us) std::this_thread::sleep_for(std::chrono::microseconds(200));
    t0 = now_us();
    for (int64_t k = 0; k < kRowsPerActor; ++k) s.index_put_({rows_of(k)}, r);
    t1 = now_us();
  } else {
    std::vector<std::unique_ptr<Raw>> raw;
    std::vector<std::string> keys;
    for (std::size_t b = 0; b < ids.size(); ++b) {
      raw.push_back(std::make_unique<Raw>(nodes[b]));
      for (int l = 0; l < kLeaves; ++l)
        keys.push_back("tensordict:{" + ids[b] + "}:d:leaf" + std::to_string(l));
    }
    while (now_us() < start_us) std::this_thread::sleep_for(std::chrono::microseconds(200));
    t0 = now_us();
    for (int64_t k = 0; k < kRowsPerActor; ++k) {
      const int64_t i = rows_of(k), b = i / block_rows;
      Raw& c = *raw[static_cast<std::size_t>(b)];
      const std::string off = std::to_string((i - b * block_rows) * kRowBytes);
      c.append({"MULTI"});
      for (int l = 0; l < kLeaves; ++l)
        c.append({"SETRANGE", keys[static_cast<std::size_t>(b * kLeaves + l)], off,
                  std::string_view(static_cast<const char*>(leaves[l].data_ptr()), kRowBytes)});
      c.append({"EXEC"});
      c.replies(kLeaves + 2);
    }
    t1 = now_us();
  }
  std::printf("%lld %lld\n", static_cast<long long>(t0), static_cast<long long>(t1));
  return 0;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

// Starts `actors` processes writing kRowsPerActor rows each, all from the
// same moment; the time is from that moment to the last one's end.
void run_actors(benchmark::State& state, const std::string& mode, bool sharded, int actors) {
  const Layout l = layout(sharded);
  const std::string exe = self_exe();
  char dir[] = "/tmp/td-bench-actors-XXXXXX";
  mkdtemp(dir);
  for (auto _ : state) {
    const int64_t start = now_us() + 3'000'000;  // time to load LibTorch and connect
    std::vector<pid_t> pids;
    for (int a = 0; a < actors; ++a) {
      std::vector<std::string> args{exe,
                                    "--actor",
                                    mode,
                                    sharded ? "1" : "0",
                                    std::to_string(cluster().port(0)),
                                    std::to_string(a),
                                    std::to_string(actors),
                                    std::to_string(start),
                                    std::to_string(l.block_rows)};
      for (std::size_t b = 0; b < l.ids.size(); ++b)
        args.push_back(l.ids[b]), args.push_back(l.nodes[b]);
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      const std::string out = std::string(dir) + "/" + std::to_string(a);
      posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      pid_t pid = -1;
      posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&fa);
      pids.push_back(pid);
    }
    // From the first actor's start to the last one's end (an actor that
    // started late on a busy machine does not count its start-up).
    int64_t begin = 0, end = 0;
    for (int a = 0; a < actors; ++a) {
      int status = 0;
      waitpid(pids[a], &status, 0);
      std::ifstream in(std::string(dir) + "/" + std::to_string(a));
      long long t0 = 0, t1 = 0;
      in >> t0 >> t1;
      if (t1 == 0) state.SkipWithError("an actor failed");
      begin = a == 0 ? t0 : std::min<int64_t>(begin, t0);
      end = std::max<int64_t>(end, t1);
    }
    state.SetIterationTime(static_cast<double>(end - begin) / 1e6);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  state.SetItemsProcessed(state.iterations() * actors * kRowsPerActor);
  state.counters["actors"] = actors;
}

// ---- td[256 random] ---------------------------------------------------------------

at::Tensor sample_index() { return torch::randint(kRows, {256}, torch::kLong); }

void BM_sample_256_sharded_td(benchmark::State& state) {
  auto& s = store(true);
  auto idx = sample_index();
  for (auto _ : state) benchmark::DoNotOptimize(s.index({idx}));
  state.SetItemsProcessed(state.iterations() * 256);
}

void BM_sample_256_one_store_td(benchmark::State& state) {
  auto& s = store(false);
  auto idx = sample_index();
  for (auto _ : state) benchmark::DoNotOptimize(s.index({idx}));
  state.SetItemsProcessed(state.iterations() * 256);
}

// By hand: per block a MULTI, the rows' GETRANGEs of every leaf, EXEC; every
// node's pipeline written before any reply is read; rows copied into tensors.
void BM_sample_256_sharded_floor(benchmark::State& state) {
  const Layout l = layout(true);
  std::map<std::string, std::unique_ptr<Raw>> raw;
  for (const auto& n : l.nodes)
    if (!raw.count(n)) raw[n] = std::make_unique<Raw>(n);
  auto idx = sample_index();
  // Rows per block, with their position in the sample.
  std::vector<std::vector<std::pair<int64_t, std::pair<std::string, std::string>>>> per(
      l.ids.size());
  for (int64_t j = 0; j < 256; ++j) {
    const int64_t i = idx[j].item<int64_t>(), b = i / l.block_rows;
    const int64_t o = (i - b * l.block_rows) * kRowBytes;
    per[static_cast<std::size_t>(b)].push_back(
        {j, {std::to_string(o), std::to_string(o + kRowBytes - 1)}});
  }
  std::vector<std::vector<std::string>> keys(l.ids.size());
  for (std::size_t b = 0; b < l.ids.size(); ++b)
    for (int k = 0; k < kLeaves; ++k)
      keys[b].push_back("tensordict:{" + l.ids[b] + "}:d:leaf" + std::to_string(k));
  for (auto _ : state) {
    for (std::size_t b = 0; b < l.ids.size(); ++b) {
      Raw& c = *raw[l.nodes[b]];
      c.append({"MULTI"});
      for (int k = 0; k < kLeaves; ++k)
        for (const auto& [j, range] : per[b])
          c.append({"GETRANGE", keys[b][k], range.first, range.second});
      c.append({"EXEC"});
    }
    for (auto& [n, c] : raw) c->flush();
    std::vector<at::Tensor> out;
    out.reserve(kLeaves);
    for (int k = 0; k < kLeaves; ++k) out.push_back(at::empty({256, kWidth}));
    for (std::size_t b = 0; b < l.ids.size(); ++b) {
      Raw& c = *raw[l.nodes[b]];
      c.replies(1 + kLeaves * per[b].size());  // OK, QUEUED...
      redisReply* exec = c.reply();
      std::size_t e = 0;
      for (int k = 0; k < kLeaves; ++k)
        for (const auto& [j, range] : per[b])
          std::memcpy(static_cast<char*>(out[k].data_ptr()) + j * kRowBytes,
                      exec->element[e++]->str, kRowBytes);
      freeReplyObject(exec);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * 256);
}

void register_all() {
  // Fill both stores once (every row written).
  for (bool sharded : {false, true}) {
    auto& s = store(sharded);
    td::TensorDict all(std::vector<int64_t>{kRows});
    for (int i = 0; i < kLeaves; ++i)
      all.set("leaf" + std::to_string(i), torch::randn({kRows, kWidth}));
    s.index_put_({torch::arange(kRows)}, all);
  }
  static const NamedBench samples[] = {
      {"BM_sample_256_sharded/tensordict", BM_sample_256_sharded_td},
      {"BM_sample_256_sharded/floor", BM_sample_256_sharded_floor},
      {"BM_sample_256_sharded/one_store", BM_sample_256_one_store_td},
  };
  register_min_time(samples, 0.5);
  for (int actors : {1, 2, 4})
    for (bool sharded : {false, true})
      for (const char* mode : {"td", "raw"}) {
        const std::string name = std::string("BM_actors_write_") + std::to_string(actors) +
                                 (sharded ? "_sharded" : "_one_store") +
                                 (std::string(mode) == "td" ? "/tensordict" : "/floor");
        benchmark::RegisterBenchmark(
            name.c_str(), [mode = std::string(mode), sharded,
                           actors](benchmark::State& st) { run_actors(st, mode, sharded, actors); })
            ->Iterations(3)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--actor") return actor_main(argc, argv);
  return run_benchmarks(argc, argv, register_all);
}
