// Interop with the real Python tensordict: Redis (TensorDictStore and
// LazyStackedTensorDictStore, see tests/python/peer.h). One redis-server
// started here (tests/support/redis_server.h) for the whole program; each
// case is a store on it, td_id "py-<Case>" when Python wrote it and
// "cpp-<Case>" when C++ did, checked against the truth written beside it
// (truth.py). Python's side is tests/python/redis_cases.py, run once per
// direction; the concurrent writers are tests/python/redis_peer.py.
#include "pch.h"

#include "python/peer.h"
#include "support/redis_server.h"

#include <tensordict/lazy_stack.h>
#include <tensordict/stack.h>
#include <tensordict/storage/redis.h>
#include <tensordict/storage/redis_lazy_stack.h>
#include <tensordict/tensor_class.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

namespace {

namespace td = tensordict;
using namespace td_python;
using td_test::on;
using td_test::RedisServer;

/// The class Python's redis_cases.py declares: Python's from_store imports it
/// from the __tensorclass__ record, and C++ attaches with from_store_as.
struct Transition : td::TensorClass<Transition> {
  static constexpr std::string_view python_qualname = "redis_cases.Transition";
  TENSORDICT_FIELDS(obs, action);
  TENSORDICT_NON_TENSOR_FIELDS((std::string, env));
};

// ---- the server and the two directions, shared by the suites ------------------

RedisServer& server() {
  static std::unique_ptr<RedisServer> s = std::make_unique<RedisServer>();
  return *s;
}

void write_server_json(const fs::path& dir) {
  std::ofstream(dir / "server.json") << nlohmann::json{{"socket", server().socket()}}.dump();
}

// Distinct values of every dtype (negative ones where it has them).
at::Tensor ramp(std::vector<int64_t> shape, at::ScalarType dtype, int64_t seed) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  at::Tensor base = torch::arange(n, torch::kFloat64) * 1.25 + static_cast<double>(seed);
  at::Tensor out;
  if (dtype == at::kBool)
    out = torch::arange(n).remainder(3).eq(seed % 3);
  else if (dtype == at::kByte)
    out = (torch::arange(n) * 7 + seed).remainder(256).to(at::kByte);
  else if (at::isComplexType(dtype))
    out = torch::complex(base, -base).to(dtype);
  else if (!at::isFloatingType(dtype))
    out = (torch::arange(n, torch::kInt64) * 37 - 5 * n + seed).to(dtype);
  else
    out = base.to(dtype);
  return out.reshape(shape);
}

// The schema of both sides' from_schema stores (redis_cases.py's _SCHEMA).
td::Schema row_schema() {
  return td::Schema{{"obs", {{3}, torch::kFloat32}},     {"action", {{}, torch::kInt64}},
                    {"pixels", {{2, 2}, torch::kUInt8}}, {"done", {{}, torch::kBool}},
                    {"half", {{2}, torch::kBFloat16}},   {{"next", "obs"}, {{3}, torch::kFloat64}}};
}

// Row i of a schema store (redis_cases.py's _schema_row, but "half" holds
// bfloat16 values, which only C++ can write).
td::TensorDict schema_row(int64_t i) {
  td::TensorDict row({{"obs", ramp({3}, torch::kFloat32, i)},
                      {"action", torch::tensor(100 + i)},
                      {"pixels", ramp({2, 2}, torch::kUInt8, i)},
                      {"done", torch::tensor(i % 2 == 1)},
                      {"half", ramp({2}, torch::kBFloat16, i)}},
                     {});
  row.set({"next", "obs"}, ramp({3}, torch::kFloat64, 10 * i));
  return row;
}

// Zeros of the schema with rows `rows` written, in memory.
td::TensorDict schema_expected(int64_t n, const std::vector<int64_t>& rows, bool with_half) {
  td::TensorDict out({}, {n});
  const td::Schema schema = row_schema();
  for (const auto& [key, spec] : schema.entries()) {
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    out.set(key, torch::zeros(shape, torch::TensorOptions().dtype(spec.dtype)));
  }
  for (int64_t i : rows) {
    td::TensorDict row = schema_row(i);
    if (!with_half) row.set("half", torch::zeros({2}, torch::kBFloat16));
    out.index_put_({i}, row);
  }
  return out;
}

