// LazyStackedTensorDictStore (docs/formats.md, "Redis lazy-stack stores") against a real
// redis-server started by each test: Python's layout byte for byte, the real Python
// LazyStackedTensorDictStore reading and writing it, element reads and writes in one round trip
// counted on the client and on the server, the TensorDictBase API against the
// same stack in memory, and the errors.

#include "support/core_test_helpers.h"
#include "support/redis_server.h"

#include <tensordict/storage/redis_lazy_stack.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace {

namespace td = tensordict;
using td_test::on;
using td_test::RedisServer;
using namespace torch::indexing;

// Three agents of batch [4]: obs [4, 3 + 2k] (heterogeneous), reward [4],
// next.obs int64 [4, 2] (homogeneous).
td::LazyStackedTensorDict agents() {
  std::vector<td::TensorDictBase> members;
  for (int64_t a = 0; a < 3; ++a) {
    const int64_t f = 3 + 2 * a;
    td::TensorDict m({{"obs", torch::arange(4 * f, torch::kFloat32).view({4, f}) + 100 * a},
                      {"reward", torch::full({4}, static_cast<float>(a))}},
                     {4});
    m.set({"next", "obs"}, torch::arange(8, torch::kInt64).view({4, 2}) + 10 * a);
    members.push_back(m);
  }
  return td::lazy_stack(members);
}

// A homogeneous stack of five elements of batch [4] along `dim`.
td::LazyStackedTensorDict homogeneous(int64_t dim = 0) {
  std::vector<td::TensorDictBase> members;
  for (int64_t e = 0; e < 5; ++e) {
    td::TensorDict m({{"x", torch::arange(12, torch::kFloat32).view({4, 3}) + 100 * e},
                      {"n", torch::arange(4, torch::kInt64) + 10 * e}},
                     {4});
    m.set({"sub", "y"}, torch::full({4, 2}, static_cast<double>(e)));
    members.push_back(m);
  }
  return td::lazy_stack(members, dim);
}

std::set<std::string> lines(const std::string& s) {
  std::set<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.insert(l);
  return out;
}

std::map<std::string, std::string> hash(const RedisServer& server, const std::string& key) {
  std::istringstream in(server.command({"HGETALL", key}));
  std::map<std::string, std::string> out;
  for (std::string f, v; std::getline(in, f) && std::getline(in, v);) out[f] = v;
  return out;
}

std::string bytes_of(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return {static_cast<const char*>(c.data_ptr()), c.nbytes()};
}

void expect_same(const td::TensorDictBase& got, const td::TensorDictBase& want) {
  auto keys = want.keys(true, true);
  ASSERT_EQ(got.keys(true, true).size(), keys.size());
  EXPECT_EQ(got.batch_size(), want.batch_size());
  for (const auto& k : keys) {
    SCOPED_TRACE(k.repr());
    at::Tensor a = got.get(k), b = want.get(k);
    EXPECT_EQ(a.sizes(), b.sizes());
    EXPECT_EQ(a.scalar_type(), b.scalar_type());
    EXPECT_TRUE(torch::equal(a, b));
  }
}

int run_python(const RedisServer& server, const std::string& mode, const std::string& id,
               std::string& out) {
  const std::string script = std::string(TENSORDICT_REDIS_TEST_DIR) + "/lazy_stack_store.py";
  const std::string file = server.dir() + "/" + mode + ".out";
  const std::string cmd = std::string(TENSORDICT_PYTHON) + " " + script + " " + mode + " " +
                          server.socket() + " " + id + " > " + file + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(file);
  out.assign(std::istreambuf_iterator<char>(in), {});
  return rc;
}

// ---- layout -------------------------------------------------------------------

