// Hostile servers and stored metadata (issue #32): every bad input read from
// a Redis server is a tensordict:: error naming the key, never a crash or a
// raw exception, and a write that fails leaves the stored data as it was.
// The plain store, the sharded store and the lazy-stack store, each against
// a real redis-server started by the test; malformed CLUSTER SLOTS replies
// from a socket served by the test (a real server cannot send them).

#include "support/redis_server.h"

#include <tensordict/storage/redis.h>
#include <tensordict/storage/redis_lazy_stack.h>

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace {

namespace td = tensordict;
using td_test::on;
using td_test::RedisServer;

td::TensorDict sample(int64_t n = 10) {
  td::TensorDict data({{"obs", torch::arange(n * 6, torch::kFloat32).view({n, 2, 3})},
                       {"action", torch::arange(n, torch::kInt64)}},
                      {n});
  data.set({"next", "obs"}, torch::arange(n * 6, torch::kFloat32).view({n, 2, 3}) + 1000);
  return data;
}

// EXPECT_THROW that also checks the message names `part`.
template <class E, class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one naming " << part << ")";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

const std::string kStore = "tensordict:{hostile}:";

// ---- 1. a peer gone mid-write ----------------------------------------------------

bool sigpipe_blocked() {
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  return sigismember(&now, SIGPIPE) == 1;
}
bool sigpipe_pending() {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}
bool sigpipe_default() {
  struct sigaction now {};
  sigaction(SIGPIPE, nullptr, &now);
  return now.sa_handler == SIG_DFL;
}

// The server closes the connection on a bulk string over its limit while the
// client is still writing it: over a Unix socket, the next write raises
// SIGPIPE, which used to kill the process.
TEST(RedisReliability, ServerClosingTheConnectionMidUploadIsAStorageErrorNotSigpipe) {
  RedisServer server({.extra = {"--proto-max-bulk-len", "1mb"}});
  ASSERT_TRUE(sigpipe_default());
  td::TensorDict big({{"big", torch::zeros({16 << 20})}}, {});  // 64 MB
  expect_error<td::StorageError>([&] { td::redis::from_tensordict(big, on(server, "big")); },
                                 "uploading");
  // The application's signal state is as it was.
  EXPECT_TRUE(sigpipe_default());
  EXPECT_FALSE(sigpipe_blocked());
  EXPECT_FALSE(sigpipe_pending());
  // The client reconnects for the next call.
  auto small = td::redis::from_tensordict(sample(), on(server, "small"));
  EXPECT_TRUE(torch::equal(small.get("action"), torch::arange(10)));
}

TEST(RedisReliability, ServerKilledWhileALargeValueIsUploadedIsAStorageError) {
  RedisServer server;
  td::TensorDict big({{"big", torch::zeros({64 << 20})}}, {});  // 256 MB
  std::atomic<bool> go{false};
  std::thread killer([&] {
    while (!go) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server.kill();
  });
  go = true;
  EXPECT_THROW(
      {
        for (int i = 0; i < 50; ++i) td::redis::from_tensordict(big, on(server, "big"));
      },
      td::StorageError);
  killer.join();
  EXPECT_TRUE(sigpipe_default());
  EXPECT_FALSE(sigpipe_blocked());
}

// ---- 2. CLUSTER SLOTS ------------------------------------------------------------

// A listening socket on 127.0.0.1, on a port the kernel picks.
int listen_on_loopback(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  ::listen(fd, 4);
  return fd;
}

// A node answering every command with `reply`. Served from a thread of the
// test because a real redis-server cannot be made to send a malformed
// CLUSTER SLOTS reply.
class FakeNode {
 public:
  explicit FakeNode(std::string reply) : reply_(std::move(reply)) {
    fd_ = listen_on_loopback(port_);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        while (::read(c, buf, sizeof buf) > 0)
          if (::write(c, reply_.data(), reply_.size()) < 0) break;
        ::close(c);
      }
    });
  }
  ~FakeNode() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::string reply_;
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