const fs::path& py_dir() {
  static const fs::path d = fresh_dir("redis-py");
  return d;
}

/// Python's cases, written once (the C++ store that one of them writes rows
/// into is made first).
const nlohmann::json& python_written() {
  static const nlohmann::json results = [] {
    td::from_schema(row_schema(), {6}, on(server(), "cpp-RowsTarget"));
    write_server_json(py_dir());
    return run_suite("redis", "write", py_dir());
  }();
  return results;
}

td::TensorDictBase py_store(const std::string& name) {
  return td::redis::from_store(on(server(), "py-" + name));
}

// ---- Python writes, C++ reads -------------------------------------------------------

class RedisFromPython : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { python_written(); }
  static fs::path truth(const std::string& name, const std::string& which = "truth") {
    return py_dir() / name / which;
  }
};

TEST_F(RedisFromPython, NestedKeysAndDtypes) {
  ASSERT_TRUE(peer_ok(python_written(), "Dtypes"));
  auto store = py_store("Dtypes");
  EXPECT_TRUE(matches_truth(store, truth("Dtypes")));
  EXPECT_TRUE(matches_truth(store.to_tensordict(), truth("Dtypes")));
}

TEST_F(RedisFromPython, ScalarBatch) {
  ASSERT_TRUE(peer_ok(python_written(), "ScalarBatch"));
  EXPECT_TRUE(matches_truth(py_store("ScalarBatch"), truth("ScalarBatch")));
}

TEST_F(RedisFromPython, TwoBatchDims) {
  ASSERT_TRUE(peer_ok(python_written(), "Batch2D"));
  auto store = py_store("Batch2D");
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(matches_truth(store, truth("Batch2D")));
}

TEST_F(RedisFromPython, NonTensorValues) {
  ASSERT_TRUE(peer_ok(python_written(), "NonTensor"));
  auto store = py_store("NonTensor");
  EXPECT_TRUE(matches_truth(store, truth("NonTensor")));
  EXPECT_EQ(store.get_non_tensor("name"), "pong-v5");
  EXPECT_EQ(store.get_non_tensor({"nested", "note"}), "deep");
}

TEST_F(RedisFromPython, TensorClassRecord) {
  ASSERT_TRUE(peer_ok(python_written(), "TensorClass"));
  auto tc = td::redis::from_store_as<Transition>(on(server(), "py-TensorClass"));
  EXPECT_EQ(td::redis::tensorclass_name(tc.tensordict()), "redis_cases.Transition");
  EXPECT_EQ(tc.env(), "Pong");
  EXPECT_TRUE(matches_truth(tc.tensordict(), truth("TensorClass")));
}

TEST_F(RedisFromPython, FromSchemaThenRows) {
  ASSERT_TRUE(peer_ok(python_written(), "FromSchema"));
  auto store = py_store("FromSchema");
  EXPECT_TRUE(matches_truth(store, truth("FromSchema")));
  // Row reads of Python's store: an index tensor, a slice, one row.
  const td::TensorDict all = store.to_tensordict();
  const at::Tensor idx = torch::tensor({4, 1, 4});
  EXPECT_TRUE(matches_truth(store.index({idx}), [&] {
    const fs::path d = py_dir() / "FromSchema" / "cpp_rows";
    write_truth(all.index({idx}), d);
    return d;
  }()));
  EXPECT_EQ(store.index({1}).get("action").item<int64_t>(), 101);
  EXPECT_TRUE(torch::equal(store.index({torch::indexing::Slice(0, 2)}).get({"next", "obs"}),
                           all.get({"next", "obs"}).slice(0, 0, 2)));
}

TEST_F(RedisFromPython, RowsWrittenIntoACppStore) {
  ASSERT_TRUE(peer_ok(python_written(), "RowsIntoCppStore"));
  auto store = td::redis::from_store(on(server(), "cpp-RowsTarget"));
  EXPECT_TRUE(matches_truth(store, truth("RowsIntoCppStore")));
}