TEST(LazyStackRedis, GoldenLayoutOfSpec48) {
  RedisServer server;
  auto stack = agents();
  auto store = td::redis::from_lazy_stack(stack, on(server, "00000000-lazy"));
  const std::string k = "tensordict:{00000000-lazy}:";
  EXPECT_EQ(lines(server.command({"KEYS", k + "*"})),
            (std::set<std::string>{k + "__type__", k + "__count__", k + "__stack_dim__",
                                   k + "__inner_batch_size__", k + "__device__", k + "__keys__",
                                   k + "d:obs", k + "d:obs:idx", k + "m:obs", k + "d:reward",
                                   k + "m:reward", k + "d:next.obs", k + "m:next.obs"}));
  EXPECT_EQ(server.command({"GET", k + "__type__"}), "lazy_stack");
  EXPECT_EQ(server.command({"GET", k + "__count__"}), "3");
  EXPECT_EQ(server.command({"GET", k + "__stack_dim__"}), "0");
  EXPECT_EQ(server.command({"GET", k + "__inner_batch_size__"}), "[4]");
  EXPECT_EQ(server.command({"GET", k + "__device__"}), "");
  EXPECT_EQ(lines(server.command({"SMEMBERS", k + "__keys__"})),
            (std::set<std::string>{"obs", "reward", "next.obs"}));
  EXPECT_EQ(hash(server, k + "m:obs"),
            (std::map<std::string, std::string>{{"shape", "[3, 4, 3]"},
                                                {"dtype", "torch.float32"},
                                                {"homogeneous", "0"},
                                                {"shapes", "[[4, 3], [4, 5], [4, 7]]"},
                                                {"layout", "stack"}}));
  EXPECT_EQ(hash(server, k + "m:reward"),
            (std::map<std::string, std::string>{{"shape", "[3, 4]"},
                                                {"dtype", "torch.float32"},
                                                {"homogeneous", "1"},
                                                {"layout", "stack"}}));
  EXPECT_EQ(hash(server, k + "m:next.obs"),
            (std::map<std::string, std::string>{{"shape", "[3, 4, 2]"},
                                                {"dtype", "torch.int64"},
                                                {"homogeneous", "1"},
                                                {"layout", "stack"}}));
  // Element-major payloads; the offset table is N+1 little-endian int64.
  std::string obs, reward, next;
  for (const auto& m : stack.tensordicts()) {
    obs += bytes_of(m.get("obs"));
    reward += bytes_of(m.get("reward"));
    next += bytes_of(m.get({"next", "obs"}));
  }
  EXPECT_EQ(server.command({"GET", k + "d:obs"}), obs);
  EXPECT_EQ(server.command({"GET", k + "d:reward"}), reward);
  EXPECT_EQ(server.command({"GET", k + "d:next.obs"}), next);
  const int64_t offsets[] = {0, 48, 128, 240};
  EXPECT_EQ(server.command({"GET", k + "d:obs:idx"}),
            std::string(reinterpret_cast<const char*>(offsets), sizeof offsets));
}

TEST(LazyStackRedis, PythonReadsWhatCppWrote) {
  RedisServer server;
  auto store = td::redis::from_lazy_stack(agents(), on(server, "py-read"));
  td::redis::set_element(
      store, 1,
      td::TensorDict({{"obs", torch::arange(20, torch::kFloat32).view({4, 5}) + 100},
                      {"reward", torch::full({4}, 7.0)},
                      {"next", td::TensorDict({{"obs", torch::arange(8).view({4, 2}) + 10}}, {4})}},
                     {4}));
  auto e2 = td::redis::element(store, 2);
  e2.set("done", torch::ones({4}, torch::kUInt8));
  td::redis::set_element(store, 2, e2);  // a new key: zero in the other elements
  std::string out;
  ASSERT_EQ(run_python(server, "read", "py-read", out), 0) << out;
  EXPECT_NE(out.find("OK 4 keys, 3 elements"), std::string::npos) << out;
}

