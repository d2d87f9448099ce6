// The Redis storage next to the same commands written by hand with hiredis,
// against a redis-server this binary starts (a private one on a free port and
// a Unix socket in a temporary directory, killed at exit). Naming as in
// bench_core.cpp: BM_<op>/<variant>; `floor` is the hand-written form.
#include <benchmark/benchmark.h>
#include <tensordict/storage/redis.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"
#include "redis_bench_rows.h"
#include "support/redis_server.h"

#include <memory>
#include <string>
#include <vector>

namespace td = tensordict;

namespace {

using namespace redis_bench;

constexpr int64_t kRows = 10'000;

td_test::RedisServer& server() {
  // Strings up to 4 GB (the default cap is 512 MB) for the 2.1 GB obs leaf.
  static auto s = std::make_unique<td_test::RedisServer>(
      td_test::RedisServer::Options{.extra = {"--proto-max-bulk-len", "4gb"}});
  return *s;
}

td::storage::Redis options(const std::string& td_id) {
  td::storage::Redis r;
  r.unix_socket = server().socket();
  r.td_id = td_id;
  return r;
}

td::TensorDictBase& store() {
  static td::TensorDictBase s = td::from_schema(schema(), {kRows}, options("bench"));
  return s;
}

// The leaves of row() as tensors, for the floors.
std::vector<at::Tensor> row_leaves() {
  auto r = row();
  std::vector<at::Tensor> leaves;
  leaves.reserve(kLeaves);
  for (int l = 0; l < kLeaves; ++l) leaves.push_back(r.get("leaf" + std::to_string(l)));
  return leaves;
}

// A raw hiredis connection for the floors.
struct Raw {
  Raw() {
    c = redisConnectUnix(server().socket().c_str());
    for (int i = 0; i < kLeaves; ++i)
      keys.push_back("tensordict:{bench}:d:leaf" + std::to_string(i));
  }
  ~Raw() { redisFree(c); }
  void append(const std::vector<std::string_view>& args) { append_command(c, args); }
  void replies(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      void* r = nullptr;
      redisGetReply(c, &r);
      freeReplyObject(r);
    }
  }
  redisContext* c;
  std::vector<std::string> keys;
};

void BM_row_write_10_leaves_td(benchmark::State& state) {
  auto& s = store();
  auto r = row();
  int64_t i = 0;
  for (auto _ : state) s.index_put_({(i++ * 7919) % kRows}, r);
  state.SetItemsProcessed(state.iterations());
}

// The same without MULTI/EXEC (transaction = false): a plain pipeline.
void BM_row_write_10_leaves_td_no_transaction(benchmark::State& state) {
  auto opts = options("bench");
  opts.transaction = false;
  store();
  auto s = td::redis::from_store(opts);
  auto r = row();
  int64_t i = 0;
  for (auto _ : state) s.index_put_({(i++ * 7919) % kRows}, r);
  state.SetItemsProcessed(state.iterations());
}