TEST_F(RedisFromPython, CppWritesRowsIntoAPythonStoreAndReadsThemBack) {
  ASSERT_TRUE(peer_ok(python_written(), "DtypesRW"));
  // Python's Dtypes store again (its own copy): rows written by C++ in
  // Python's layout read back the same through a fresh attach.
  auto store = py_store("DtypesRW");
  td::TensorDict local = store.to_tensordict();
  td::TensorDict row = local.index({3}).to_tensordict();
  store.index_put_({torch::tensor({0, 2})}, td::stack({row, row}));
  local.index_put_({torch::tensor({0, 2})}, td::stack({row, row}));
  auto again = py_store("DtypesRW");
  const fs::path d = py_dir() / "DtypesRW" / "after_cpp_rows";
  write_truth(local, d);
  EXPECT_TRUE(matches_truth(again, d));
}

TEST_F(RedisFromPython, PickledValueIsAFormatError) {
  ASSERT_TRUE(peer_ok(python_written(), "Pickle"));
  auto store = py_store("Pickle");
  EXPECT_EQ(server().command({"HGET", "tensordict:{py-Pickle}:m:obj", "encoding"}), "pickle");
  EXPECT_TRUE(torch::equal(store.get("obs"), ramp({2}, torch::kFloat32, 1)));
  try {
    (void)store.at("obj");
    ADD_FAILURE() << "C++ read a pickled value";
  } catch (const td::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("pickled Python object"), std::string::npos) << e.what();
  }
}

TEST_F(RedisFromPython, LazyStackAlongDim0) {
  ASSERT_TRUE(peer_ok(python_written(), "LazyStack0"));
  auto store = td::redis::from_store(on(server(), "py-LazyStack0"));
  ASSERT_TRUE(td::redis::is_lazy_stack_store(store));
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{3, 2}));
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(matches_truth(td::redis::element(store, i),
                              truth("LazyStack0", "truth_" + std::to_string(i))))
        << "element " << i;
  const auto elems = td::redis::elements(store, {2, 0});
  EXPECT_TRUE(matches_truth(elems[0], truth("LazyStack0", "truth_2")));
  EXPECT_TRUE(matches_truth(elems[1], truth("LazyStack0", "truth_0")));
}

void check_python_dim1(const std::string& name, int64_t count) {
  ASSERT_TRUE(peer_ok(python_written(), name));
  auto store = td::redis::from_store(on(server(), "py-" + name));
  ASSERT_TRUE(td::redis::is_lazy_stack_store(store));
  EXPECT_EQ(td::redis::stack_dim(store), 1);
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{2, count}));
  EXPECT_EQ(server().command({"HGET", "tensordict:{py-" + name + "}:m:full", "layout"}), "batch");
  for (int64_t i = 0; i < count; ++i)
    EXPECT_TRUE(matches_truth(td::redis::element(store, i),
                              py_dir() / name / ("truth_" + std::to_string(i))))
        << "element " << i;
  td::TensorDict stacked({}, store.batch_size().vec());
  stacked.set("pos", store.get("pos"));
  stacked.set("full", store.get("full"));
  EXPECT_TRUE(matches_truth(stacked, py_dir() / name / "truth_stacked"));
}

TEST_F(RedisFromPython, LazyStackAlongDim1WithABatchLayoutLeaf) {
  check_python_dim1("LazyStack1", 3);
}

TEST_F(RedisFromPython, LazyStackSquareBatchLayoutFromTheLayoutField) {
  check_python_dim1("LazyStackSquare", 2);
}

TEST_F(RedisFromPython, CppWritesAnElementOfAPythonBatchLayoutLeaf) {
  ASSERT_TRUE(peer_ok(python_written(), "LazyStackSquareRW"));
  // Writes element 1 (every leaf) in place, then a fresh handle reads it: the
  // "batch" leaf keeps Python's layout, its other element is untouched.
  auto store = td::redis::from_store(on(server(), "py-LazyStackSquareRW"));
  td::TensorDict e0 = td::redis::element(store, 0);
  td::TensorDict e1 = td::redis::element(store, 1);
  e1.set("full", ramp({2, 4}, torch::kFloat64, 99));
  e1.set("pos", ramp({2, 3}, torch::kFloat32, 77));
  td::redis::set_element(store, 1, e1);
  EXPECT_EQ(server().command({"HGET", "tensordict:{py-LazyStackSquareRW}:m:full", "layout"}),
            "batch");
  auto again = td::redis::from_store(on(server(), "py-LazyStackSquareRW"));
  const fs::path d0 = py_dir() / "LazyStackSquareRW" / "after_0";
  const fs::path d1 = py_dir() / "LazyStackSquareRW" / "after_1";
  write_truth(e0, d0);
  write_truth(e1, d1);
  EXPECT_TRUE(matches_truth(td::redis::element(again, 0), d0));
  EXPECT_TRUE(matches_truth(td::redis::element(again, 1), d1));
}

