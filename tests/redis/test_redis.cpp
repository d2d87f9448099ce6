// The Redis storage against a real redis-server started by each test
// (tests/support/redis_server.h): Python's layout byte for byte, read back by
// the real Python tensordict, rows in every index form, one round trip per
// operation counted by the server, faults, several processes.

#include "support/redis_server.h"

#include <tensordict/storage/redis.h>
#include <tensordict/storage/redis_lazy_stack.h>

#include <sys/wait.h>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <sstream>

namespace {

namespace td = tensordict;
using td_test::on;
using td_test::RedisServer;
using namespace torch::indexing;

td::storage::Redis tcp(const RedisServer& server) {
  td::storage::Redis r;
  r.host = "127.0.0.1";
  r.port = server.port();
  return r;
}

td::TensorDict sample(int64_t n = 10) {
  td::TensorDict data({{"obs", torch::arange(n * 6, torch::kFloat32).view({n, 2, 3})},
                       {"action", torch::arange(n, torch::kInt64)},
                       {"done", torch::arange(n).remainder(3).eq(0)}},
                      {n});
  data.set({"next", "obs"}, torch::arange(n * 6, torch::kFloat32).view({n, 2, 3}) + 1000);
  return data;
}

std::set<std::string> lines(const std::string& s) {
  std::set<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.insert(l);
  return out;
}

void expect_same(const td::TensorDictBase& got, const td::TensorDictBase& want) {
  auto keys = want.keys(true, true);
  ASSERT_EQ(got.keys(true, true).size(), keys.size());
  for (const auto& k : keys) {
    SCOPED_TRACE(k.repr());
    at::Tensor a = got.get(k), b = want.get(k);
    EXPECT_EQ(a.sizes(), b.sizes());
    EXPECT_EQ(a.scalar_type(), b.scalar_type());
    EXPECT_TRUE(torch::equal(a, b));
  }
}

// ---- layout -----------------------------------------------------------------

TEST(Redis, GoldenLayoutOfSpec42) {
  RedisServer server;
  td::TensorDict data({{"obs", torch::arange(10, torch::kFloat32).view({5, 2})}, {"name", "hello"}},
                      {5});
  data.set({"nested", "x"}, torch::arange(5, torch::kInt64));
  auto store = td::redis::from_tensordict(data, on(server, "00000000-demo"));
  const std::string k = "tensordict:{00000000-demo}:";
  EXPECT_EQ(lines(server.command({"KEYS", k + "*"})),
            (std::set<std::string>{k + "__batch_size__", k + "__device__", k + "__keys__",
                                   k + "d:obs", k + "m:obs", k + "d:name", k + "m:name",
                                   k + "d:nested.x", k + "m:nested.x"}));
  const std::map<std::string, std::string> types{
      {"__batch_size__", "string"}, {"__device__", "string"}, {"__keys__", "set"},
      {"d:obs", "string"},          {"m:obs", "hash"},        {"d:name", "string"},
      {"m:name", "hash"},           {"d:nested.x", "string"}, {"m:nested.x", "hash"}};
  for (const auto& [suffix, type] : types)
    EXPECT_EQ(server.command({"TYPE", k + suffix}), type) << suffix;
  EXPECT_EQ(server.command({"GET", k + "__batch_size__"}), "[5]");
  EXPECT_EQ(server.command({"GET", k + "__device__"}), "");
  EXPECT_EQ(lines(server.command({"SMEMBERS", k + "__keys__"})),
            (std::set<std::string>{"obs", "name", "nested.x"}));
  const std::string obs = server.command({"GET", k + "d:obs"});
  ASSERT_EQ(obs.size(), 40u);
  EXPECT_EQ(std::memcmp(obs.data(), data.get("obs").data_ptr(), 40), 0);
  EXPECT_EQ(server.command({"HGET", k + "m:obs", "shape"}), "[5, 2]");
  EXPECT_EQ(server.command({"HGET", k + "m:obs", "dtype"}), "torch.float32");
  EXPECT_EQ(server.command({"HLEN", k + "m:obs"}), "2");
  EXPECT_EQ(server.command({"GET", k + "d:name"}), "\"hello\"");
  EXPECT_EQ(server.command({"HGET", k + "m:name", "is_non_tensor"}), "1");
  EXPECT_EQ(server.command({"HGET", k + "m:name", "encoding"}), "json");
  EXPECT_EQ(server.command({"HLEN", k + "m:name"}), "2");
  const std::string x = server.command({"GET", k + "d:nested.x"});
  ASSERT_EQ(x.size(), 40u);
  EXPECT_EQ(std::memcmp(x.data(), data.get({"nested", "x"}).data_ptr(), 40), 0);
  EXPECT_EQ(server.command({"HGET", k + "m:nested.x", "shape"}), "[5]");
  EXPECT_EQ(server.command({"HGET", k + "m:nested.x", "dtype"}), "torch.int64");
  // Python's JSON spacing for multi-dim batch sizes.
  auto two = td::redis::create(on(server, "two-dims"), {4, 3});
  EXPECT_EQ(server.command({"GET", "tensordict:{two-dims}:__batch_size__"}), "[4, 3]");
  EXPECT_EQ(td::redis::td_id(two), "two-dims");
}

TEST(Redis, DefaultTdIdIsUuid4AndPrefixIsUsed) {
  RedisServer server;
  auto opts = on(server);
  opts.prefix = "buf";
  auto store = td::redis::create(opts, {3});
  const std::string id = td::redis::td_id(store);
  ASSERT_EQ(id.size(), 36u);
  EXPECT_EQ(id[8], '-');
  EXPECT_EQ(id[14], '4');
  EXPECT_EQ(server.command({"EXISTS", "buf:{" + id + "}:__batch_size__"}), "1");
}

TEST(Redis, RealPythonReadsWhatCppWrites) {
  RedisServer server;
  auto data = sample(6);
  data.set_non_tensor("label", "cat");
  data.set("labels", td::NonTensorStack({"a", "b", "c", "d", "e", "f"}));
  auto store = td::redis::from_tensordict(data, on(server, "py-read"));
  store.index_put_({2}, data[5]);  // rows written by index must read back too
  const std::string script = std::string(TENSORDICT_REDIS_TEST_DIR) + "/read_store.py";
  const std::string cmd = std::string(TENSORDICT_PYTHON) + " " + script + " " + server.socket() +
                          " py-read > " + server.dir() + "/py.out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(server.dir() + "/py.out");
  std::string out((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK 6 leaves"), std::string::npos) << out;
}

// ---- whole entries ---------------------------------------------------------------

TEST(Redis, WholeGetSetKeysRemoveRenameClear) {
  RedisServer server;
  auto data = sample();
  auto store = td::redis::from_tensordict(data, on(server));
  expect_same(store, data);
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{10}));
  store.set("reward", torch::ones({10, 1}));
  EXPECT_TRUE(torch::equal(store.get("reward"), torch::ones({10, 1})));
  store.set_non_tensor("task", "push");
  EXPECT_EQ(store.get_non_tensor("task"), "push");
  store.rename_key_("reward", "r");
  EXPECT_FALSE(store.contains("reward"));
  EXPECT_TRUE(torch::equal(store.get("r"), torch::ones({10, 1})));
  store.del_("r");
  EXPECT_EQ(server.command({"SISMEMBER", td::redis::server_key(store, "__keys__"), "r"}), "0");
  EXPECT_EQ(server.command({"EXISTS", td::redis::server_key(store, "d:r")}), "0");
  store.del_("next");
  EXPECT_FALSE(store.contains("next"));
  EXPECT_EQ(server.command({"EXISTS", td::redis::server_key(store, "d:next.obs")}), "0");
  // In-place whole-leaf writes.
  store.set_("action", torch::full({10}, 7, torch::kInt64));
  EXPECT_TRUE(torch::equal(store.get("action"), torch::full({10}, 7, torch::kInt64)));
  td::redis::clear(store);
  EXPECT_EQ(server.command({"KEYS", "tensordict:{" + td::redis::td_id(store) + "}:*"}), "");
  EXPECT_EQ(store.num_keys(), 0u);
}

TEST(Redis, FromStoreReattachesAndSeesOtherProcessesKeys) {
  RedisServer server;
  auto data = sample();
  auto store = td::redis::from_tensordict(data, on(server));
  auto other = td::redis::from_store(on(server, td::redis::td_id(store)));
  expect_same(other, data);
  // A key added through one handle is seen by the other (a cache miss re-reads).
  store.set("new", torch::ones({10}));
  EXPECT_TRUE(other.contains("new"));
  EXPECT_TRUE(torch::equal(other.get("new"), torch::ones({10})));
  // A shape changed through one handle: the other's row read refuses the
  // stale shape and the next call sees the new one.
  store.set("new", torch::ones({10, 2}));
  EXPECT_THROW(other.index({Slice(0, 10)}), td::StorageError);
  EXPECT_EQ(other.index({1}).get("new").sizes(), (std::vector<int64_t>{2}));
}

TEST(Redis, ToTensordictIsOneRoundTrip) {
  RedisServer server;
  auto data = sample();
  auto store = td::redis::from_tensordict(data, on(server));
  server.reset_stats();
  const auto before = td::redis::round_trips(store);
  td::TensorDict local = store.to_tensordict();
  EXPECT_EQ(td::redis::round_trips(store) - before, 1);
  EXPECT_EQ(server.command_calls(),
            (std::map<std::string, long>{{"exec", 1}, {"get", 4}, {"multi", 1}, {"strlen", 4}}));
  expect_same(local, data);
}

// ---- rows ----------------------------------------------------------------------

TEST(Redis, RowReadsOfEveryIndexForm) {
  RedisServer server;
  auto data = sample();
  auto store = td::redis::from_tensordict(data, on(server));
  const std::vector<std::vector<at::indexing::TensorIndex>> indices{
      {3},
      {-1},
      {Slice(2, 7)},
      {Slice(1, None, 3)},
      {Slice(8, 3)},
      {torch::tensor({7, 2, 2, 0, 9})},
      {torch::arange(10).remainder(4).eq(1)},
      {Slice(), None},
      {torch::empty({0}, torch::kLong)}};
  for (const auto& idx : indices) {
    SCOPED_TRACE(std::to_string(&idx - indices.data()));
    server.reset_stats();
    const auto before = td::redis::round_trips(store);
    auto got = store.index(idx);
    const auto trips = td::redis::round_trips(store) - before;
    auto calls = server.command_calls();
    expect_same(got, data.index(idx));
    // One round trip: one MULTI/EXEC transaction of GETRANGEs (nothing for
    // an empty selection; GETs for index forms that are not rows).
    const bool empty = got.get("action").numel() == 0;
    EXPECT_EQ(trips, empty ? 0 : 1);
    EXPECT_EQ(calls["exec"], empty ? 0 : 1);
    for (const auto& [cmd, n] : calls)
      EXPECT_TRUE(cmd == "multi" || cmd == "exec" || cmd == "strlen" || cmd == "getrange" ||
                  cmd == "get")
          << cmd;
  }
  EXPECT_THROW(store.index({10}), td::IndexError);
  EXPECT_THROW(store.index({-11}), td::IndexError);
  EXPECT_THROW(store.index({torch::tensor({1, 10})}), td::IndexError);
}

TEST(Redis, RowWritesOfEveryIndexFormInOneRoundTrip) {
  RedisServer server;
  auto data = sample();
  auto store = td::redis::from_tensordict(data, on(server));
  auto reference = data.clone();
  int64_t v = 0;
  const std::vector<std::vector<at::indexing::TensorIndex>> indices{
      {3},
      {-1},
      {Slice(2, 7)},
      {Slice(1, None, 3)},
      {torch::tensor({7, 2, 0})},
      {torch::arange(10).remainder(4).eq(1)}};
  for (const auto& idx : indices) {
    SCOPED_TRACE(std::to_string(&idx - indices.data()));
    auto row = (reference.index(idx) * 0 + (++v)).to_tensordict();
    server.reset_stats();
    const auto before = td::redis::round_trips(store);
    store.index_put_(idx, row);
    EXPECT_EQ(td::redis::round_trips(store) - before, 1);
    auto calls = server.command_calls();
    reference.index_put_(idx, row);
    // One script (all leaves or none): the length of each leaf checked,
    // then its ranges written.
    EXPECT_EQ(calls["eval"], 1);
    EXPECT_EQ(calls["strlen"], 4);
    for (const auto& [cmd, n] : calls)
      EXPECT_TRUE(cmd == "eval" || cmd == "strlen" || cmd == "setrange") << cmd;
    expect_same(store.to_tensordict(), reference);
  }
  // update_at_ with a subset of the keys.
  td::TensorDict part({{"action", torch::tensor({-5})}}, {1});
  server.reset_stats();
  store.update_at_(part, {Slice(4, 5)});
  EXPECT_EQ(server.command_calls(),
            (std::map<std::string, long>{{"eval", 1}, {"strlen", 1}, {"setrange", 1}}));
  EXPECT_EQ(store.get("action")[4].item<int64_t>(), -5);
  // A whole 2-D index (General selection): read, patch, write back.
  auto grid =
      td::redis::from_tensordict(td::TensorDict({{"a", torch::zeros({3, 4})}}, {3, 4}), on(server));
  grid.index_put_({torch::tensor({0, 2}), torch::tensor({1, 3})}, torch::ones({2}));
  auto want = torch::zeros({3, 4});
  want.index_put_({torch::tensor({0, 2}), torch::tensor({1, 3})}, torch::ones({2}));
  EXPECT_TRUE(torch::equal(grid.get("a"), want));
  // Box with two partial dims.
  EXPECT_TRUE(torch::equal(grid.index({Slice(1, 3), Slice(None, None, 2)}).get("a"),
                           want.index({Slice(1, 3), Slice(None, None, 2)})));
}

TEST(Redis, FirstIndexedWriteOfANewKeyAllocatesIt) {
  RedisServer server;
  auto store = td::redis::create(on(server), {5});
  td::TensorDict row({{"obs", torch::full({3}, 2.0)}}, {});
  store.index_put_({1}, row);
  EXPECT_EQ(server.command({"STRLEN", td::redis::server_key(store, "d:obs")}), "60");
  EXPECT_EQ(server.command({"HGET", td::redis::server_key(store, "m:obs"), "shape"}), "[5, 3]");
  auto want = torch::zeros({5, 3});
  want[1] = 2.0;
  EXPECT_TRUE(torch::equal(store.get("obs"), want));
}

TEST(Redis, FromSchemaPreallocatesWithoutSendingTensorData) {
  RedisServer server;
  td::Schema schema{{"obs", {{84, 84, 3}, torch::kUInt8}},
                    {"action", {{4}, torch::kFloat32}},
                    {{"next", "obs"}, {{84, 84, 3}, torch::kUInt8}}};
  server.reset_stats();
  auto store = td::from_schema(schema, {1000}, "redis",
                               {{"unix_socket", server.socket()}, {"prefix", "pre"}});
  const long sent = server.stat("total_net_input_bytes");
  EXPECT_LT(sent, 4096) << "tensor bytes were sent";  // the leaves hold 42 MB
  EXPECT_EQ(server.command_calls()["setrange"], 3);
  EXPECT_EQ(server.command({"STRLEN", td::redis::server_key(store, "d:next.obs")}),
            std::to_string(1000 * 84 * 84 * 3));
  EXPECT_EQ(store.get({"next", "obs"}).sum().item<int64_t>(), 0);
  EXPECT_EQ(store.get("action").sizes(), (std::vector<int64_t>{1000, 4}));
  EXPECT_THROW(
      td::from_schema(schema, {2}, "redis", {{"unix_socket", server.socket()}, {"portt", 1}}),
      td::SchemaError);
}

TEST(Redis, TcpAndAuthAndDb) {
  RedisServer server({.password = "s3cret"});
  auto opts = tcp(server);
  opts.password = "s3cret";
  opts.db = 3;
  auto store = td::redis::from_tensordict(sample(), opts);
  EXPECT_EQ(server.command({"SELECT", "3"}), "OK");
  opts.password = "wrong";
  opts.td_id = td::redis::td_id(store);
  try {
    td::redis::from_store(opts);
    FAIL() << "no error";
  } catch (const td::ConnectionError& e) {
    EXPECT_NE(std::string(e.what()).find("authentication failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(server.port())),
              std::string::npos);
  }
}

// ---- faults -----------------------------------------------------------------------

TEST(Redis, ServerNotRunningNamesHostAndPort) {
  int port = 0;
  {
    RedisServer server;
    port = server.port();
  }  // stopped: nothing listens there now
  td::storage::Redis opts;
  opts.host = "127.0.0.1";
  opts.port = port;
  try {
    td::redis::create(opts, {3});
    FAIL() << "no error";
  } catch (const td::ConnectionError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

TEST(Redis, UnknownTdIdIsKeyError) {
  RedisServer server;
  try {
    td::redis::from_store(on(server, "no-such-store"));
    FAIL() << "no error";
  } catch (const td::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-store"), std::string::npos) << e.what();
  }
}

TEST(Redis, CorruptMetadataIsFormatError) {
  RedisServer server;
  auto store = td::redis::from_tensordict(sample(), on(server, "corrupt"));
  const std::string k = "tensordict:{corrupt}:";
  for (auto [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"shape", "banana"}, {"shape", "[10, -2]"}, {"dtype", "torch.quaternion"}}) {
    server.command({"HSET", k + "m:obs", field, value});
    try {
      td::redis::from_store(on(server, "corrupt"));
      FAIL() << "no error for " << field << "=" << value;
    } catch (const td::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(k + "m:obs"), std::string::npos) << e.what();
    }
    server.command({"HSET", k + "m:obs", "shape", "[10, 2, 3]", "dtype", "torch.float32"});
  }
  server.command({"SET", k + "d:obs", "short"});
  auto again = td::redis::from_store(on(server, "corrupt"));
  EXPECT_THROW(again.get("obs"), td::FormatError);
  // The other leaves are intact.
  EXPECT_TRUE(torch::equal(again.get("action"), torch::arange(10)));
}

TEST(Redis, WrongShapesDtypesAndLockedStoreChangeNothing) {
  RedisServer server;
  auto data = sample();
  auto store = td::redis::from_tensordict(data, on(server));
  EXPECT_THROW(store.set_("action", torch::zeros({3})), td::ShapeError);
  EXPECT_THROW(store.set("action", torch::zeros({3})), td::ShapeError);
  EXPECT_THROW(store.index_put_({1}, td::TensorDict({{"obs", torch::zeros({5})}}, {})),
               td::ShapeError);
  store.lock_();
  EXPECT_THROW(store.set("x", torch::zeros({10})), td::LockedError);
  EXPECT_THROW(store.del_("action"), td::LockedError);
  store.unlock_();
  expect_same(store, data);
}

TEST(Redis, CommandTimeoutIsTimeoutError) {
  RedisServer server;
  auto opts = on(server);
  opts.timeout = 0.2;
  auto store = td::redis::from_tensordict(sample(), opts);
  server.command({"CLIENT", "PAUSE", "1500", "ALL"});
  EXPECT_THROW(store.index({1}), td::TimeoutError);
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  EXPECT_TRUE(torch::equal(store.index({1}).get("action"), torch::tensor(1)));  // reconnected
}

TEST(Redis, ServerKilledMidRunThenReconnects) {
  RedisServer server({.persistent = true});
  auto opts = tcp(server);
  auto store = td::redis::from_tensordict(sample(), opts);
  store.index_put_({4}, sample()[0] * 0 + 42);
  server.kill();
  try {
    store.index_put_({5}, sample()[0] * 0 + 43);
    FAIL() << "no error";
  } catch (const td::ConnectionError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(server.port())),
              std::string::npos)
        << e.what();
  }
  server.restart();
  auto row = store.index({4});                       // the next call reconnects
  EXPECT_EQ(row.get("action").item<int64_t>(), 42);  // acknowledged before the fault: intact
  EXPECT_EQ(store.index({6}).get("action").item<int64_t>(), 6);
}