// One SETRANGE per leaf for each row written, by hand; in one MULTI/EXEC
// when `transaction` (the commands the default, transaction = true, sends,
// so that its ratio is the library's own cost).
void row_write_floor(benchmark::State& state, bool transaction) {
  store();
  Raw raw;
  const auto leaves = row_leaves();
  int64_t i = 0;
  for (auto _ : state) {
    const std::string off = std::to_string(((i++ * 7919) % kRows) * kRowBytes);
    if (transaction) raw.append({"MULTI"});
    for (int l = 0; l < kLeaves; ++l)
      raw.append({"SETRANGE", raw.keys[l], off,
                  std::string_view(static_cast<const char*>(leaves[l].data_ptr()), kRowBytes)});
    if (transaction) raw.append({"EXEC"});
    raw.replies(transaction ? kLeaves + 2 : kLeaves);
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_row_write_10_leaves_floor(benchmark::State& state) { row_write_floor(state, false); }
void BM_row_write_10_leaves_floor_transaction(benchmark::State& state) {
  row_write_floor(state, true);
}

at::Tensor sample_index() { return torch::randint(kRows, {256}, torch::kLong); }

void BM_sample_256_10_leaves_td(benchmark::State& state) {
  auto& s = store();
  auto idx = sample_index();
  for (auto _ : state) benchmark::DoNotOptimize(s.index({idx}));
  state.SetItemsProcessed(state.iterations() * 256);
}

// The same without MULTI/EXEC (transaction = false): a plain pipeline, as
// the plain floor below.
void BM_sample_256_10_leaves_td_no_transaction(benchmark::State& state) {
  auto opts = options("bench");
  opts.transaction = false;
  store();
  auto s = td::redis::from_store(opts);
  auto idx = sample_index();
  for (auto _ : state) benchmark::DoNotOptimize(s.index({idx}));
  state.SetItemsProcessed(state.iterations() * 256);
}

// The GETRANGE bounds of the sampled rows (first and last byte, as text).
std::pair<std::vector<std::string>, std::vector<std::string>> sampled_ranges() {
  auto idx = sample_index();
  std::vector<std::string> offs, ends;
  for (int64_t j = 0; j < 256; ++j) {
    const int64_t o = idx[j].item<int64_t>() * kRowBytes;
    offs.push_back(std::to_string(o));
    ends.push_back(std::to_string(o + kRowBytes - 1));
  }
  return {offs, ends};
}

// Pipelined GETRANGEs, one per row and leaf, copied into tensors.
void BM_sample_256_10_leaves_floor(benchmark::State& state) {
  store();
  Raw raw;
  const auto [offs, ends] = sampled_ranges();
  for (auto _ : state) {
    for (int l = 0; l < kLeaves; ++l)
      for (int64_t j = 0; j < 256; ++j) raw.append({"GETRANGE", raw.keys[l], offs[j], ends[j]});
    std::vector<at::Tensor> out;
    for (int l = 0; l < kLeaves; ++l) {
      at::Tensor t = at::empty({256, kWidth});
      char* p = static_cast<char*>(t.data_ptr());
      for (int64_t j = 0; j < 256; ++j) {
        void* r = nullptr;
        redisGetReply(raw.c, &r);
        std::memcpy(p + j * kRowBytes, static_cast<redisReply*>(r)->str, kRowBytes);
        freeReplyObject(r);
      }
      out.push_back(t);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * 256);
}

// The commands the default (transaction = true) sends, by hand: MULTI, per
// leaf its STRLEN (the size check) and the GETRANGEs, EXEC; the replies
// copied into tensors. The library's own cost is its ratio to this.
void BM_sample_256_10_leaves_floor_transaction(benchmark::State& state) {
  store();
  Raw raw;
  const auto [offs, ends] = sampled_ranges();
  for (auto _ : state) {
    raw.append({"MULTI"});
    for (int l = 0; l < kLeaves; ++l) {
      raw.append({"STRLEN", raw.keys[l]});
      for (int64_t j = 0; j < 256; ++j) raw.append({"GETRANGE", raw.keys[l], offs[j], ends[j]});
    }
    raw.append({"EXEC"});
    raw.replies(1 + kLeaves * 257);  // +OK and the +QUEUED replies
    void* r = nullptr;
    redisGetReply(raw.c, &r);
    const auto* exec = static_cast<redisReply*>(r);
    std::vector<at::Tensor> out;
    std::size_t e = 0;
    for (int l = 0; l < kLeaves; ++l) {
      at::Tensor t = at::empty({256, kWidth});
      char* p = static_cast<char*>(t.data_ptr());
      ++e;  // the STRLEN
      for (int64_t j = 0; j < 256; ++j)
        std::memcpy(p + j * kRowBytes, exec->element[e++]->str, kRowBytes);
      out.push_back(t);
    }
    freeReplyObject(r);
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * 256);
}

// One EVAL by hand: the script concatenates the rows of each key.
void BM_sample_256_10_leaves_lua_by_hand(benchmark::State& state) {
  store();
  Raw raw;
  auto idx = sample_index();
  const char* script =
      "local out = {} for k = 1, #KEYS do local parts = {} for j = 1, #ARGV, 2 do "
      "parts[#parts + 1] = redis.call('GETRANGE', KEYS[k], ARGV[j], ARGV[j + 1]) end "
      "out[k] = table.concat(parts) end return out";
  std::vector<std::string> args;
  for (int64_t j = 0; j < 256; ++j) {
    const int64_t o = idx[j].item<int64_t>() * kRowBytes;
    args.push_back(std::to_string(o));
    args.push_back(std::to_string(o + kRowBytes - 1));
  }
  const std::string nkeys = std::to_string(kLeaves);
  for (auto _ : state) {
    std::vector<std::string_view> cmd{"EVAL", script, nkeys};
    for (auto& k : raw.keys) cmd.push_back(k);
    for (auto& a : args) cmd.push_back(a);
    raw.append(cmd);
    void* r = nullptr;
    redisGetReply(raw.c, &r);
    auto* reply = static_cast<redisReply*>(r);
    std::vector<at::Tensor> out;
    for (std::size_t l = 0; l < reply->elements; ++l) {
      at::Tensor t = at::empty({256, kWidth});
      std::memcpy(t.data_ptr(), reply->element[l]->str, reply->element[l]->len);
      out.push_back(t);
    }
    freeReplyObject(r);
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * 256);
}

// A stream of single-row writes: 64 rows per iteration, one user call each
// (tensordict), against all 64 rows' SETRANGEs in one pipeline
// (redis-benchmark-style pipelining).
void BM_row_stream_64_td(benchmark::State& state) {
  auto& s = store();
  auto r = row();
  int64_t i = 0;
  for (auto _ : state)
    for (int k = 0; k < 64; ++k) s.index_put_({(i++ * 7919) % kRows}, r);
  state.SetItemsProcessed(state.iterations() * 64);
}

void BM_row_stream_64_floor(benchmark::State& state) {
  store();
  Raw raw;
  const auto leaves = row_leaves();
  int64_t i = 0;
  std::vector<std::string> offs(64);
  for (auto _ : state) {
    for (int k = 0; k < 64; ++k) {
      offs[k] = std::to_string(((i++ * 7919) % kRows) * kRowBytes);
      for (int l = 0; l < kLeaves; ++l)
        raw.append({"SETRANGE", raw.keys[l], offs[k],
                    std::string_view(static_cast<const char*>(leaves[l].data_ptr()), kRowBytes)});
    }
    raw.replies(std::size_t{64} * kLeaves);
  }
  state.SetItemsProcessed(state.iterations() * 64);
}

// from_schema of 100,000 transitions (obs uint8[84, 84, 3], action, reward,
// done): 2.1 GB on the server, no tensor byte sent.
td::Schema transitions() {
  return td::Schema{{"obs", {{84, 84, 3}, torch::kUInt8}},
                    {"action", {{4}, torch::kFloat32}},
                    {"reward", {{}, torch::kFloat32}},
                    {"done", {{}, torch::kBool}}};
}

void drop(const std::string& td_id) {
  server().command(
      {"EVAL",
       "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 0", "0",
       "tensordict:{" + td_id + "}:*"});
}

void BM_from_schema_100k_td(benchmark::State& state) {
  for (auto _ : state) {
    server().reset_stats();
    auto s = td::from_schema(transitions(), {100'000}, options("schema"));
    state.counters["bytes_sent"] = static_cast<double>(server().stat("total_net_input_bytes"));
    state.PauseTiming();
    drop("schema");
    state.ResumeTiming();
  }
}

void BM_from_schema_100k_floor(benchmark::State& state) {
  Raw raw;
  const std::string k = "tensordict:{schema}:";
  struct Leaf {
    std::string name, shape, dtype;
    int64_t row;
  };
  const std::vector<Leaf> leaves{
      {"obs", "[100000, 84, 84, 3]", "torch.uint8", int64_t{84} * 84 * 3},
      {"action", "[100000, 4]", "torch.float32", 16},
      {"reward", "[100000]", "torch.float32", 4},
      {"done", "[100000]", "torch.bool", 1}};
  for (auto _ : state) {
    raw.append({"SET", k + "__batch_size__", "[100000]"});
    raw.append({"SET", k + "__device__", ""});
    for (const auto& l : leaves) {
      raw.append({"SETRANGE", k + "d:" + l.name, std::to_string(100'000 * l.row - 1),
                  std::string_view("\0", 1)});
      raw.append({"HSET", k + "m:" + l.name, "shape", l.shape, "dtype", l.dtype});
      raw.append({"SADD", k + "__keys__", l.name});
    }
    raw.replies(2 + 3 * leaves.size());
    state.PauseTiming();
    drop("schema");
    state.ResumeTiming();
  }
}

void register_all() {
  // Each op twice: with MULTI/EXEC (the default, atomic) next to the same
  // transaction by hand, and as a plain pipeline (transaction = false) next
  // to the plain pipeline by hand, the fastest hand-written form.
  static const NamedBench benchmarks[] = {
      {"BM_row_write_10_leaves/tensordict", BM_row_write_10_leaves_td},
      {"BM_row_write_10_leaves/floor", BM_row_write_10_leaves_floor_transaction},
      {"BM_row_write_10_leaves_pipeline/tensordict", BM_row_write_10_leaves_td_no_transaction},
      {"BM_row_write_10_leaves_pipeline/floor", BM_row_write_10_leaves_floor},
      {"BM_sample_256_10_leaves/tensordict", BM_sample_256_10_leaves_td},
      {"BM_sample_256_10_leaves/floor", BM_sample_256_10_leaves_floor_transaction},
      {"BM_sample_256_10_leaves_pipeline/tensordict", BM_sample_256_10_leaves_td_no_transaction},
      {"BM_sample_256_10_leaves_pipeline/floor", BM_sample_256_10_leaves_floor},
      {"BM_sample_256_10_leaves_pipeline/lua_by_hand", BM_sample_256_10_leaves_lua_by_hand},
      {"BM_row_stream_64/tensordict", BM_row_stream_64_td},
      {"BM_row_stream_64/floor", BM_row_stream_64_floor},
  };
  register_min_time(benchmarks, 0.5);
  benchmark::RegisterBenchmark("BM_from_schema_100k/tensordict", BM_from_schema_100k_td)
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_from_schema_100k/floor", BM_from_schema_100k_floor)
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