TEST(RedisReliability, MalformedClusterSlotsRepliesAreFormatErrors) {
  const std::string master = "*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n";
  auto entry = [&](const std::string& first, const std::string& last, const std::string& m) {
    return "*1\r\n*3\r\n" + first + last + m;
  };
  const std::vector<std::pair<std::string, std::string>> replies{
      {"negative start", entry(":-5\r\n", ":10\r\n", master)},
      {"past 16383", entry(":0\r\n", ":20000\r\n", master)},
      {"reversed", entry(":100\r\n", ":10\r\n", master)},
      {"slots as strings", entry("$1\r\n0\r\n", "$2\r\n10\r\n", master)},
      {"port as a string",
       entry(":0\r\n", ":16383\r\n", "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7000\r\n")},
      {"port 0", entry(":0\r\n", ":16383\r\n", "*2\r\n$9\r\n127.0.0.1\r\n:0\r\n")},
      {"host as an integer", entry(":0\r\n", ":16383\r\n", "*2\r\n:1\r\n:7000\r\n")},
      {"master not an array", entry(":0\r\n", ":16383\r\n", ":1\r\n")},
      {"entry not an array", "*1\r\n:5\r\n"},
      {"too few fields", "*1\r\n*2\r\n:0\r\n:10\r\n"}};
  for (const auto& [what, reply] : replies) {
    SCOPED_TRACE(what);
    FakeNode node(reply);
    td::storage::Redis opts;
    opts.host = "127.0.0.1";
    opts.port = node.port();
    opts.cluster = true;
    opts.connect_timeout = 2;
    opts.timeout = 2;
    expect_error<td::FormatError>([&] { td::redis::create(opts, {3}); }, "CLUSTER SLOTS");
  }
  // No slot served at all: a sharded store divided its rows by zero masters.
  FakeNode empty("*0\r\n");
  td::storage::Redis opts;
  opts.host = "127.0.0.1";
  opts.port = empty.port();
  opts.cluster = true;
  opts.sharded = true;
  opts.connect_timeout = 2;
  expect_error<td::StorageError>([&] { td::redis::create(opts, {10}); }, "no node serves");
}

// A peer that announces a 2^62-byte bulk string and streams zeros for as long
// as the client reads: hiredis would buffer it all (outside retry F5). The
// client stops at max_reply_bytes with a FormatError.
class StreamingNode {
 public:
  StreamingNode() {
    fd_ = listen_on_loopback(port_);
    thread_ = std::thread([this] {
      const std::string header = "$4611686018427387904\r\n";
      const std::string zeros(1 << 16, '\0');
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        if (::read(c, buf, sizeof buf) > 0 &&
            ::send(c, header.data(), header.size(), MSG_NOSIGNAL) > 0)
          while (::send(c, zeros.data(), zeros.size(), MSG_NOSIGNAL) > 0) sent_ += zeros.size();
        ::close(c);
      }
    });
  }
  ~StreamingNode() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  std::size_t sent() const { return sent_; }

 private:
  int fd_ = -1, port_ = 0;
  std::atomic<std::size_t> sent_{0};
  std::thread thread_;
};

TEST(RedisReliability, AnEndlessBulkStringIsAFormatErrorAtMaxReplyBytes) {
  StreamingNode node;
  td::storage::Redis opts;
  opts.host = "127.0.0.1";
  opts.port = node.port();
  opts.td_id = "endless";
  opts.connect_timeout = 5;
  opts.timeout = 20;
  opts.max_reply_bytes = 1 << 20;
  expect_error<td::FormatError>([&] { td::redis::from_store(opts); }, "max_reply_bytes");
  // The client stopped reading near the cap (the socket buffers hold a few MiB
  // more), not after the timeout had let it take hundreds of MiB.
  EXPECT_LT(node.sent(), std::size_t{64} << 20);
}

// ---- 3-6. stored metadata ----------------------------------------------------------