TEST(LazyStackRedis, CppReadsWhatPythonWrote) {
  RedisServer server;
  std::string out;
  ASSERT_EQ(run_python(server, "write", "py-write", out), 0) << out;
  // The generic from_store recognises the lazy stack by __type__.
  auto store = td::redis::from_store(on(server, "py-write"));
  ASSERT_TRUE(td::redis::is_lazy_stack_store(store));
  EXPECT_EQ(store.type_name(), "LazyStackedTensorDictStore");
  EXPECT_EQ(td::redis::count(store), 3);
  EXPECT_EQ(td::redis::stack_dim(store), 1);
  EXPECT_EQ(td::redis::inner_batch_size(store), (std::vector<int64_t>{2}));
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(td::redis::element_shapes(store, "seq"),
            (std::vector<std::vector<int64_t>>{{2, 1}, {2, 2}, {2, 3}}));
  std::vector<td::TensorDictBase> want;
  for (int64_t a = 0; a < 3; ++a)
    want.push_back(
        td::TensorDict({{"pos", torch::arange(6, torch::kFloat32).view({2, 3}) + 10 * a},
                        {"seq", torch::arange(2 * (a + 1), torch::kInt64).view({2, a + 1}) - a}},
                       {2}));
  // The homogeneous key stacked along dim 1, as Python's lazy stack reads it.
  EXPECT_TRUE(
      torch::equal(store.get("pos"),
                   torch::stack({want[0].get("pos"), want[1].get("pos"), want[2].get("pos")}, 1)));
  TD_EXPECT_THROW_MSG(store.get("seq"), td::ShapeError, "'seq'", "[2, 1], [2, 2], [2, 3]");
  for (int64_t a = 0; a < 3; ++a) expect_same(td::redis::element(store, a), want[a]);
  auto back = td::redis::to_lazy_stack(store);
  EXPECT_EQ(back.stack_dim(), 1);
  ASSERT_EQ(back.num_members(), 3u);
  for (int64_t a = 0; a < 3; ++a) expect_same(back.member(a), want[a]);
  // Writing into Python's layout: element 2 of "seq" keeps its slot.
  td::redis::set_element(
      store, 2,
      td::TensorDict(
          {{"pos", torch::zeros({2, 3})}, {"seq", torch::full({2, 3}, -5, torch::kInt64)}}, {2}));
  auto again = td::redis::from_store(on(server, "py-write"));
  expect_same(td::redis::element(again, 1), want[1]);
  EXPECT_TRUE(torch::equal(td::redis::element(again, 2).get("seq"),
                           torch::full({2, 3}, -5, torch::kInt64)));
}

// ---- elements ---------------------------------------------------------------------

TEST(LazyStackRedis, ElementReadsAreOneRoundTrip) {
  RedisServer server;
  auto stack = agents();
  auto store = td::redis::from_lazy_stack(stack, on(server));
  auto fresh = td::redis::from_store(on(server, td::redis::td_id(store)));
  const auto before = td::redis::round_trips(fresh);
  server.reset_stats();
  auto one = td::redis::element(fresh, 1);
  EXPECT_EQ(td::redis::round_trips(fresh), before + 1);
  expect_same(one, stack.member(1));
  auto some = td::redis::elements(fresh, {2, 0, -1});
  EXPECT_EQ(td::redis::round_trips(fresh), before + 2);
  ASSERT_EQ(some.size(), 3u);
  expect_same(some[0], stack.member(2));
  expect_same(some[1], stack.member(0));
  expect_same(some[2], stack.member(2));
  // Only ranged reads reached the server (and the size guards).
  const auto calls = server.command_calls();
  std::set<std::string> names;
  for (const auto& [name, n] : calls) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"getrange", "strlen", "scard", "multi", "exec"}));
  EXPECT_EQ(calls.at("exec"), 2);
  // td[i] through the TensorDictBase API: one round trip as well.
  auto row = fresh[2];
  EXPECT_EQ(td::redis::round_trips(fresh), before + 3);
  expect_same(row, stack.member(2));
  TD_EXPECT_THROW_MSG(td::redis::element(fresh, 3), td::IndexError, "index 3", "3 elements");
}

TEST(LazyStackRedis, AnotherProcessAddsAKey) {
  RedisServer server;
  auto writer = td::redis::from_lazy_stack(agents(), on(server, "shared"));
  auto reader = td::redis::from_store(on(server, "shared"));
  EXPECT_EQ(reader.keys().size(), 3u);
  auto e = td::redis::element(writer, 0);
  e.set("done", torch::ones({4}, torch::kUInt8));
  td::redis::set_element(writer, 0, e);
  // The reader's cached keys are refreshed by the element read that notices.
  auto seen = td::redis::element(reader, 0);
  EXPECT_TRUE(seen.contains("done"));
  EXPECT_TRUE(torch::equal(seen.get("done"), torch::ones({4}, torch::kUInt8)));
  EXPECT_TRUE(
      torch::equal(td::redis::element(reader, 1).get("done"), torch::zeros({4}, torch::kUInt8)));
  // A key another process removed is gone from the reader's next element read.
  writer.del_("done");
  EXPECT_FALSE(td::redis::element(reader, 2).contains("done"));
}