// ---- C++ writes, Python reads -------------------------------------------------------

const fs::path& cpp_dir() {
  static const fs::path d = fresh_dir("redis-cpp");
  return d;
}

td::storage::Redis cpp_opts(const std::string& name) { return on(server(), "cpp-" + name); }

td::TensorDict dtypes_td() {
  td::TensorDict data({{"f32", ramp({4, 3}, torch::kFloat32, 1)},
                       {"f64", ramp({4}, torch::kFloat64, 2)},
                       {"f16", ramp({4, 2}, torch::kFloat16, 3)},
                       {"bf16", ramp({4, 2}, torch::kBFloat16, 4)},
                       {"i8", ramp({4}, torch::kInt8, 5)},
                       {"i16", ramp({4, 2}, torch::kInt16, 6)},
                       {"i32", ramp({4}, torch::kInt32, 7)},
                       {"i64", ramp({4, 1}, torch::kInt64, 8)},
                       {"u8", ramp({4, 5}, torch::kUInt8, 9)},
                       {"b", ramp({4}, torch::kBool, 10)},
                       {"c64", ramp({4, 2}, torch::kComplexFloat, 11)},
                       {"c128", ramp({4}, torch::kComplexDouble, 12)}},
                      {4});
  data.set({"nested", "x"}, ramp({4, 2}, torch::kFloat32, 13));
  data.set({"nested", "deeper", "y"}, ramp({4}, torch::kInt64, 14));
  return data;
}

// Each C++ case writes its store and truth; the Python check then runs once.
using CppCase = std::function<void(const fs::path&)>;

void plain(const std::string& name, const fs::path& dir, const td::TensorDict& data) {
  td::redis::from_tensordict(data, cpp_opts(name));
  write_truth(data, dir / "truth");
}

void rows_truth(const fs::path& dir, const td::TensorDictBase& all, std::vector<int64_t> idx) {
  std::ofstream(dir / "rows.json") << nlohmann::json(idx).dump();
  write_truth(all.index({torch::tensor(idx)}), dir / "truth_rows");
  write_truth(all.index({idx[0]}), dir / "truth_row0");
}

void lazy_truth(const fs::path& dir, const td::TensorDictBase& store,
                const std::vector<td::TensorDict>& members,
                const std::vector<std::string>& stacked) {
  nlohmann::json keys = nlohmann::json::array();
  td::TensorDict dense({}, store.batch_size().vec());
  for (const auto& k : stacked) {
    keys.push_back({k});
    dense.set(k, store.get(k));
  }
  std::ofstream(dir / "lazy.json") << nlohmann::json{
      {"batch_size", store.batch_size().vec()},
      {"count", members.size()},
      {"stacked", keys}}.dump();
  for (std::size_t i = 0; i < members.size(); ++i)
    write_truth(members[i], dir / ("truth_" + std::to_string(i)));
  write_truth(dense, dir / "truth_stacked");
}