TEST(RedisReliability, BadBatchSizesAreFormatErrors) {
  RedisServer server;
  td::redis::create(on(server, "hostile"), {4});
  // "[4]\0garbage": nlohmann's parser stops at a NUL (outside retry F7).
  for (const std::string bs : {std::string("[-5]"), std::string("[2.5]"), std::string("[true]"),
                               std::string("[18446744073709551615]"), std::string("{}"),
                               std::string("4"), std::string("[4]\0garbage", 11)}) {
    SCOPED_TRACE(bs);
    server.command({"SET", kStore + "__batch_size__", bs});
    expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                  kStore + "__batch_size__");
  }
}

TEST(RedisReliability, LeavesNotStartingWithTheBatchSizeAreRefusedWhenOpening) {
  RedisServer server;
  td::redis::from_tensordict(sample(), on(server, "hostile"));
  // A batch size larger than the leaves: a row write past a leaf's end
  // would grow it and the store would no longer read.
  server.command({"SET", kStore + "__batch_size__", "[12]"});
  expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                "does not start with the batch size [12]");
  server.command({"SET", kStore + "__batch_size__", "[10, 3]"});
  EXPECT_THROW(td::redis::from_store(on(server, "hostile")), td::FormatError);
  server.command({"SET", kStore + "__batch_size__", "[10]"});
  auto store = td::redis::from_store(on(server, "hostile"));
  EXPECT_TRUE(torch::equal(store.get("action"), torch::arange(10)));
  // Nothing was written by the refused opens.
  EXPECT_EQ(server.command({"STRLEN", kStore + "d:action"}), "80");
}

// Leaf paths in __keys__ that are not UTF-8, or nested deeper than 512
// levels (found by an outside retry: accepted and printed, or a stack overflow
// in the tree at 8,000 levels).
TEST(RedisReliability, LeafPathsNotUtf8OrNestedTooDeepAreFormatErrors) {
  RedisServer server;
  td::redis::from_tensordict(sample(4), on(server, "hostile"));
  std::string deep = "n";
  for (int i = 0; i < 8000; ++i) deep += ".n";
  // "obs" is a leaf: "obs.x" would make it a nested level too (F7: one of
  // them was dropped without a word).
  for (const std::string path :
       {std::string("\xff\xfe"), std::string("b.\xc3\x28"), deep, std::string("obs.x")}) {
    SCOPED_TRACE(path.substr(0, 8));
    server.command({"SADD", kStore + "__keys__", path});
    expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                  kStore + "__keys__");
    server.command({"SREM", kStore + "__keys__", path});
  }
  EXPECT_TRUE(
      torch::equal(td::redis::from_store(on(server, "hostile")).get("action"), torch::arange(4)));
}

TEST(RedisReliability, AShapeWhoseByteSizeWrapsIsAFormatError) {
  RedisServer server;
  td::redis::from_tensordict(sample(4), on(server, "hostile"));
  // 4 x 2^62 x 4 bytes = 2^66, which wraps to 0: the empty value "matched".
  server.command({"HSET", kStore + "m:obs", "shape", "[4, 4611686018427387904]"});
  server.command({"SET", kStore + "d:obs", ""});
  expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")).get("obs"); },
                                kStore + "m:obs");
}

TEST(RedisReliability, NonTensorValuesNestedTooDeepOrNotUtf8AreFormatErrors) {
  RedisServer server;
  td::TensorDict data({{"x", torch::zeros({4})}}, {4});
  data.set_non_tensor("label", "cat");
  data.set("labels", td::NonTensorStack({"a", "b", "c", "d"}));
  td::redis::from_tensordict(data, on(server, "hostile"));
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const std::string key : {"d:label", "d:labels"}) {
    for (const std::string value : {deep, std::string("\"\xff\xfe\""), std::string("[1, 2")}) {
      SCOPED_TRACE(key + " " + value.substr(0, 8));
      server.command({"SET", kStore + key, value});
      auto store = td::redis::from_store(on(server, "hostile"));
      expect_error<td::FormatError>([&] { store.to_tensordict(); }, kStore + key);
    }
    server.command(
        {"SET", kStore + key, key == "d:label" ? "\"cat\"" : "[\"a\",\"b\",\"c\",\"d\"]"});
  }
  // A list of 3 values in a store of 4 rows.
  server.command({"SET", kStore + "d:labels", "[\"a\", \"b\", \"c\"]"});
  expect_error<td::FormatError>(
      [&] { td::redis::from_store(on(server, "hostile")).get_non_tensor("labels"); },
      "a list of 3 values");
}