// Python refuses shape views on a TensorDictStore ("call to_tensordict() or
// to_local() first"): every read is a copy, so a view could not write through.
TEST(Redis, ViewsAndInPlaceMemmapAreRefusedWithAHintToCopy) {
  RedisServer server;
  td::TensorDict src({{"x", torch::arange(24).view({2, 3, 4})}}, {2, 3});
  auto store = td::redis::from_tensordict(src, on(server, "views"));
  const auto trips = td::redis::round_trips(store);
  for (auto op : std::vector<std::function<void()>>{
           [&] { store.view({6}); },
           [&] {
             store.permute({1, 0});
           },
           [&] { store.transpose(0, 1); }, [&] { store.unsqueeze(0); }, [&] { store.squeeze(); },
           [&] { store.memmap_(server.dir() + "/mm"); }}) {
    EXPECT_THROW(op(), td::UnsupportedError);
  }
  EXPECT_EQ(td::redis::round_trips(store), trips);  // refused before reaching the server
  EXPECT_TRUE(
      store.to_tensordict().permute({1, 0}).get("x").equal(src.get("x").permute({1, 0, 2})));
  EXPECT_TRUE(store.reshape({6}).get("x").equal(src.get("x").reshape({6, 4})));  // a copy
}

// ---- several processes -----------------------------------------------------------------