std::vector<td::TensorDict> agents(bool hetero) {
  std::vector<td::TensorDict> out;
  for (int64_t k = 0; k < 3; ++k) {
    td::TensorDict a({{"obs", ramp({2, hetero ? 3 + k : 3}, torch::kFloat32, 100 * k)},
                      {"reward", ramp({2}, torch::kFloat32, k)}},
                     {2});
    a.set({"next", "obs"}, ramp({2, 2}, torch::kInt64, 10 * k));
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<td::TensorDictBase> as_base(const std::vector<td::TensorDict>& v) {
  return std::vector<td::TensorDictBase>(v.begin(), v.end());
}

const std::map<std::string, CppCase>& cpp_cases() {
  static const std::map<std::string, CppCase> cases{
      {"Dtypes", [](const fs::path& d) { plain("Dtypes", d, dtypes_td()); }},
      {"ScalarBatch",
       [](const fs::path& d) {
         td::TensorDict data({{"a", torch::tensor(3.5)}, {"v", ramp({3}, torch::kInt32, 1)}}, {});
         data.set({"n", "m"}, ramp({2, 2}, torch::kFloat64, 2));
         plain("ScalarBatch", d, data);
       }},
      {"Batch2D",
       [](const fs::path& d) {
         td::TensorDict data({{"obs", ramp({2, 3, 4}, torch::kFloat32, 1)},
                              {"done", ramp({2, 3}, torch::kBool, 2)}},
                             {2, 3});
         data.set({"next", "obs"}, ramp({2, 3, 4}, torch::kFloat32, 3));
         plain("Batch2D", d, data);
       }},
      {"NonTensor",
       [](const fs::path& d) {
         td::TensorDict data({{"obs", ramp({3, 2}, torch::kFloat32, 1)}}, {3});
         data.set_non_tensor("name", "pong-v5");
         data.set("labels", td::NonTensorStack({"a", "b", "c"}));
         data.set_non_tensor({"nested", "note"}, "deep");
         // Python reads a number or a dict back with store[key], but its
         // to_tensordict() takes them for a tensor and a nested level and
         // fails: the truth leaves them out, scalars.json holds them.
         const nlohmann::json scalars{
             {"count", 42}, {"cfg", {{"lr", 0.5}, {"layers", {64, 64}}, {"tag", "\u00e9t\u00e9"}}}};
         for (const auto& [k, v] : scalars.items()) data.set_non_tensor(k, v);
         td::redis::from_tensordict(data, cpp_opts("NonTensor"));
         write_truth(data.exclude({"count", "cfg"}), d / "truth");
         std::ofstream(d / "scalars.json") << scalars.dump();
       }},
      {"TensorClass",
       [](const fs::path& d) {
         Transition tc({{"obs", ramp({2, 3}, torch::kFloat32, 1)},
                        {"action", ramp({2}, torch::kInt64, 2)},
                        {"env", "Pong"}},
                       {2});
         td::redis::from_tensorclass(tc, cpp_opts("TensorClass"));
         td::TensorDict all = tc.tensordict().to_tensordict();
         all.set_non_tensor("env", "Pong");
         write_truth(all, d / "truth");
       }},
      {"FromSchema",
       [](const fs::path& d) {
         auto store = td::from_schema(row_schema(), {5}, cpp_opts("FromSchema"));
         store.index_put_({1}, schema_row(1));
         store.index_put_({torch::tensor({4, 0})}, td::stack({schema_row(4), schema_row(0)}));
         const td::TensorDict all = schema_expected(5, {1, 4, 0}, /*with_half=*/true);
         write_truth(all, d / "truth");
         rows_truth(d, all, {4, 1, 0, 4});
       }},
      {"RowReads",
       [](const fs::path& d) {
         plain("RowReads", d, dtypes_td());
         rows_truth(d, dtypes_td(), {3, 0, 2});
       }},
      {"RowsIntoPythonStore",
       [](const fs::path& d) {
         // Python made "py-RowsTarget" (from_schema, batch [6]) in its write phase.
         auto store = td::redis::from_store(on(server(), "py-RowsTarget"));
         store.index_put_({2}, schema_row(2));
         store.index_put_({torch::tensor({5, 0})}, td::stack({schema_row(5), schema_row(0)}));
         store.index_put_({torch::indexing::Slice(3, 5)},
                          td::stack({schema_row(3), schema_row(4)}));
         write_truth(schema_expected(6, {2, 5, 0, 3, 4}, /*with_half=*/true), d / "truth");
       }},
      {"LazyStack0",
       [](const fs::path& d) {
         const auto members = agents(/*hetero=*/true);
         auto store = td::redis::from_lazy_stack(td::lazy_stack(as_base(members), 0),
                                                 cpp_opts("LazyStack0"));
         lazy_truth(d, store, members, {"reward"});
       }},
      {"LazyStack1",
       [](const fs::path& d) {
         auto members = agents(/*hetero=*/false);
         auto store = td::redis::from_lazy_stack(td::lazy_stack(as_base(members), 1),
                                                 cpp_opts("LazyStack1"));
         lazy_truth(d, store, members, {"obs", "reward"});
       }},
      {"LazyStackSquare",
       [](const fs::path& d) {
         // count == inner batch size: Python needs the "layout" field.
         std::vector<td::TensorDict> members;
         for (int64_t k = 0; k < 2; ++k)
           members.push_back(td::TensorDict({{"pos", ramp({2, 3}, torch::kFloat32, 10 * k)}}, {2}));
         auto store = td::redis::from_lazy_stack(td::lazy_stack(as_base(members), 1),
                                                 cpp_opts("LazyStackSquare"));
         lazy_truth(d, store, members, {"pos"});
       }},
  };
  return cases;
}

/// What each C++ case threw while writing (empty: nothing), and the Python
/// check of every case, run once.
struct CppWritten {
  std::map<std::string, std::string> errors;
  nlohmann::json results;
};

const CppWritten& cpp_written() {
  static const CppWritten written = [] {
    python_written();  // the Python stores C++ writes rows into
    CppWritten w;
    write_server_json(cpp_dir());
    for (const auto& [name, write] : cpp_cases()) {
      fs::create_directories(cpp_dir() / name);
      try {
        write(cpp_dir() / name);
      } catch (const std::exception& e) {
        w.errors[name] = e.what();
      }
    }
    w.results = run_suite("redis", "check", cpp_dir());
    return w;
  }();
  return written;
}

class RedisToPython : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cpp_written(); }
  static ::testing::AssertionResult python_read(const std::string& name) {
    const auto& w = cpp_written();
    if (w.errors.count(name))
      return ::testing::AssertionFailure()
             << "C++ failed to write " << name << ": " << w.errors.at(name);
    return peer_ok(w.results, name);
  }
};