TEST(RedisReliability, AStoreTypeThisBuildDoesNotKnowIsAFormatError) {
  RedisServer server;
  td::redis::from_tensordict(sample(), on(server, "hostile"));
  server.command({"SET", kStore + "__type__", "bogus"});
  expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                kStore + "__type__' is 'bogus'");
  server.command({"DEL", kStore + "__type__"});
  EXPECT_EQ(td::redis::from_store(on(server, "hostile")).batch_size().vec(),
            std::vector<int64_t>{10});
}

TEST(RedisReliability, ADeviceOtherThanTheCpuIsRefusedWhenOpening) {
  RedisServer server;
  td::redis::from_tensordict(sample(), on(server, "hostile"));
  server.command({"SET", kStore + "__device__", "cuda:0"});
  expect_error<td::DeviceError>([&] { td::redis::from_store(on(server, "hostile")); }, "cuda:0");
  server.command({"SET", kStore + "__device__", "banana"});
  EXPECT_THROW(td::redis::from_store(on(server, "hostile")), td::FormatError);
  server.command({"SET", kStore + "__device__", "cpu"});
  EXPECT_EQ(td::redis::from_store(on(server, "hostile")).device(), c10::Device("cpu"));
}

td::storage::Redis sharded(const RedisServer& server, const std::string& id) {
  auto opts = on(server, id);
  opts.sharded = true;
  opts.block_rows = 4;
  return opts;
}

TEST(RedisReliability, ShardedManifestsOutOfRangeAreFormatErrors) {
  RedisServer server;
  td::redis::from_tensordict(sample(), sharded(server, "hostile"));
  const std::string manifest = server.command({"GET", kStore + "__shards__"});
  auto with = [&](const std::string& field, const std::string& value) {
    auto j = nlohmann::json::parse(manifest);
    j[field] = nlohmann::json::parse(value);
    server.command({"SET", kStore + "__shards__", j.dump()});
  };
  // (2^63 - 1 + 2^62 - 1) / 2^62 overflowed to a negative count of blocks,
  // so that one block "matched" and rows past 2^62 indexed a second one.
  auto j = nlohmann::json::parse(manifest);
  j["block_rows"] = int64_t{1} << 62;
  j["batch_size"] = {INT64_MAX};
  j["blocks"] = {j["blocks"][0]};
  server.command({"SET", kStore + "__shards__", j.dump()});
  expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                kStore + "__shards__");
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, std::string>>{{"batch_size", "[-10]"},
                                                        {"batch_size", "[10.5]"},
                                                        {"block_rows", "2.5"},
                                                        {"block_rows", "0"},
                                                        {"blocks", "[1, 2, 3]"}}) {
    SCOPED_TRACE(field + "=" + value);
    server.command({"SET", kStore + "__shards__", manifest});
    with(field, value);
    expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                  kStore + "__shards__");
  }
  server.command({"SET", kStore + "__shards__", std::string(100000, '[')});
  EXPECT_THROW(td::redis::from_store(on(server, "hostile")), td::FormatError);
  server.command({"SET", kStore + "__shards__", manifest});
  with("device", "\"cuda:0\"");
  EXPECT_THROW(td::redis::from_store(on(server, "hostile")), td::DeviceError);
  // A manifest of a later format (outside retry F7), read as if it were 1.
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"version", "2"}, {"version", "\"1\""}, {"layout", "\"columns\""}}) {
    SCOPED_TRACE(field + "=" + value);
    server.command({"SET", kStore + "__shards__", manifest});
    with(field, value);
    expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                  "is not known");
  }
  server.command({"SET", kStore + "__shards__", manifest});
  // A block gone (F6: the store read as rows of nothing), or holding other
  // rows than the manifest gives it (F7).
  const std::string block1 = "tensordict:{hostile-1}:__batch_size__";
  ASSERT_EQ(server.command({"GET", block1}), "[4]");
  server.command({"RENAME", block1, block1 + ".saved"});
  expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                block1 + "' is missing");
  server.command({"SET", block1, "[3]"});
  expect_error<td::FormatError>([&] { td::redis::from_store(on(server, "hostile")); },
                                block1 + "' is [3]");
  server.command({"RENAME", block1 + ".saved", block1});
  auto store = td::redis::from_store(on(server, "hostile"));
  EXPECT_TRUE(torch::equal(store.get("action"), torch::arange(10)));
}

