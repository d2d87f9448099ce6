// The Redis storage on a real 3-master Redis Cluster started by each test
// (tests/support/redis_cluster.h): routing by hash slot, a slot migration
// followed through ASK then MOVED, no reachable seed; and faults: a
// persistent server (and a cluster master) killed with SIGKILL mid-run and
// restarted on its port and directory loses no acknowledged row.

#include "support/redis_cluster.h"

#include <tensordict/storage/redis.h>

#include <atomic>
#include <fstream>
#include <future>

namespace {

namespace td = tensordict;
using td_test::RedisCluster;
using td_test::RedisServer;

td::storage::Redis on_cluster(const RedisCluster& c, std::size_t seed = 0, std::string id = {}) {
  td::storage::Redis r;
  r.host = "127.0.0.1";
  r.port = c.port(seed);
  r.cluster = true;
  r.td_id = std::move(id);
  return r;
}

int slot_of(RedisCluster& c, const std::string& key) {
  return std::stoi(c.node(0).command({"CLUSTER", "KEYSLOT", key}));
}

// A td_id whose keys live on master `want` (not the seed, to test routing).
std::string id_on(RedisCluster& c, std::size_t want, const std::string& stem) {
  for (int k = 0;; ++k) {
    const std::string id = stem + std::to_string(k);
    if (c.owner(slot_of(c, "tensordict:{" + id + "}:__keys__")) == want) return id;
  }
}

td::TensorDict rows(int64_t n, int64_t base = 0) {
  return td::TensorDict({{"obs", torch::arange(n * 6, torch::kFloat32).view({n, 6}) + base},
                         {"action", torch::arange(n, torch::kInt64) + base}},
                        {n});
}

td::Schema schema() {
  return td::Schema{{"obs", {{6}, torch::kFloat32}}, {"action", {{}, torch::kInt64}}};
}

TEST(RedisCluster, StoreLivesOnTheNodeOfItsSlotAndWorksFromEveryHandle) {
  RedisCluster cluster;
  const std::string id = id_on(cluster, 2, "routed");
  // By name, with string options: seed is node 0, the store lives on node 2.
  auto store = td::from_schema(
      schema(), {32}, "redis",
      {{"host", "127.0.0.1"}, {"port", cluster.port(0)}, {"cluster", true}, {"td_id", id}});
  EXPECT_EQ(td::redis::td_id(store), id);
  const std::string k = "tensordict:{" + id + "}:";
  EXPECT_EQ(cluster.node(2).command({"EXISTS", k + "d:obs", k + "m:obs", k + "__keys__"}), "3");
  EXPECT_EQ(cluster.node(2).command({"GET", k + "__batch_size__"}), "[32]");
  EXPECT_EQ(cluster.node(0).command({"DBSIZE"}), "0");
  EXPECT_EQ(cluster.node(1).command({"DBSIZE"}), "0");

  // One round trip per row operation, as on one server.
  const auto before = td::redis::round_trips(store);
  store.index_put_({torch::arange(4, 12)}, rows(8, 100));
  EXPECT_EQ(td::redis::round_trips(store), before + 1);
  auto got = store.index({torch::tensor({11, 4, 7})});
  EXPECT_EQ(td::redis::round_trips(store), before + 2);
  EXPECT_TRUE(torch::equal(got.get("action"), torch::tensor({107, 100, 103})));

  // A second handle through other seeds (a list, as from_schema's "seeds").
  td::storage::Redis other;
  other.seeds = {"127.0.0.1:1", cluster.address(1), cluster.address(2)};  // the first is down
  other.td_id = id;
  auto same = td::redis::from_store(other);
  EXPECT_EQ(same.batch_size().vec(), std::vector<int64_t>{32});
  EXPECT_TRUE(torch::equal(same.index({torch::arange(4, 12)}).get("obs"), rows(8, 100).get("obs")));
  same.index_put_({0}, rows(1, 7)[0]);
  EXPECT_EQ(store.index({0}).get("action").item<int64_t>(), 7);

  // Whole-tensordict uploads and reads, and stores of other slots at once.
  auto a = td::redis::from_tensordict(rows(5), on_cluster(cluster, 1, id_on(cluster, 0, "a")));
  auto b = td::redis::from_tensordict(rows(5, 50), on_cluster(cluster, 1, id_on(cluster, 1, "b")));
  EXPECT_TRUE(torch::equal(a.to_tensordict().get("obs"), rows(5).get("obs")));
  EXPECT_TRUE(torch::equal(b.to_tensordict().get("obs"), rows(5, 50).get("obs")));
  td::redis::clear(a);
  EXPECT_EQ(cluster.node(0).command({"DBSIZE"}), "0");
}

TEST(RedisCluster, SlotMigrationIsFollowedThroughAskThenMoved) {
  RedisCluster cluster;
  const std::string id = id_on(cluster, 0, "moving");
  const int slot = slot_of(cluster, "tensordict:{" + id + "}:x");
  auto store = td::from_schema(schema(), {16}, on_cluster(cluster, 0, id));
  store.index_put_({torch::arange(16)}, rows(16));

  // Mid-migration: the keys already sit on node 1, node 0 answers ASK.
  cluster.begin_migration(slot, 0, 1);
  cluster.migrate_keys(slot, 0, 1);
  EXPECT_EQ(cluster.node(0).command({"DBSIZE"}), "0");
  auto t0 = td::redis::round_trips(store);
  store.index_put_({3}, rows(1, 300)[0]);
  EXPECT_EQ(td::redis::round_trips(store), t0 + 2);  // node 0 (ASK), then ASKING + write on node 1
  EXPECT_EQ(store.index({3}).get("action").item<int64_t>(), 300);
  EXPECT_TRUE(torch::equal(store.index({torch::tensor({3, 15})}).get("obs"),
                           torch::stack({rows(1, 300).get("obs")[0], rows(16).get("obs")[15]})));

  // Migration finished: node 0 answers MOVED, the client learns the new map.
  cluster.end_migration(slot, 1);
  t0 = td::redis::round_trips(store);
  store.index_put_({5}, rows(1, 500)[0]);
  EXPECT_EQ(td::redis::round_trips(store), t0 + 3);  // MOVED, CLUSTER SLOTS, the write
  t0 = td::redis::round_trips(store);
  EXPECT_EQ(store.index({5}).get("action").item<int64_t>(), 500);
  EXPECT_EQ(td::redis::round_trips(store), t0 + 1);  // the map is known again
  const std::string k = "tensordict:{" + id + "}:";
  EXPECT_EQ(cluster.node(1).command({"GETRANGE", k + "d:action", "40", "47"}).size(), 8u);
  EXPECT_EQ(cluster.node(0).command({"DBSIZE"}), "0");
  // A fresh handle finds it on node 1 directly.
  auto again = td::redis::from_store(on_cluster(cluster, 2, id));
  EXPECT_EQ(again.index({3}).get("action").item<int64_t>(), 300);
}

TEST(RedisCluster, NoReachableSeedIsConnectionError) {
  const int a = RedisServer::free_port(), b = RedisServer::free_port();
  td::storage::Redis r;
  r.seeds = {"127.0.0.1:" + std::to_string(a), "127.0.0.1:" + std::to_string(b)};
  try {
    td::redis::create(r, {4});
    FAIL() << "no error";
  } catch (const td::ConnectionError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot reach any node of the Redis cluster"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(b)), std::string::npos) << m;
  }
  r.seeds = {"no-port"};
  EXPECT_THROW(td::redis::create(r, {4}), td::ValueError);
  // A server that is not a cluster node.
  RedisServer plain;
  td::storage::Redis p;
  p.host = "127.0.0.1";
  p.port = plain.port();
  p.cluster = true;
  try {
    td::redis::create(p, {4});
    FAIL() << "no error";
  } catch (const td::StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("not a cluster node"), std::string::npos) << e.what();
  }
  EXPECT_EQ(plain.command({"DBSIZE"}), "0");
}