TEST_F(RedisToPython, NestedKeysAndDtypes) {
  EXPECT_TRUE(python_read("Dtypes"));
  // The names Python prints for each dtype (str(dtype)) are what C++ wrote.
  EXPECT_EQ(server().command({"HGET", "tensordict:{cpp-Dtypes}:m:bf16", "dtype"}),
            "torch.bfloat16");
  EXPECT_EQ(server().command({"HGET", "tensordict:{cpp-Dtypes}:m:c64", "dtype"}),
            "torch.complex64");
}
TEST_F(RedisToPython, ScalarBatch) { EXPECT_TRUE(python_read("ScalarBatch")); }
TEST_F(RedisToPython, TwoBatchDims) { EXPECT_TRUE(python_read("Batch2D")); }
TEST_F(RedisToPython, NonTensorValues) { EXPECT_TRUE(python_read("NonTensor")); }
TEST_F(RedisToPython, TensorClassRecord) { EXPECT_TRUE(python_read("TensorClass")); }
TEST_F(RedisToPython, FromSchemaThenRows) { EXPECT_TRUE(python_read("FromSchema")); }
TEST_F(RedisToPython, PythonRowReads) { EXPECT_TRUE(python_read("RowReads")); }
TEST_F(RedisToPython, RowsWrittenIntoAPythonStore) {
  EXPECT_TRUE(python_read("RowsIntoPythonStore"));
}
TEST_F(RedisToPython, LazyStackAlongDim0) { EXPECT_TRUE(python_read("LazyStack0")); }
TEST_F(RedisToPython, LazyStackAlongDim1) {
  EXPECT_TRUE(python_read("LazyStack1"));
  EXPECT_EQ(server().command({"HGET", "tensordict:{cpp-LazyStack1}:m:obs", "layout"}), "stack");
}
TEST_F(RedisToPython, LazyStackSquareNeedsTheLayoutField) {
  EXPECT_TRUE(python_read("LazyStackSquare"));
}

// ---- both at once ---------------------------------------------------------------------