td::LazyStackedTensorDict stack_of(int64_t n) {
  std::vector<td::TensorDictBase> members;
  for (int64_t e = 0; e < n; ++e)
    members.push_back(td::TensorDict({{"x", torch::full({4, 3}, static_cast<float>(e))}}, {4}));
  return td::lazy_stack(members);
}

TEST(RedisReliability, LazyStackCountsAndInnerBatchSizesOutOfRangeAreFormatErrors) {
  RedisServer server;
  td::redis::from_lazy_stack(stack_of(3), on(server, "hostile"));
  auto open = [&] { return td::redis::from_lazy_stack_store(on(server, "hostile")); };
  // 2^62 elements once the leaves are gone: a 2^62-entry allocation.
  server.command({"DEL", kStore + "__keys__"});
  server.command({"SET", kStore + "__count__", "4611686018427387904"});
  expect_error<td::FormatError>(open, kStore + "__count__");
  server.command({"SET", kStore + "__count__", "3"});
  server.command({"SADD", kStore + "__keys__", "x"});
  for (const std::string inner : {"[-4]", "[4.5]", "[5]"}) {
    SCOPED_TRACE(inner);
    server.command({"SET", kStore + "__inner_batch_size__", inner});
    EXPECT_THROW(open(), td::FormatError);
  }
  server.command({"SET", kStore + "__inner_batch_size__", "[4]"});
  server.command({"SET", kStore + "__device__", "cuda:0"});
  EXPECT_THROW(open(), td::DeviceError);
  server.command({"SET", kStore + "__device__", ""});
  // A shape whose byte size wraps.
  server.command({"HSET", kStore + "m:x", "shape", "[3, 4, 4611686018427387904]"});
  EXPECT_THROW(open(), td::FormatError);
  server.command({"HSET", kStore + "m:x", "shape", "[3, 4, 3]"});
  EXPECT_TRUE(torch::equal(open().get("x")[2], torch::full({4, 3}, 2.0f)));
}

// ---- 7. writes: all or nothing ------------------------------------------------------

// One leaf's bytes are replaced with a hash, or shortened, its metadata left
// as it was: the row write fails and writes no leaf (Redis does not roll back
// an EXEC). A retry would fail the same way: a FormatError, not a conflict.
TEST(RedisReliability, ARowWriteInWhichOneLeafFailsWritesNoLeaf) {
  RedisServer server;
  auto store = td::redis::from_tensordict(sample(), on(server, "hostile"));
  const std::string obs = server.command({"GET", kStore + "d:obs"});
  for (const std::string how : {"hash", "short"}) {
    SCOPED_TRACE(how);
    server.command({"DEL", kStore + "d:action"});
    if (how == "hash")
      server.command({"HSET", kStore + "d:action", "f", "v"});
    else
      server.command({"SET", kStore + "d:action", "xx"});
    server.reset_stats();
    const auto before = td::redis::round_trips(store);
    expect_error<td::FormatError>([&] { store.index_put_({3}, sample()[0] * 0 + 7); },
                                  "the metadata is unchanged");
    // The write's round trip, then the metadata read again (two).
    EXPECT_EQ(td::redis::round_trips(store) - before, 3);
    EXPECT_EQ(server.command({"GET", kStore + "d:obs"}), obs);
    EXPECT_EQ(server.command({"GET", kStore + "d:next.obs"}).size(), 240u);
    EXPECT_EQ(server.command_calls()["setrange"], 0);
  }
}