TEST(Redis, TwoWritersAndAReaderLoseAndTearNoRow) {
  RedisServer server;
  constexpr int64_t n = 200;
  td::Schema schema{{"a", {{16}, torch::kFloat32}}, {"b", {{3}, torch::kInt64}}};
  auto store = td::from_schema(schema, {n}, on(server, "mp"));
  auto spawn = [&](const std::string& mode) {
    const std::string cmd = std::string(TENSORDICT_REDIS_WORKER) + " " + mode + " " +
                            server.socket() + " mp " + std::to_string(n) + " > " + server.dir() +
                            "/" + mode + ".out 2>&1";
    return std::async(std::launch::async, [cmd] { return std::system(cmd.c_str()); });
  };
  auto w0 = spawn("write0"), w1 = spawn("write1"), r = spawn("read");
  EXPECT_EQ(w0.get(), 0);
  EXPECT_EQ(w1.get(), 0);
  EXPECT_EQ(r.get(), 0) << std::ifstream(server.dir() + "/read.out").rdbuf();
  auto all = store.to_tensordict();
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(torch::equal(all.get("a")[i], torch::full({16}, static_cast<float>(i + 1)))) << i;
    EXPECT_TRUE(torch::equal(all.get("b")[i], torch::full({3}, i + 1))) << i;
  }
}