// A Python process (redis_peer.py) and this process write disjoint rows of one
// store at the same time; each then reads back every row the other
// acknowledged. Row i holds obs = i + [0, 0.25, 0.5], action = 1000 + i and
// next.obs = -i (float64), whoever wrote it.
td::TensorDict concurrent_row(int64_t i) {
  td::TensorDict row({{"obs", torch::arange(3, torch::kFloat32) * 0.25 + static_cast<double>(i)},
                      {"action", torch::tensor(1000 + i)}},
                     {});
  row.set({"next", "obs"}, torch::full({3}, -static_cast<double>(i), torch::kFloat64));
  return row;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// `python_makes_it`: Python creates the store (from_schema) and C++ attaches;
// else the other way round.
void write_at_once(const std::string& id, bool python_makes_it) {
  constexpr int64_t kRows = 400;
  const fs::path dir = fresh_dir("redis-concurrent-" + id);
  td::Schema schema{{"obs", {{3}, torch::kFloat32}},
                    {"action", {{}, torch::kInt64}},
                    {{"next", "obs"}, {{3}, torch::kFloat64}}};
  if (!python_makes_it) td::from_schema(schema, {kRows}, on(server(), id));
  const fs::path script = fs::path(TENSORDICT_PEER_SCRIPT).parent_path() / "redis_peer.py";
  const std::string cmd = std::string(TENSORDICT_PYTHON) + " " + td_python::quoted(script) + " " +
                          td_python::quoted(server().socket()) + " " + id + " " +
                          std::to_string(kRows) + " " + (python_makes_it ? "create" : "attach") +
                          " " + td_python::quoted(dir) + " > " +
                          td_python::quoted(dir / "peer.log") + " 2>&1";
  int rc = -1;
  std::thread python([&] { rc = std::system(cmd.c_str()); });
  // Both start together: Python has imported torch and attached when "ready" appears.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(dir / "ready") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<int64_t> acked;
  double first = 0, last = 0;
  if (fs::exists(dir / "ready")) {
    auto store = td::redis::from_store(on(server(), id));
    first = now_s();
    for (int64_t i = 0; i < kRows; i += 2) {  // even rows are C++'s
      store.index_put_({i}, concurrent_row(i));
      acked.push_back(i);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    last = now_s();
  }
  std::ofstream(dir / "cpp_acked.json.tmp")
      << nlohmann::json{{"rows", acked}, {"first", first}, {"last", last}}.dump();
  fs::rename(dir / "cpp_acked.json.tmp", dir / "cpp_acked.json");
  python.join();
  std::ifstream log_in(dir / "peer.log");
  const std::string log((std::istreambuf_iterator<char>(log_in)), {});
  ASSERT_EQ(rc, 0) << log;
  ASSERT_EQ(acked.size(), static_cast<std::size_t>(kRows / 2)) << log;
  std::ifstream py_in(dir / "py_acked.json");
  const nlohmann::json py = nlohmann::json::parse(py_in);
  const auto py_rows = py["rows"].get<std::vector<int64_t>>();
  EXPECT_EQ(py_rows.size(), static_cast<std::size_t>(kRows / 2));
  // The two writers did overlap in time.
  EXPECT_LT(py["first"].get<double>(), last) << log;
  EXPECT_LT(first, py["last"].get<double>()) << log;
  // Every row Python acknowledged, read back exactly by C++ (a fresh handle).
  auto store = td::redis::from_store(on(server(), id));
  EXPECT_EQ(store.batch_size(), (std::vector<int64_t>{kRows}));
  const td::TensorDict mine = store.index({torch::tensor(py_rows)}).to_tensordict();
  for (std::size_t j = 0; j < py_rows.size(); ++j) {
    const td::TensorDict want = concurrent_row(py_rows[j]);
    for (const auto& key : want.keys(true, true))
      ASSERT_TRUE(torch::equal(mine.get(key)[static_cast<int64_t>(j)], want.get(key)))
          << "row " << py_rows[j] << " " << key.repr();
  }
  // Python's verdict on C++'s rows.
  EXPECT_NE(log.find("OK: read back " + std::to_string(kRows / 2) + " C++ rows"), std::string::npos)
      << log;
}

TEST(RedisConcurrent, PythonAndCppWriteRowsOfACppStore) { write_at_once("conc-cpp", false); }

TEST(RedisConcurrent, PythonAndCppWriteRowsOfAPythonStore) { write_at_once("conc-py", true); }

}  // namespace