TEST(RedisReliability, ShardedAndLazyStackRowWritesAreAllOrNothing) {
  RedisServer server;
  {
    auto store = td::redis::from_tensordict(sample(), sharded(server, "sh"));
    const auto ids = td::redis::block_ids(store);
    const std::string k1 = "tensordict:{" + ids[1] + "}:";
    const std::string obs = server.command({"GET", k1 + "d:obs"});
    server.command({"DEL", k1 + "d:action"});
    server.command({"HSET", k1 + "d:action", "f", "v"});
    EXPECT_THROW(store.index_put_({5}, sample()[0] * 0 + 7), td::FormatError);
    EXPECT_EQ(server.command({"GET", k1 + "d:obs"}), obs);
  }
  {
    auto stack = td::redis::from_lazy_stack(stack_of(3), on(server, "ls"));
    stack.set("y", torch::zeros({3, 4}));
    const std::string k = "tensordict:{ls}:";
    const std::string x = server.command({"GET", k + "d:x"});
    server.command({"SET", k + "d:y", "xx"});
    EXPECT_THROW(
        stack.index_put_(
            {1}, td::TensorDict({{"x", torch::ones({4, 3})}, {"y", torch::ones({4})}}, {4})),
        td::FormatError);
    EXPECT_EQ(server.command({"GET", k + "d:x"}), x);
    // The same through set_element.
    EXPECT_THROW(
        td::redis::set_element(
            stack, 1, td::TensorDict({{"x", torch::ones({4, 3})}, {"y", torch::ones({4})}}, {4})),
        td::FormatError);
    EXPECT_EQ(server.command({"GET", k + "d:x"}), x);
  }
}

// A leaf another process replaced with another shape (bytes and metadata)
// after this handle read its metadata: the row read is a ConflictError that
// refreshes the metadata, and the retry reads the new leaf.
TEST(RedisReliability, ALeafReplacedByAnotherProcessIsAConflictThenReadsAfterRetry) {
  RedisServer server;
  auto store = td::redis::from_tensordict(sample(), on(server, "hostile"));
  auto other = td::redis::from_store(on(server, "hostile"));
  other.set("obs", torch::ones({10, 4}));  // 160 bytes where the reader expects 240
  expect_error<td::ConflictError>([&] { store[2].to_tensordict(); }, "changed by another process");
  EXPECT_TRUE(torch::equal(store[2].get("obs"), torch::ones({4})));
  // The same for the sharded store.
  auto sh = td::redis::from_tensordict(sample(), sharded(server, "sh2"));
  auto sh_other = td::redis::from_store(sharded(server, "sh2"));
  sh_other.set("obs", torch::ones({10, 4}));
  EXPECT_THROW(sh[6].to_tensordict(), td::ConflictError);
  EXPECT_TRUE(torch::equal(sh[6].get("obs"), torch::ones({4})));
}

// The same for a row write: another handle replaced the leaf (bytes and
// metadata); the write is a ConflictError that wrote nothing and refreshed the
// metadata, and the retry writes the new leaf.
TEST(RedisReliability, ARowWriteOverALeafReplacedByAnotherProcessIsAConflictThenRetries) {
  RedisServer server;
  auto store = td::redis::from_tensordict(sample(), on(server, "hostile"));
  (void)store.get("obs");  // metadata cached
  auto other = td::redis::from_store(on(server, "hostile"));
  other.set("obs", torch::ones({10, 4}));
  auto row = [&](std::vector<int64_t> obs) {
    td::TensorDict r({{"obs", torch::full(obs, 7.0f)}, {"action", torch::tensor(7)}}, {});
    r.set({"next", "obs"}, torch::full({2, 3}, 7.0f));
    return r;
  };
  // A row of the shapes this handle knew.
  expect_error<td::ConflictError>(
      [&] {
        store.index_put_({3}, row({2, 3}));
      },
      "changed by another process");
  EXPECT_TRUE(torch::equal(other.get("action"), torch::arange(10)));  // nothing written
  EXPECT_EQ(store.get("obs").sizes(), at::IntArrayRef({10, 4}));      // refreshed
  store.index_put_({3}, row({4}));
  EXPECT_TRUE(torch::equal(other[3].get("obs"), torch::full({4}, 7.0f)));
  EXPECT_EQ(other.get("action")[3].item<int64_t>(), 7);
}