// ---- sharded stores ----------------------------------------------------------------

struct Replay : td::TypedTensorDict<Replay> {
  TENSORDICT_FIELDS(obs, action);
};
struct Transition : td::TensorClass<Transition> {
  TENSORDICT_FIELDS(obs, action);
};

td::Schema replay_schema() {
  return td::Schema{{"obs", {{84, 84, 3}, torch::kUInt8}}, {"action", {{4}, torch::kFloat32}}};
}

// Row i: obs bytes i % 251, action [i, i+1, i+2, i+3] (what read_sharded.py checks).
td::TensorDict replay_rows(const at::Tensor& idx) {
  const int64_t n = idx.numel();
  at::Tensor obs = idx.remainder(251).to(torch::kUInt8).view({n, 1, 1, 1}).expand({n, 84, 84, 3});
  at::Tensor action = idx.to(torch::kFloat32).unsqueeze(1) + torch::arange(4, torch::kFloat32);
  return td::TensorDict({{"obs", obs.contiguous()}, {"action", action}}, {n});
}

void expect_equal(const td::TensorDictBase& got, const td::TensorDictBase& want) {
  for (const auto& k : want.keys(true, true)) {
    SCOPED_TRACE(k.repr());
    ASSERT_EQ(got.get(k).sizes(), want.get(k).sizes());
    EXPECT_TRUE(torch::equal(got.get(k), want.get(k)));
  }
}

