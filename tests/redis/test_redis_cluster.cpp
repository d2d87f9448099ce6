// The Redis storage on a real 3-master Redis Cluster started by each test
// (tests/support/redis_cluster.h): routing by hash slot, a slot migration
// followed through ASK then MOVED, no reachable seed; and faults: a
// persistent server (and a cluster master) killed with SIGKILL mid-run and
// restarted on its port and directory loses no acknowledged row.

#include "support/redis_cluster.h"

#include <tensordict/storage/redis.h>

#include <atomic>
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