// A value missing or cut short with its metadata unchanged is no conflict: a
// retry would read the same. FormatError, for each kind of store (found by
// an outside retry: "changed by another process, retry" sent users round).
TEST(RedisReliability, ALeafShorterThanItsUnchangedMetadataIsAFormatError) {
  RedisServer server;
  auto store = td::redis::from_tensordict(sample(), on(server, "hostile"));
  server.command({"SET", kStore + "d:obs", "short"});
  expect_error<td::FormatError>([&] { store[2].to_tensordict(); }, kStore + "d:obs");
  auto sh = td::redis::from_tensordict(sample(), sharded(server, "sh3"));
  server.command({"DEL", "tensordict:{" + td::redis::block_ids(sh)[1] + "}:d:obs"});
  expect_error<td::FormatError>([&] { sh[6].to_tensordict(); }, "the metadata is unchanged");
  auto stack = td::redis::from_lazy_stack(stack_of(3), on(server, "ls2"));
  server.command({"SET", "tensordict:{ls2}:d:x", "xx"});
  expect_error<td::FormatError>([&] { stack[1].to_tensordict(); }, "tensordict:{ls2}:d:x");
}

// A failed from_schema removes what it created.
TEST(RedisReliability, AFailedFromSchemaLeavesNoKeyBehind) {
  RedisServer server({.extra = {"--proto-max-bulk-len", "1mb"}});
  td::Schema schema{{"small", {{4}, torch::kFloat32}}, {"big", {{1 << 20}, torch::kFloat32}}};
  EXPECT_THROW(td::from_schema(schema, {2}, on(server, "schema")), td::StorageError);
  EXPECT_EQ(server.command({"DBSIZE"}), "0");
  // Into an existing store: its own leaves stay.
  td::redis::from_tensordict(sample(2), on(server, "schema"));
  const std::string before = server.command({"DBSIZE"});
  EXPECT_THROW(td::from_schema(schema, {2}, on(server, "schema")), td::StorageError);
  EXPECT_EQ(server.command({"DBSIZE"}), before);
  EXPECT_EQ(server.command({"EXISTS", "tensordict:{schema}:d:small"}), "0");
}

// Replacing a leaf when the server is out of memory (maxmemory, noeviction)
// without a transaction deleted the old value, then the new one was refused.
TEST(RedisReliability, AReplaceRefusedOverMaxmemoryKeepsTheOldValue) {
  RedisServer server;
  auto opts = on(server, "hostile");
  opts.transaction = false;
  for (const bool sharded_store : {false, true}) {
    SCOPED_TRACE(sharded_store);
    server.command({"FLUSHALL"});
    server.command({"CONFIG", "SET", "maxmemory", "0"});
    auto o = opts;
    o.sharded = sharded_store;
    auto store = td::redis::from_tensordict(td::TensorDict({{"x", torch::ones({4})}}, {4}), o);
    // Over the limit from now on: every write is refused, a DEL is not.
    server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
    server.command({"CONFIG", "SET", "maxmemory", "1"});
    // A new shape: the leaf is replaced (its keys deleted, then written).
    EXPECT_THROW(store.set("x", torch::full({4, 2}, 2.0f)), td::StorageError);
    server.command({"CONFIG", "SET", "maxmemory", "0"});
    EXPECT_TRUE(torch::equal(td::redis::from_store(o).get("x"), torch::ones({4})));
  }
  // The same for a lazy-stack store.
  server.command({"FLUSHALL"});
  auto stack = td::redis::from_lazy_stack(stack_of(3), opts);
  server.command({"CONFIG", "SET", "maxmemory", "1"});
  EXPECT_THROW(stack.set("x", torch::full({3, 4, 2}, 2.0f)), td::StorageError);
  server.command({"CONFIG", "SET", "maxmemory", "0"});
  EXPECT_TRUE(torch::equal(td::redis::from_lazy_stack_store(opts).get("x"), stack_of(3).get("x")));
}

}  // namespace