TEST(RedisSharded, BlocksFitTheServerStringLimitAndEveryIndexFormWorks) {
  RedisServer server({.extra = {"--proto-max-bulk-len", "1mb"}});
  constexpr int64_t n = 200;
  td::storage::Redis r;
  r.unix_socket = server.socket();
  r.sharded = true;
  auto store = td::from_schema(replay_schema(), {n}, r);
  // 1 MiB / 21168 bytes per obs row = 49 rows per block, 5 blocks.
  EXPECT_EQ(td::redis::block_rows(store), 49);
  const auto ids = td::redis::block_ids(store);
  ASSERT_EQ(ids.size(), 5u);
  const std::string id = td::redis::td_id(store);
  EXPECT_EQ(server.command({"EXISTS", "tensordict:{" + id + "}:__shards__"}), "1");
  EXPECT_EQ(server.command({"EXISTS", "tensordict:{" + id + "}:__batch_size__"}), "0");
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const std::string b = "tensordict:{" + ids[k] + "}:";
    const int64_t rows = k + 1 < ids.size() ? 49 : n - 4 * 49;
    EXPECT_EQ(server.command({"GET", b + "__batch_size__"}), "[" + std::to_string(rows) + "]");
    EXPECT_EQ(std::stoll(server.command({"STRLEN", b + "d:obs"})), rows * 21168);
    EXPECT_LE(std::stoll(server.command({"STRLEN", b + "d:obs"})), 1024 * 1024);
    EXPECT_EQ(server.command({"HGET", b + "m:obs", "shape"}),
              "[" + std::to_string(rows) + ", 84, 84, 3]");
  }
  EXPECT_EQ(store.get("obs").sizes(), (std::vector<int64_t>{n, 84, 84, 3}));

  // Writes in every row form, mirrored in a local tensordict.
  td::TensorDict local = replay_rows(torch::zeros({n}, torch::kLong));
  local.set("obs", local.get("obs").clone());
  local.get("obs").zero_();
  local.get("action").zero_();
  auto put = [&](std::vector<at::indexing::TensorIndex> idx, const at::Tensor& rows) {
    store.index_put_(idx, replay_rows(rows));
    local.index_put_(idx, replay_rows(rows));
  };
  put({torch::randperm(n).slice(0, 0, 150)}, torch::randperm(n).slice(0, 0, 150));
  put({at::indexing::Slice(40, 110)}, torch::arange(40, 110));  // across three blocks
  put({at::indexing::Slice(3, 190, 7)}, torch::arange(3, 190, 7));
  store.index_put_({-1}, replay_rows(torch::tensor({199}))[0]);
  local.index_put_({-1}, replay_rows(torch::tensor({199}))[0]);
  expect_equal(store.to_tensordict(), local);

  // Reads in every row form.
  const at::Tensor random = torch::randint(n, {64});
  expect_equal(store.index({random}), local.index({random}));
  expect_equal(store.index({at::indexing::Slice(45, 150)}),
               local.index({at::indexing::Slice(45, 150)}));
  expect_equal(store.index({at::indexing::Slice(1, 200, 9)}),
               local.index({at::indexing::Slice(1, 200, 9)}));
  expect_equal(store.index({97}), local.index({97}));
  const at::Tensor mask = torch::arange(n).remainder(3).eq(0);
  expect_equal(store.index({mask}), local.index({mask}));
  expect_equal(store.index({random.view({8, 8})}), local.index({random.view({8, 8})}));

  // Two batch dims: boxes over both (dim 0 from the blocks, dim 1 here) and a
  // 2-D mask (read whole, selected here; written back whole).
  {
    td::storage::Redis two = r;
    two.block_rows = 7;
    td::TensorDict grid({{"x", torch::arange(60 * 3 * 2, torch::kFloat32).view({60, 3, 2})}},
                        {60, 3});
    auto g = td::redis::from_tensordict(grid, two);
    EXPECT_EQ(td::redis::block_ids(g).size(), 9u);
    using at::indexing::Slice;
    for (auto idx : std::vector<std::vector<at::indexing::TensorIndex>>{
             {Slice(5, 40), 1}, {10, Slice(0, 2)}, {Slice(1, 50, 4), 2}, {Slice(), Slice(1, 3)}})
      expect_equal(g.index(idx), grid.index(idx));
    const at::Tensor m2 = torch::rand({60, 3}).gt(0.5);
    expect_equal(g.index({m2}), grid.index({m2}));
    g.index_put_({Slice(20, 30), 1}, grid.index({Slice(20, 30), 1}) * -1);
    grid.index_put_({Slice(20, 30), 1}, grid.index({Slice(20, 30), 1}) * -1);
    g.index_put_({m2}, grid.index({m2}) + 0.5);
    grid.index_put_({m2}, grid.index({m2}) + 0.5);
    expect_equal(g.to_tensordict(), grid);
    td::redis::clear(g);
  }

  // Every row now holds its own number: Python reads the blocks alone.
  store.index_put_({torch::arange(n)}, replay_rows(torch::arange(n)));
  const std::string cmd = std::string(TENSORDICT_PYTHON) + " " + TENSORDICT_REDIS_TEST_DIR +
                          "/read_sharded.py " + server.socket() + " " + id + " > " + server.dir() +
                          "/py.out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream py(server.dir() + "/py.out");
  std::string out((std::istreambuf_iterator<char>(py)), {});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK 200 rows in 5 blocks"), std::string::npos) << out;

  // Re-attached by the manifest's id; writes through one handle are seen by the other.
  td::storage::Redis again = r;
  again.sharded = false;  // from_store finds the manifest
  again.td_id = id;
  auto other = td::redis::from_store(again);
  EXPECT_EQ(other.batch_size().vec(), std::vector<int64_t>{n});
  EXPECT_EQ(td::redis::block_ids(other), ids);
  expect_equal(other.index({random}), replay_rows(random));
  other.index_put_({150}, replay_rows(torch::tensor({7}))[0]);
  EXPECT_EQ(store.index({150}).get("action")[0].item<float>(), 7.0f);

  // Whole leaves, nested levels, non-tensors, removal.
  store.set({"next", "reward"}, torch::arange(n, torch::kFloat32));
  store.set("tag", "sharded");
  // (the other handle learns of a new key on its first miss, as a store does)
  EXPECT_TRUE(torch::equal(other.get({"next", "reward"}), torch::arange(n, torch::kFloat32)));
  EXPECT_TRUE(torch::equal(other.index({torch::tensor({0, 100, 199})}).get({"next", "reward"}),
                           torch::tensor({0.f, 100.f, 199.f})));
  EXPECT_EQ(other.get_non_tensor("tag"), "sharded");
  EXPECT_EQ(server.command({"GET", "tensordict:{" + ids[3] + "}:d:tag"}), "\"sharded\"");
  store.pop("next");
  EXPECT_EQ(server.command({"EXISTS", "tensordict:{" + ids[2] + "}:d:next.reward"}), "0");

  // A row bigger than the limit, and blocks forced bigger than it.
  td::Schema big{{"frame", {{1100, 1000}, torch::kUInt8}}};
  try {
    td::from_schema(big, {4}, r);
    FAIL() << "no error";
  } catch (const td::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("one row of 'frame' is 1100000 bytes"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("proto-max-bulk-len (1048576 bytes)"), std::string::npos)
        << e.what();
  }
  td::storage::Redis forced = r;
  forced.block_rows = 100;
  EXPECT_THROW(td::from_schema(replay_schema(), {n}, forced), td::ValueError);

  td::redis::clear(store);
  EXPECT_EQ(server.command({"DBSIZE"}), "0");
}