TEST(LazyStackRedis, ElementWrites) {
  RedisServer server;
  auto stack = agents();
  auto store = td::redis::from_lazy_stack(stack, on(server));
  const auto before = td::redis::round_trips(store);
  td::TensorDict e0(
      {{"obs", torch::full({4, 3}, -1.0)},
       {"reward", torch::full({4}, 9.0)},
       {"next", td::TensorDict({{"obs", torch::full({4, 2}, 3, torch::kInt64)}}, {4})}},
      {4});
  td::redis::set_element(store, 0, e0);
  EXPECT_EQ(td::redis::round_trips(store), before + 1);
  expect_same(td::redis::element(store, 0), e0);
  expect_same(td::redis::element(store, 1), stack.member(1));
  // An element of another size: ShapeError naming the key, nothing written.
  td::TensorDict wrong(
      {{"obs", torch::zeros({4, 6})},
       {"reward", torch::zeros({4})},
       {"next", td::TensorDict({{"obs", torch::zeros({4, 2}, torch::kInt64)}}, {4})}},
      {4});
  TD_EXPECT_THROW_MSG(td::redis::set_element(store, 1, wrong), td::ShapeError, "'obs'", "[4, 5]",
                      "[4, 6]");
  expect_same(td::redis::element(store, 1), stack.member(1));
  // An element lacking a key: KeyError naming it.
  TD_EXPECT_THROW_MSG(
      td::redis::set_element(store, 1, td::TensorDict({{"reward", torch::zeros({4})}}, {4})),
      td::KeyError, "'obs'");
  // A homogeneous key through index_put_: rows of every leaf in one round trip.
  auto homog = td::redis::from_lazy_stack(homogeneous(), on(server));
  const auto rt = td::redis::round_trips(homog);
  auto local = homogeneous().to_tensordict();
  td::TensorDict row({{"x", torch::full({4, 3}, -2.0)},
                      {"n", torch::full({4}, -2, torch::kInt64)},
                      {"sub", td::TensorDict({{"y", torch::full({4, 2}, -2.0)}}, {4})}},
                     {4});
  homog.index_put_({3}, row);
  local.index_put_({3}, row);
  EXPECT_EQ(td::redis::round_trips(homog), rt + 1);
  expect_same(homog.to_tensordict(), local);
}

// ---- the TensorDictBase API against the same stack in memory --------------------

TEST(LazyStackRedis, IndexingMatchesMemory) {
  RedisServer server;
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE("stack dim " + std::to_string(dim));
    auto stack = homogeneous(dim);
    auto store = td::redis::from_lazy_stack(stack, on(server));
    auto local = stack.to_tensordict();
    EXPECT_EQ(store.batch_size(), local.batch_size());
    expect_same(store.to_tensordict(), local);
    EXPECT_TRUE(torch::equal(store.get({"sub", "y"}), local.get({"sub", "y"})));
    const at::Tensor mask = torch::arange(store.batch_size()[0]).remainder(2).eq(0);
    const std::vector<std::vector<at::indexing::TensorIndex>> indices{
        {1},       {-1},         {Slice(1, 4)},    {Slice(None, None, 2)},
        {mask},    {Slice(), 2}, {2, Slice(1, 3)}, {torch::tensor({3, 0, 3})},
        {None, 1}, {Ellipsis, 0}};
    for (std::size_t i = 0; i < indices.size(); ++i) {
      SCOPED_TRACE("index #" + std::to_string(i));
      expect_same(store.index(indices[i]), local.index(indices[i]));
    }
    // Writes: whole elements, parts of elements, every index form.
    for (std::size_t i = 0; i < indices.size(); ++i) {
      SCOPED_TRACE("index_put_ #" + std::to_string(i));
      const auto& idx = indices[i];
      auto value = local.index(idx).apply(
          [i](const at::Tensor& t) { return t * -3 + static_cast<int64_t>(i); });
      if (idx[0].is_none()) value = value.squeeze(0);
      store.index_put_(idx, value);
      local.index_put_(idx, value);
      expect_same(store.to_tensordict(), local);
    }
    // The same data seen by a new handle (nothing cached).
    expect_same(td::redis::from_store(on(server, td::redis::td_id(store))).to_tensordict(), local);
  }
}

