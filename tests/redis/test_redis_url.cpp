// Redis addresses (td::redis::parse_url) and tensordict-inspect on a store
// (redis:// and unix://), against a redis-server the test starts.
#include "support/core_test_helpers.h"
#include "support/redis_server.h"

#include <tensordict/storage/redis.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace {

namespace td = tensordict;
using td_test::RedisServer;

TEST(RedisUrl, TcpAddressesWithEveryPart) {
  auto r = td::redis::parse_url("redis://10.0.0.5:6380/3f2a");
  EXPECT_EQ(r.host, "10.0.0.5");
  EXPECT_EQ(r.port, 6380);
  EXPECT_EQ(r.td_id, "3f2a");
  EXPECT_EQ(r.db, 0);
  EXPECT_EQ(r.prefix, "tensordict");

  r = td::redis::parse_url("redis://alice:p%40ss%3Aword@cache.local/abc?db=2&prefix=rl");
  EXPECT_EQ(r.username, "alice");
  EXPECT_EQ(r.password, "p@ss:word");
  EXPECT_EQ(r.host, "cache.local");
  EXPECT_EQ(r.port, 6379);  // the default
  EXPECT_EQ(r.td_id, "abc");
  EXPECT_EQ(r.db, 2);
  EXPECT_EQ(r.prefix, "rl");

  // Commands are bounded by default (a server that stops answering is a
  // TimeoutError, not a hang); the query sets both timeouts.
  EXPECT_EQ(r.timeout, 60.0);
  r = td::redis::parse_url("redis://host/id?timeout=2&connect_timeout=0");
  EXPECT_EQ(r.timeout, 2.0);
  EXPECT_EQ(r.connect_timeout, 0.0);
  EXPECT_EQ(r.max_reply_bytes, std::int64_t{1} << 30);  // bounded by default too
  r = td::redis::parse_url("redis://host/id?max_reply_bytes=4294967296");
  EXPECT_EQ(r.max_reply_bytes, std::int64_t{1} << 32);
  EXPECT_THROW(td::redis::parse_url("redis://host/id?max_reply_bytes=-1"), td::ValueError);

  r = td::redis::parse_url("redis://secret@[::1]:7000");
  EXPECT_EQ(r.password, "secret");
  EXPECT_TRUE(r.username.empty());
  EXPECT_EQ(r.host, "::1");
  EXPECT_EQ(r.port, 7000);
  EXPECT_TRUE(r.td_id.empty());
}

TEST(RedisUrl, UnixSocketWithTheIdAsLastComponentOrInTheQuery) {
  RedisServer server;  // a real socket: the whole path is the socket
  auto r = td::redis::parse_url("unix://" + server.socket());
  EXPECT_EQ(r.unix_socket, server.socket());
  EXPECT_TRUE(r.td_id.empty());
  r = td::redis::parse_url("unix://" + server.socket() + "/abc-1?db=1");
  EXPECT_EQ(r.unix_socket, server.socket());
  EXPECT_EQ(r.td_id, "abc-1");
  EXPECT_EQ(r.db, 1);
  r = td::redis::parse_url("unix:///run/redis.sock?td_id=xyz");
  EXPECT_EQ(r.unix_socket, "/run/redis.sock");
  EXPECT_EQ(r.td_id, "xyz");
}

TEST(RedisUrl, BadAddressesAreValueErrorsNamingThem) {
  for (const char* bad :
       {"http://host/id", "redis://:6379/id", "redis://host:99999/id", "redis://host:port/id",
        "redis://host/a/b", "redis://host/id?db=x", "redis://host/id?color=red",
        "redis://host/id?timeout=-1", "redis://host/id?timeout=1.5x", "redis://host/id?db",
        "unix://relative/path", "redis://u%4@host/id", "redis://[::1/id"}) {
    const std::string quoted = std::string("'") + bad + "'";
    TD_EXPECT_THROW_MSG(td::redis::parse_url(bad), td::ValueError, quoted.c_str());
  }
}

#ifdef TENSORDICT_INSPECT
// tensordict-inspect prints a store found by address, as it prints files.
std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

TEST(RedisInspect, PrintsAStoreByAddress) {
  RedisServer server;
  td::storage::Redis where;
  where.unix_socket = server.socket();
  td::TensorDict data({{"obs", torch::arange(6, torch::kFloat32).view({3, 2})},
                       {"next", td::TensorDict({{"reward", torch::ones({3})}}, {3})}},
                      {3});
  auto store = td::redis::from_tensordict(data, where);
  const std::string id = td::redis::td_id(store);
  int status = 0;
  std::string out =
      run(std::string(TENSORDICT_INSPECT) + " unix://" + server.socket() + "/" + id + " --json",
          &status);
  ASSERT_EQ(status, 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["batch_size"], nlohmann::json::array({3}));
  EXPECT_EQ(j["entries"]["obs"]["shape"], nlohmann::json::array({3, 2}));
  EXPECT_EQ(j["entries"]["obs"]["values"],
            nlohmann::json::parse("[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]"));
  EXPECT_EQ(j["entries"]["next"]["entries"]["reward"]["values"],
            nlohmann::json::parse("[1.0, 1.0, 1.0]"));
  out = run(std::string(TENSORDICT_INSPECT) +
                " redis://127.0.0.1:" + std::to_string(server.port()) + "/" + id,
            &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("obs: Tensor(shape=torch.Size([3, 2])"), std::string::npos) << out;
  // An id the server does not hold: the KeyError, exit code 1.
  out = run(std::string(TENSORDICT_INSPECT) +
                " redis://127.0.0.1:" + std::to_string(server.port()) + "/no-such-id",
            &status);
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("no-such-id"), std::string::npos) << out;
}
#endif  // TENSORDICT_INSPECT

}  // namespace