TEST(Redis, JsonArrayElementsWrittenByTwoProcessesAreAllKept) {
  RedisServer server;
  constexpr int64_t n = 400;
  td::TensorDict data({{"x", torch::zeros({n})}}, {n});
  data.set("label", td::NonTensorStack(std::vector<nlohmann::json>(n, "")));
  auto store = td::redis::from_tensordict(data, on(server, "labels"));
  // Both writers start at the same moment, so that they overlap.
  const auto start =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() + std::chrono::seconds(2)).time_since_epoch())
          .count();
  auto spawn = [&](const std::string& mode) {
    const std::string cmd = "TD_START_MS=" + std::to_string(start) + " " + TENSORDICT_REDIS_WORKER +
                            " " + mode + " " + server.socket() + " labels " + std::to_string(n) +
                            " > " + server.dir() + "/" + mode + ".out 2>&1";
    return std::async(std::launch::async, [cmd] { return std::system(cmd.c_str()); });
  };
  auto a = spawn("label0"), b = spawn("label1");
  EXPECT_EQ(a.get(), 0) << std::ifstream(server.dir() + "/label0.out").rdbuf();
  EXPECT_EQ(b.get(), 0) << std::ifstream(server.dir() + "/label1.out").rdbuf();
  auto again = td::redis::from_store(on(server, "labels"));
  const auto labels = again.get_non_tensor("label");
  ASSERT_EQ(labels.size(), static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(labels[i], "row" + std::to_string(i)) << i;
  EXPECT_EQ(server.command({"HGET", "tensordict:{labels}:m:label", "encoding"}), "json_array");
}

}  // namespace