TEST(LazyStackRedis, HeterogeneousThroughTheGenericApi) {
  RedisServer server;
  auto stack = agents();
  auto store = td::redis::from_lazy_stack(stack, on(server));
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(store.keys(), (std::vector<td::NestedKey>{"next", "obs", "reward"}));
  // td[i] is element i, whatever its shapes.
  expect_same(store[1], stack.member(1));
  expect_same(store.index({2, Slice(1, 3)}), stack.member(2).index({Slice(1, 3)}));
  EXPECT_TRUE(torch::equal(store.get("reward"), stack.get("reward")));
  TD_EXPECT_THROW_MSG(store.get("obs"), td::ShapeError, "'obs'", "[4, 3], [4, 5], [4, 7]");
  TD_EXPECT_THROW_MSG(store.to_tensordict(), td::ShapeError, "'obs'");
  TD_EXPECT_THROW_MSG(store.index({Slice(0, 2)}), td::ShapeError, "'obs'", "[4, 3], [4, 5]");
  // A part of one element of a heterogeneous key (read, patch, write back).
  store.set_at_("obs", torch::full({3}, 42.0), {0, 2});
  auto e0 = td::redis::element(store, 0);
  EXPECT_TRUE(torch::equal(e0.get("obs")[2], torch::full({3}, 42.0)));
  EXPECT_TRUE(torch::equal(e0.get("obs")[1], stack.member(0).get("obs")[1]));
  expect_same(td::redis::element(store, 1), stack.member(1));
  // A whole stacked value replaces a key (homogeneous, element-major).
  store.set("score", torch::arange(12, torch::kFloat32).view({3, 4}));
  EXPECT_EQ(hash(server, td::redis::server_key(store, "m:score")).at("homogeneous"), "1");
  EXPECT_TRUE(torch::equal(td::redis::element(store, 2).get("score"),
                           torch::arange(8, 12, torch::kFloat32)));
  store.del_("score");
  EXPECT_EQ(server.command({"EXISTS", td::redis::server_key(store, "d:score")}), "0");
  EXPECT_NE(store.repr().find("LazyStackedTensorDictStore"), std::string::npos);
  // from_tensordict routes a lazy stack here, as Python's does.
  auto routed = td::redis::from_tensordict(stack, on(server));
  EXPECT_TRUE(td::redis::is_lazy_stack_store(routed));
  expect_same(td::redis::element(routed, 2), stack.member(2));
}

TEST(LazyStackRedis, StackDimOneWrittenByCpp) {
  RedisServer server;
  auto stack = agents();
  std::vector<td::TensorDictBase> members = stack.tensordicts();
  auto along1 = td::lazy_stack(members, 1);
  auto store = td::redis::from_lazy_stack(along1, on(server, "dim1"));
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(server.command({"GET", "tensordict:{dim1}:__stack_dim__"}), "1");
  // Element-major regardless of the stack dim.
  EXPECT_EQ(server.command({"GET", "tensordict:{dim1}:d:reward"}),
            bytes_of(torch::stack(
                {members[0].get("reward"), members[1].get("reward"), members[2].get("reward")})));
  EXPECT_TRUE(torch::equal(store.get("reward"), along1.get("reward")));
  EXPECT_TRUE(torch::equal(store.get_at("reward", {2}), along1.get_at("reward", {2})));
  TD_EXPECT_THROW_MSG(store.index({2}), td::ShapeError, "'obs'");  // step 2 of ragged agents
  auto back = td::redis::to_lazy_stack(store);
  EXPECT_EQ(back.stack_dim(), 1);
  for (int64_t a = 0; a < 3; ++a) expect_same(back.member(a), members[a]);
}

// ---- lifecycle and errors ------------------------------------------------------

TEST(LazyStackRedis, ClearCloseReattach) {
  RedisServer server;
  auto store = td::redis::from_lazy_stack(agents(), on(server, "life"));
  td::redis::close(store);
  expect_same(td::redis::element(store, 0), agents().member(0));  // reconnects
  td::redis::clear(store);
  EXPECT_EQ(server.command({"KEYS", "tensordict:{life}:*"}), "");
  TD_EXPECT_THROW_MSG(td::redis::from_store(on(server, "life")), td::KeyError, "life");
  TD_EXPECT_THROW_MSG(td::redis::from_lazy_stack_store(on(server, "life")), td::KeyError, "life",
                      "__type__");
}