TEST(RedisSharded, ConfigRefusedMeansTheDefault512MbLimit) {
  // CONFIG renamed away (as on managed services): the limit is Redis's default.
  RedisServer server({.extra = {"--rename-command", "CONFIG", ""}});
  td::storage::Redis r;
  r.unix_socket = server.socket();
  r.sharded = true;
  r.block_rows = 1000;  // 1000 rows of 1 MiB: over the limit, refused before anything is sent
  try {
    td::from_schema(td::Schema{{"x", {{1024 * 1024}, torch::kUInt8}}}, {2000}, r);
    FAIL() << "no error";
  } catch (const td::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("proto-max-bulk-len (536870912 bytes)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("block_rows <= 512"), std::string::npos) << e.what();
  }
  r.block_rows = 0;
  auto store = td::from_schema(td::Schema{{"x", {{4}, torch::kFloat32}}}, {100}, r);
  EXPECT_EQ(td::redis::block_rows(store), 100);  // one block: 1600 bytes fit
  EXPECT_EQ(td::redis::block_ids(store).size(), 1u);
}

TEST(RedisSharded, SpansTheClusterWithOnePipelinePerNodeAndTypedWrappers) {
  RedisCluster cluster;
  constexpr int64_t n = 300;
  auto store = td::from_schema(
      replay_schema(), {n}, "redis",
      {{"seeds", cluster.address(0) + "," + cluster.address(1)}, {"sharded", true}});
  // An equal share per master: 3 blocks of 100 rows, one on each node.
  EXPECT_EQ(td::redis::block_rows(store), 100);
  const auto ids = td::redis::block_ids(store);
  ASSERT_EQ(ids.size(), 3u);
  std::set<std::size_t> owners;
  for (const auto& id : ids) owners.insert(cluster.owner(slot_of(cluster, "{" + id + "}")));
  EXPECT_EQ(owners.size(), 3u);

  auto t0 = td::redis::round_trips(store);
  store.index_put_({torch::arange(n)}, replay_rows(torch::arange(n)));
  EXPECT_EQ(td::redis::round_trips(store), t0 + 3);  // one pipeline per node
  const at::Tensor idx = torch::randint(n, {256});
  t0 = td::redis::round_trips(store);
  auto batch = store.index({idx});
  EXPECT_EQ(td::redis::round_trips(store), t0 + 3);
  expect_equal(batch, replay_rows(idx));
  // Each node got exactly one transaction per block it holds.
  for (std::size_t i = 0; i < cluster.size(); ++i) cluster.node(i).reset_stats();
  store.index({idx});
  for (std::size_t i = 0; i < cluster.size(); ++i)
    EXPECT_EQ(cluster.node(i).command_calls()["exec"], 1) << "node " << i;

  // Typed wrappers over the sharded store.
  auto typed = Replay::from_tensordict(store);
  EXPECT_TRUE(torch::equal(typed.index({idx}).obs(), replay_rows(idx).get("obs")));
  typed.index({torch::tensor({5})}).action().zero_();  // a copy: the store is unchanged
  EXPECT_EQ(store.index({5}).get("action")[0].item<float>(), 5.0f);
  auto tc = Transition::from_tensordict(store);
  tc.index_put_({torch::tensor({5, 250})},
                Transition::from_tensordict(replay_rows(torch::tensor({1, 2}))));
  EXPECT_TRUE(torch::equal(tc.index({torch::tensor({250, 5})}).action(),
                           replay_rows(torch::tensor({2, 1})).get("action")));

  // A second handle, from the manifest id alone, through another seed.
  auto other = td::redis::from_store(on_cluster(cluster, 2, td::redis::td_id(store)));
  expect_equal(other.index({torch::arange(98, 103)}), [&] {
    auto want = replay_rows(torch::arange(98, 103));
    return want;
  }());
  td::redis::clear(store);
  for (std::size_t i = 0; i < cluster.size(); ++i)
    EXPECT_EQ(cluster.node(i).command({"DBSIZE"}), "0");
}

// ---- faults -------------------------------------------------------------------------

// A writer thread writes row after row (row i holds i + 1000) and records the
// rows acknowledged; `crash` kills and restarts the server mid-run. After the
// restart the writer's next attempts reconnect and succeed, and every row
// acknowledged before the kill is on the server.
template <class Crash>
void survive_a_crash(td::TensorDictBase store, int64_t n, Crash crash) {
  std::atomic<int64_t> acknowledged{0};
  std::atomic<bool> failed_once{false};
  auto writer = std::async(std::launch::async, [&] {
    int64_t i = 0;
    int errors = 0;
    while (i < n) {
      try {
        store.index_put_({i}, rows(1, i + 1000)[0]);
        acknowledged = ++i;
      } catch (const td::ConnectionError&) {
        failed_once = true;
        if (++errors > 2000) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    return errors;
  });
  while (acknowledged < n / 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int64_t before_kill = acknowledged;
  crash();
  const int errors = writer.get();
  EXPECT_TRUE(failed_once) << "the kill was not seen by the writer";
  EXPECT_GT(errors, 0);
  EXPECT_GT(before_kill, 0);
  auto all = store.to_tensordict();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(all.get("action")[i].item<int64_t>(), i + 1000) << "row " << i;
  const at::Tensor obs = torch::arange(6, torch::kFloat32).unsqueeze(0) +
                         (torch::arange(n, torch::kFloat32) + 1000).unsqueeze(1);
  EXPECT_TRUE(torch::equal(all.get("obs"), obs));
}

TEST(RedisFaults, PersistentServerKilledMidRunLosesNoAcknowledgedRow) {
  RedisServer server({.persistent = true});
  td::storage::Redis r;
  r.host = "127.0.0.1";
  r.port = server.port();
  auto store = td::from_schema(schema(), {400}, r);
  survive_a_crash(store, 400, [&] {
    server.kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.restart();
  });
  // Durable on disk too: a second restart still has every row.
  server.restart();
  auto again = td::redis::from_store(
      {.host = "127.0.0.1", .port = server.port(), .td_id = td::redis::td_id(store)});
  EXPECT_TRUE(torch::equal(again.to_tensordict().get("action"), torch::arange(400) + 1000));
}

TEST(RedisFaults, ClusterMasterRestartedLosesNoAcknowledgedRow) {
  RedisCluster cluster({.persistent = true});
  const std::string id = id_on(cluster, 1, "crash");
  auto store = td::from_schema(schema(), {400}, on_cluster(cluster, 0, id));
  survive_a_crash(store, 400, [&] {
    cluster.node(1).kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cluster.restart(1);
  });
  EXPECT_EQ(cluster.owner(slot_of(cluster, "tensordict:{" + id + "}:x")), 1u);
}

}  // namespace