// ---- the handle type -----------------------------------------------------------------

// TensorDictStore is the handle of every Redis store (issue #33): from_schema,
// from_store and from_tensordict return it, nested levels are one, and the
// store operations are members; the free functions still forward.
TEST(Redis, TensorDictStoreIsTheHandleTypeWithTheStoreOperationsAsMembers) {
  RedisServer server;
  td::Schema schema{{"obs", {{3}, torch::kFloat32}}, {"next.reward", {{}, torch::kFloat32}}};
  td::TensorDictStore store = td::from_schema(schema, {8}, on(server, "typed"));
  EXPECT_TRUE(store.is<td::TensorDictStore>());
  EXPECT_FALSE(store.is<td::LazyStackedTensorDictStore>());
  EXPECT_EQ(store.type_name(), "TensorDictStore");
  EXPECT_EQ(store.td_id(), "typed");
  EXPECT_EQ(store.td_id(), td::redis::td_id(store));
  EXPECT_EQ(store.server_key("__batch_size__"), "tensordict:{typed}:__batch_size__");
  EXPECT_FALSE(store.is_sharded());
  const auto before = store.round_trips();
  store.index_put_({2}, td::TensorDict({{"obs", torch::ones({3})}}, {}));
  EXPECT_EQ(store.round_trips() - before, 1);
  // A nested level is a TensorDictStore too, through as<>().
  td::TensorDictBase base = store.get_tensordict("next");
  auto nested = base.as<td::TensorDictStore>();
  EXPECT_EQ(nested.td_id(), "typed");
  // Attach from another handle, typed.
  auto same = td::TensorDictStore::from_store(on(server, "typed"));
  EXPECT_TRUE(torch::equal(same.get("obs")[2], torch::ones({3})));
  // Not a store: as<> is a TypeError naming both types.
  td::TensorDictBase memory = sample();
  EXPECT_FALSE(memory.is<td::TensorDictStore>());
  try {
    (void)memory.as<td::TensorDictStore>();
    ADD_FAILURE() << "no error";
  } catch (const td::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("TensorDictStore"), std::string::npos) << e.what();
  }
  // A sharded store is one, with its blocks as members.
  auto sharded_opts = on(server, "typed-sharded");
  sharded_opts.sharded = true;
  sharded_opts.block_rows = 4;
  td::TensorDictStore sharded = td::TensorDictStore::from_tensordict(sample(), sharded_opts);
  EXPECT_TRUE(sharded.is_sharded());
  EXPECT_EQ(sharded.block_rows(), 4);
  EXPECT_EQ(sharded.block_ids().size(), 3u);
  store.clear();
  EXPECT_EQ(server.command({"EXISTS", "tensordict:{typed}:__batch_size__"}), "0");
}