TEST(LazyStackRedis, BadInputIsRefusedNamingTheKey) {
  RedisServer server;
  auto a = td::TensorDict({{"x", torch::zeros({2})}, {"only_a", torch::zeros({2})}}, {2});
  auto b = td::TensorDict({{"x", torch::zeros({2})}}, {2});
  TD_EXPECT_THROW_MSG(td::redis::from_lazy_stack(td::lazy_stack({a, b}), on(server)), td::KeyError,
                      "only_a", "member 1");
  auto c = td::TensorDict({{"x", torch::zeros({2}, torch::kInt64)}}, {2});
  TD_EXPECT_THROW_MSG(td::redis::from_lazy_stack(td::lazy_stack({b, c}), on(server)), td::TypeError,
                      "'x'", "torch.float32", "torch.int64");
  auto d = td::TensorDict({{"x", torch::zeros({2})}, {"label", "cat"}}, {2});
  auto e = td::TensorDict({{"x", torch::zeros({2})}, {"label", "dog"}}, {2});
  TD_EXPECT_THROW_MSG(td::redis::from_lazy_stack(td::lazy_stack({d, e}), on(server)), td::TypeError,
                      "label", "tensors only");
  auto store = td::redis::from_lazy_stack(td::lazy_stack({b, b.clone()}), on(server, "bad"));
  TD_EXPECT_THROW_MSG(store.set("label", "x"), td::TypeError, "label", "tensors only");
  // A corrupt offset table is a FormatError naming the server key.
  auto het = td::redis::from_lazy_stack(
      td::lazy_stack({td::TensorDict({{"v", torch::zeros({2, 1})}}, {2}),
                      td::TensorDict({{"v", torch::zeros({2, 3})}}, {2})}),
      on(server, "het"));
  server.command({"SET", "tensordict:{het}:d:v:idx", "short"});
  TD_EXPECT_THROW_MSG(td::redis::from_store(on(server, "het")), td::FormatError,
                      "tensordict:{het}:d:v:idx");
  server.command({"SET", "tensordict:{het}:__count__", "two"});
  TD_EXPECT_THROW_MSG(td::redis::from_store(on(server, "het")), td::FormatError, "__count__",
                      "two");
}

}  // namespace

// LazyStackedTensorDictStore is the handle type of a lazy-stack store, a
// TensorDictStore with the element operations as members (issue #33).
TEST(LazyStackRedis, LazyStackedTensorDictStoreIsTheHandleType) {
  RedisServer server;
  td::LazyStackedTensorDictStore store =
      td::LazyStackedTensorDictStore::from_lazy_stack(agents(), on(server, "typed-ls"));
  EXPECT_TRUE(store.is<td::LazyStackedTensorDictStore>());
  EXPECT_TRUE(store.is<td::TensorDictStore>());
  EXPECT_EQ(store.type_name(), "LazyStackedTensorDictStore");
  EXPECT_EQ(store.count(), 3);
  EXPECT_EQ(store.stack_dim(), 0);
  EXPECT_EQ(store.inner_batch_size(), std::vector<int64_t>{4});
  EXPECT_EQ(store.element_shapes("obs")[2], (std::vector<int64_t>{4, 7}));
  EXPECT_TRUE(torch::equal(store.element(1).get("obs"), agents().tensordicts()[1].get("obs")));
  // from_store of any kind returns the lazy-stack store, as<> reaches its members.
  td::TensorDictStore any = td::TensorDictStore::from_store(on(server, "typed-ls"));
  auto again = any.as<td::LazyStackedTensorDictStore>();
  EXPECT_EQ(again.td_id(), "typed-ls");
  auto e = again.element(2);
  e.set("reward", torch::full({4}, 9.0f));
  const auto before = again.round_trips();
  again.set_element(2, e);
  EXPECT_EQ(again.round_trips() - before, 1);
  EXPECT_TRUE(torch::equal(store.element(2).get("reward"), torch::full({4}, 9.0f)));
  // A plain store is not a lazy-stack store.
  auto plain = td::TensorDictStore::create(on(server, "typed-plain"), {2});
  EXPECT_THROW((void)plain.as<td::LazyStackedTensorDictStore>(), td::TypeError);
}
