// NonTensorStack: one non-tensor value per batch element (Python's
// tensordict.NonTensorStack). The values must travel exactly like a tensor's
// elements through stacking, indexing, index assignment, lazy stacks, shape
// ops and memmap; most checks compare against a tensor of element ids that
// goes through the same operation ("x" holds id i where "s" holds "v<i>").
#include "pch.h"

#include "support/core_test_helpers.h"
#include "support/data_path.h"

#include <tensordict/lazy_stack.h>
#include <tensordict/stack.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace td = tensordict;
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace torch::indexing;
using Shape = std::vector<int64_t>;

namespace {

std::string name_of(int64_t id) { return "v" + std::to_string(id); }

// A stack of "v<ids[i]>" with the shape of `ids`.
td::NonTensorStack named(const at::Tensor& ids) {
  at::Tensor flat = ids.contiguous().view({-1});
  std::vector<json> values;
  for (int64_t i = 0; i < flat.numel(); ++i) values.emplace_back(name_of(flat[i].item<int64_t>()));
  return td::NonTensorStack::from_flat(std::move(values), ids.sizes().vec());
}

// batch [4, 3]: x = ids, s = their names; nested (batch [4, 3, 2]) likewise
// with ids from 100, its stack one dim longer than the root batch.
td::TensorDict fixture() {
  at::Tensor x = torch::arange(12).view({4, 3});
  at::Tensor y = torch::arange(24).view({4, 3, 2}) + 100;
  td::TensorDict nested({{"x", y}, {"s", named(y)}}, {4, 3});
  return td::TensorDict({{"x", x}, {"s", named(x)}, {"nested", nested}}, {4, 3});
}

// The entry `skey` holds the names of the ids in `xkey`, in the same shape (a
// NonTensorData when one element is left).
void expect_follows(const td::TensorDictBase& r, const td::NestedKey& xkey = "x",
                    const td::NestedKey& skey = "s") {
  SCOPED_TRACE(skey.repr());
  at::Tensor x = r.get(xkey).contiguous();
  td::Value v = r.at(skey);
  if (x.dim() == 0) {
    ASSERT_TRUE(v.is_non_tensor()) << td::to_string(v.kind());
    EXPECT_EQ(v.non_tensor().data(), name_of(x.item<int64_t>()));
    EXPECT_TRUE(v.non_tensor().batch_size().empty());
    return;
  }
  ASSERT_TRUE(v.is_non_tensor_stack()) << td::to_string(v.kind());
  const auto& s = v.non_tensor_stack();
  ASSERT_EQ(s.batch_size().vec(), x.sizes().vec());
  at::Tensor flat = x.view({-1});
  for (int64_t i = 0; i < flat.numel(); ++i)
    EXPECT_EQ(s.values()[i], name_of(flat[i].item<int64_t>())) << "element " << i;
}

void expect_fixture_follows(const td::TensorDictBase& r) {
  expect_follows(r);
  expect_follows(r, {"nested", "x"}, {"nested", "s"});
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

class NonTensorStackMemmap : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root = fs::temp_directory_path() / ("td-nts-" + std::to_string(::getpid()) + "-" +
                                        info->name() + "-" + std::to_string(counter++));
    fs::remove_all(root);
    fs::create_directories(root);
    prefix = root / "p";
  }
  void TearDown() override { fs::remove_all(root); }
  std::string P() const { return prefix.string(); }
  fs::path root, prefix;
};

}  // namespace

// ---- the value type ----------------------------------------------------------------

TEST(NonTensorStack, ConstructionAndTolist) {
  td::NonTensorStack a({"x", "y", "z"});
  EXPECT_EQ(a.batch_size().vec(), Shape{3});
  EXPECT_EQ(a.dim(), 1);
  EXPECT_EQ(a.tolist(), json::parse(R"(["x","y","z"])"));
  EXPECT_FALSE(a.device().has_value());

  td::NonTensorStack b(json::parse(R"([[0,1],[2,3],[4,5]])"), {3, 2}, at::Device(at::kCPU));
  EXPECT_EQ(b.batch_size().vec(), (Shape{3, 2}));
  EXPECT_EQ(b.values(), (std::vector<json>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.at({2, 1}), 5);
  EXPECT_EQ(b.at({-1, 0}), 4);
  EXPECT_EQ(b.tolist(), json::parse(R"([[0,1],[2,3],[4,5]])"));
  EXPECT_EQ(b.device(), at::Device(at::kCPU));
  TD_EXPECT_THROW_MSG(b.at({3, 0}), td::IndexError, "out of bounds", "dim 0");
  TD_EXPECT_THROW_MSG(b.at({1}), td::IndexError, "1 indices");

  // The same nesting, read as values of a 1-D stack.
  td::NonTensorStack c(json::parse(R"([[0,1],[2,3],[4,5]])"), {3});
  EXPECT_EQ(c.values()[1], json::parse("[2,3]"));

  EXPECT_EQ(td::NonTensorStack().batch_size().vec(), Shape{0});
  EXPECT_EQ(td::NonTensorStack().tolist(), json::array());
  EXPECT_TRUE(td::NonTensorStack({"q", "q"}).all_equal());
  EXPECT_FALSE(a.all_equal());
  EXPECT_EQ(a, td::NonTensorStack({"x", "y", "z"}));
  EXPECT_FALSE(a == td::NonTensorStack({"x", "y", "w"}));
}

TEST(NonTensorStack, ConstructionErrorsSayWhere) {
  TD_EXPECT_THROW_MSG(td::NonTensorStack(json::parse(R"([[0,1],[2]])"), {2, 2}), td::ValueError,
                      "list of 2 items at [1]", "got 1");
  TD_EXPECT_THROW_MSG(td::NonTensorStack(json("abc"), {3}), td::ValueError,
                      "list of 3 items at the top level", "got a string");
  TD_EXPECT_THROW_MSG(td::NonTensorStack(json::parse("[1,2]"), {}), td::ValueError,
                      "at least one dim");
  TD_EXPECT_THROW_MSG(td::NonTensorStack::from_flat({1, 2, 3}, {2, 2}), td::ValueError, "3 values",
                      "[2, 2]");
  TD_EXPECT_THROW_MSG(td::NonTensorStack::from_list(json(3)), td::ValueError, "expected a list");
  TD_EXPECT_THROW_MSG(td::NonTensorStack::from_non_tensor(td::NonTensorData(json("a"))),
                      td::ValueError, "batch size []");
}

TEST(NonTensorStack, FromListFollowsPythonsLoaderRule) {
  auto a = td::NonTensorStack::from_list(json::parse(R"([[0,1],[0,1],[0,1]])"));
  EXPECT_EQ(a.batch_size().vec(), (Shape{3, 2}));
  auto b = td::NonTensorStack::from_list(json::parse(R"([[[1],[2]],[[3],[4]]])"));
  EXPECT_EQ(b.batch_size().vec(), (Shape{2, 2, 1}));
  // Unequal lengths at a level: the lists there are values.
  auto c = td::NonTensorStack::from_list(json::parse(R"([[1,2],[3]])"));
  EXPECT_EQ(c.batch_size().vec(), Shape{2});
  EXPECT_EQ(c.values()[1], json::parse("[3]"));
  auto d = td::NonTensorStack::from_list(json::parse(R"(["a", [1]])"));
  EXPECT_EQ(d.batch_size().vec(), Shape{2});
  EXPECT_EQ(td::NonTensorStack::from_list(json::array()).batch_size().vec(), Shape{0});
  EXPECT_EQ(td::NonTensorStack::from_list(json::parse("[[],[]]")).batch_size().vec(),
            (Shape{2, 0}));
  auto e = td::NonTensorStack::from_non_tensor(td::NonTensorData(json("k"), {2, 2}));
  EXPECT_EQ(e.tolist(), json::parse(R"([["k","k"],["k","k"]])"));
  EXPECT_EQ(td::NonTensorData(json(7), {2, 1}).tolist(), json::parse("[[7],[7]]"));
  EXPECT_EQ(td::NonTensorData(json(7)).tolist(), json(7));
}

TEST(NonTensorStack, StandaloneIndexingAndShapeOps) {
  at::Tensor ids = torch::arange(6).view({2, 3});
  auto s = named(ids);
  td::Value one = s.index({1, 2});
  ASSERT_TRUE(one.is_non_tensor());
  EXPECT_EQ(one.non_tensor().data(), "v5");
  td::Value row = s[1];
  ASSERT_TRUE(row.is_non_tensor_stack());
  EXPECT_EQ(row.non_tensor_stack(), named(ids[1]));
  EXPECT_EQ(s.index({Slice(), torch::tensor({2, 0})}).non_tensor_stack(),
            named(ids.index({Slice(), torch::tensor({2, 0})})));
  // A 0-dim bool index adds a dim (Python's test_nontensorstack_scalar_bool_index).
  EXPECT_EQ(s.index({torch::tensor(true)}).non_tensor_stack().batch_size().vec(), (Shape{1, 2, 3}));
  EXPECT_EQ(s.index({torch::tensor(false)}).non_tensor_stack().batch_size().vec(),
            (Shape{0, 2, 3}));
  auto empty = s.index({torch::zeros({2}, torch::kBool)});
  ASSERT_TRUE(empty.is_non_tensor_stack());
  EXPECT_EQ(empty.non_tensor_stack().tolist(), json::array());
  TD_EXPECT_THROW_MSG(s.index({2}), td::IndexError, "out of bounds");

  EXPECT_EQ(s.reshape({3, 2}), named(ids.reshape({3, 2})));
  EXPECT_EQ(s.reshape({-1}), named(ids.reshape({-1})));
  EXPECT_EQ(s.unsqueeze(1), named(ids.unsqueeze(1)));
  EXPECT_EQ(s.transpose(0, 1), named(ids.transpose(0, 1)));
  EXPECT_EQ(s.permute({1, 0}), named(ids.permute({1, 0})));
  EXPECT_EQ(s.expand({4, 2, 3}), named(ids.expand({4, 2, 3})));
  auto parts = s.unbind(1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].non_tensor_stack(), named(ids.select(1, 2)));
  auto leaves = td::NonTensorStack({"a", "b"}).unbind();
  EXPECT_EQ(leaves[1].non_tensor().data(), "b");
  TD_EXPECT_THROW_MSG(s.reshape({4}), td::ShapeError, "reshape", "[2, 3]");
  TD_EXPECT_THROW_MSG(td::NonTensorStack({"a"}).reshape({}), td::ValueError, "no batch dim");

  // In-place writes.
  s.index_put_({0, Slice(1)}, td::NonTensorData(json("w")));
  EXPECT_EQ(s.tolist(), json::parse(R"([["v0","w","w"],["v3","v4","v5"]])"));
  s.index_put_({Slice(), 0}, td::NonTensorStack({"p", "q"}));
  EXPECT_EQ(s.tolist(), json::parse(R"([["p","w","w"],["q","v4","v5"]])"));
  s.index_put_({1}, td::NonTensorStack({"b"}));  // broadcast over the row
  EXPECT_EQ(s.tolist(), json::parse(R"([["p","w","w"],["b","b","b"]])"));
  TD_EXPECT_THROW_MSG(s.index_put_({1}, td::NonTensorStack({"a", "b"})), td::ShapeError,
                      "batch size [2]", "index of shape [3]");
  EXPECT_EQ(s.tolist(), json::parse(R"([["p","w","w"],["b","b","b"]])"));
}

// ---- stacking ----------------------------------------------------------------------

TEST(NonTensorStackStack, EqualValuesStayOneValueDifferentValuesStack) {
  td::TensorDict a({{"x", torch::zeros({2})}, {"label", "cat"}}, {2});
  td::TensorDict b({{"x", torch::ones({2})}, {"label", "cat"}}, {2});
  td::TensorDict c({{"x", torch::ones({2})}, {"label", "dog"}}, {2});
  auto same = td::stack({a, b});
  EXPECT_EQ(same.entry_kind("label"), td::EntryKind::NonTensor);
  EXPECT_EQ(same.at("label").non_tensor().batch_size().vec(), (Shape{2, 2}));

  auto diff = td::stack({a, c});
  ASSERT_EQ(diff.entry_kind("label"), td::EntryKind::NonTensorStack);
  EXPECT_TRUE(diff.is_non_tensor("label"));
  EXPECT_EQ(diff.get_non_tensor("label"), json::parse(R"([["cat","cat"],["dog","dog"]])"));
  auto diff1 = td::stack({a, c}, 1);
  EXPECT_EQ(diff1.get_non_tensor("label"), json::parse(R"([["cat","dog"],["cat","dog"]])"));
  EXPECT_EQ(diff1.at("label").non_tensor_stack().batch_size().vec(), (Shape{2, 2}));

  // A stack stacked with a NonTensorData, and again: nested batch dims.
  auto again = td::stack({diff, same}, 0);
  EXPECT_EQ(again.get_non_tensor("label"),
            json::parse(R"([[["cat","cat"],["dog","dog"]],[["cat","cat"],["cat","cat"]]])"));
  auto deeper = td::stack({diff1, diff1, diff1}, 2);
  EXPECT_EQ(deeper.at("label").non_tensor_stack().batch_size().vec(), (Shape{2, 2, 3}));
  EXPECT_EQ(deeper.get_non_tensor_stack("label").at({1, 1, 2}), "dog");

  // Batch [] tensordicts stack into a 1-D stack.
  td::TensorDict s0({{"w", "a"}}, {});
  td::TensorDict s1({{"w", "b"}}, {});
  auto words = td::stack({s0, s1, s0});
  EXPECT_EQ(words.get_non_tensor("w"), json::parse(R"(["a","b","a"])"));
}

TEST(NonTensorStackStack, CatAndErrorsNameTheKey) {
  td::TensorDict a({{"s", td::NonTensorStack({"a", "b"})}}, {2});
  td::TensorDict b({{"s", "c"}}, {3});
  auto c = td::cat({a, b});
  EXPECT_EQ(c.get_non_tensor("s"), json::parse(R"(["a","b","c","c","c"])"));
  td::TensorDict same1({{"s", "z"}}, {1});
  td::TensorDict same2({{"s", "z"}}, {2});
  auto cz = td::cat({same1, same2});
  EXPECT_EQ(cz.entry_kind("s"), td::EntryKind::NonTensor);
  EXPECT_EQ(cz.at("s").non_tensor().batch_size().vec(), Shape{3});

  // Stacks with different extra dims cannot be stacked.
  td::TensorDict e1(
      {{"n", td::TensorDict({{"s", td::NonTensorStack(json::parse("[[1,2]]"), {1, 2})}}, {1})}},
      {1});
  td::TensorDict e2(
      {{"n", td::TensorDict({{"s", td::NonTensorStack(json::parse("[[1,2,3]]"), {1, 3})}}, {1})}},
      {1});
  TD_EXPECT_THROW_MSG(td::stack({e1, e2}), td::ShapeError, "('n', 's')", "[1, 2]", "[1, 3]");
  TD_EXPECT_THROW_MSG(td::cat({e1, e2}), td::ShapeError, "('n', 's')");
  // A non-tensor against a tensor is still a kind mismatch.
  td::TensorDict t({{"s", torch::zeros({2})}}, {2});
  TD_EXPECT_THROW_MSG(td::stack({a, t}), td::TypeError, "'s'", "NonTensorStack", "Tensor");
}

// ---- indexing ------------------------------------------------------------------------

TEST(NonTensorStackIndex, EveryIndexFormMovesTheValuesWithTheElements) {
  auto t = fixture();
  expect_fixture_follows(t);
  std::vector<std::pair<std::string, std::vector<TensorIndex>>> cases = {
      {"int", {1}},
      {"negative int", {-1}},
      {"two ints", {2, 1}},
      {"int then slice", {Slice(), 2}},
      {"slice", {Slice(1, 3)}},
      {"step slice", {Slice(None, None, 2), Slice(1)}},
      {"None", {None, 1}},
      {"Ellipsis", {Ellipsis, 0}},
      {"long 1-D", {torch::tensor({3, 0, 3})}},
      {"long negative", {torch::tensor({-1, 0})}},
      {"long 2-D", {torch::tensor({{0, 1}, {3, 2}})}},
      {"long on dim 1", {Slice(), torch::tensor({2, 0})}},
      {"long on both dims", {torch::tensor({0, 3}), torch::tensor({2, 1})}},
      {"mask 1-D", {torch::tensor({true, false, true, true})}},
      {"mask 2-D",
       {torch::tensor({{true, false, false},
                       {false, true, true},
                       {false, false, false},
                       {true, false, true}})}},
      {"empty mask", {torch::zeros({4}, torch::kBool)}},
      {"True", {true}},
      {"False", {false}},
  };
  for (const auto& [name, idx] : cases) {
    SCOPED_TRACE(name);
    auto r = t.index(idx);
    expect_fixture_follows(r);
  }
  // td[i] and a two-int index give the single value.
  EXPECT_EQ(t[2].index({1}).get_non_tensor("s"), "v7");
  EXPECT_EQ(t.index({3, 2}).at("s").non_tensor().data(), "v11");
  EXPECT_EQ(t.masked_select(torch::tensor({false, true, false, false})).get_non_tensor("s"),
            json::parse(R"([["v3","v4","v5"]])"));
}

TEST(NonTensorStackIndex, UnbindSplitNarrowAndLazyMembers) {
  auto t = fixture();
  for (int64_t dim : {0, 1}) {
    for (const auto& part : t.unbind(dim)) expect_fixture_follows(part);
    for (const auto& part : t.split(2, dim)) expect_fixture_follows(part);
  }
  expect_fixture_follows(t.narrow(1, 1, 2));
  // A stack with more dims than its tensordict: the extra dim is kept.
  td::TensorDict wide(
      {{"x", torch::arange(6).view({2, 3})}, {"s", named(torch::arange(6).view({2, 3}))}}, {2});
  auto r = wide[1];
  EXPECT_TRUE(r.batch_size().empty());
  expect_follows(r);
  EXPECT_EQ(r.at("s").non_tensor_stack().batch_size().vec(), Shape{3});
}

// ---- index assignment ------------------------------------------------------------------

TEST(NonTensorStackIndexPut, ADifferentValueTurnsANonTensorDataIntoAStack) {
  // Python's test_assign_non_tensor.
  td::TensorDict data({}, {1, 10});
  data.index_put_({0, 0}, td::TensorDict({{"a", torch::tensor(0)}, {"b", "a string!"}}, {}));
  EXPECT_EQ(data.entry_kind("b"), td::EntryKind::NonTensor);
  EXPECT_EQ(data.get_non_tensor("b"), "a string!");
  data.index_put_({0, 1}, td::TensorDict({{"a", torch::tensor(0)}, {"b", "another string!"}}, {}));
  ASSERT_EQ(data.entry_kind("b"), td::EntryKind::NonTensorStack);
  json expected = json::array();
  expected.push_back(json::array());
  for (int i = 0; i < 10; ++i) expected[0].push_back(i == 1 ? "another string!" : "a string!");
  EXPECT_EQ(data.get_non_tensor("b"), expected);

  td::TensorDict d2({}, {1, 10});
  d2.index_put_({0, 0}, td::TensorDict({{"a", torch::tensor(0)}, {"b", "a string!"}}, {}));
  d2.index_put_(
      {0, Slice(None, None, 2)},
      td::TensorDict({{"a", torch::zeros({5}, torch::kLong)}, {"b", "another string!"}}, {5}));
  auto row = d2.get_non_tensor("b")[0];
  for (int i = 0; i < 10; ++i) EXPECT_EQ(row[i], i % 2 == 0 ? "another string!" : "a string!") << i;

  // Writing the stored value again changes nothing.
  td::TensorDict d3({{"b", "same"}}, {3});
  d3.index_put_({1}, td::TensorDict({{"b", "same"}}, {}));
  EXPECT_EQ(d3.entry_kind("b"), td::EntryKind::NonTensor);
  d3.index_put_({Slice()},
                td::TensorDict({{"b", td::NonTensorStack({"same", "same", "same"})}}, {3}));
  EXPECT_EQ(d3.entry_kind("b"), td::EntryKind::NonTensor);
  // Python's test_ignore_lock: the conversion is allowed on a locked tensordict.
  td::TensorDict locked({{"a", td::TensorDict({{"b", "1"}}, {10})}}, {10});
  locked.lock_();
  locked.index_put_({0}, td::TensorDict({{"a", td::TensorDict({{"b", "0"}}, {})}}, {}));
  EXPECT_TRUE(locked.is_locked());
  EXPECT_EQ(locked[0].get_non_tensor({"a", "b"}), "0");
  EXPECT_EQ(locked[1].get_non_tensor({"a", "b"}), "1");
}

TEST(NonTensorStackIndexPut, StacksAreWrittenElementByElement) {
  auto t = fixture();
  auto src = fixture().apply([](const at::Tensor& x) { return x + 1000; });
  // src's stacks still name the old ids: rename them to follow src's x.
  src.set("s", named(src.get("x")));
  src.set({"nested", "s"}, named(src.get({"nested", "x"})));
  std::vector<std::vector<TensorIndex>> cases = {
      {1},
      {Slice(1, 3)},
      {Slice(), 2},
      {torch::tensor({3, 0})},
      {torch::tensor({true, false, true, false})},
      {torch::tensor({0, 2}), torch::tensor({1, 1})},
  };
  for (const auto& idx : cases) {
    auto dest = t.clone();
    dest.index_put_(idx, src.index(idx));
    expect_fixture_follows(dest);
    // Something was written: the ids moved to src's at idx.
    EXPECT_GT(dest.get("x").index(idx).min().item<int64_t>(), 999);
  }
  // Broadcast: a batch-[] value writes one value into every selected element.
  auto dest = t.clone();
  dest.index_put_({Slice(0, 2)}, td::TensorDict({{"s", "B"}}, {}));
  EXPECT_EQ(dest.get_non_tensor("s")[1], json::parse(R"(["B","B","B"])"));
  EXPECT_EQ(dest.get_non_tensor("s")[2], json::parse(R"(["v6","v7","v8"])"));
  // update_at_ writes existing entries the same way.
  dest.update_at_(td::TensorDict({{"s", td::NonTensorStack({"u", "w", "y"})}}, {3}), {3});
  EXPECT_EQ(dest.get_non_tensor("s")[3], json::parse(R"(["u","w","y"])"));
}

TEST(NonTensorStackIndexPut, MaskAssignmentOfNestedStacks) {
  // Python's test_nontensorstack_boolean_mask_2d.
  json instr = json::array();
  for (int i = 0; i < 3; ++i) instr.push_back({std::to_string(i) + "0", std::to_string(i) + "1"});
  td::TensorDict t({{"x", torch::arange(6).view({3, 2})}}, {3, 2});
  t.set_non_tensor_stack("instr", instr);
  auto mask = torch::tensor({true, false, true});
  EXPECT_EQ(t.index({mask}).get_non_tensor("instr"), json::parse(R"([["00","01"],["20","21"]])"));
  auto full = torch::tensor({{true, false}, {false, true}, {true, true}});
  EXPECT_EQ(t.index({full}).get_non_tensor("instr"), json::parse(R"(["00","11","20","21"])"));
  td::TensorDict value({{"x", torch::zeros({2, 2}, torch::kLong)}}, {2, 2});
  value.set_non_tensor_stack("instr", json::parse(R"([["p","q"],["r","s"]])"));
  t.index_put_({mask}, value);
  EXPECT_EQ(t.get_non_tensor("instr"), json::parse(R"([["p","q"],["10","11"],["r","s"]])"));
}

TEST(NonTensorStackIndexPut, PreallocationFromAStackValue) {
  // A missing key written from a stack: every element first holds the
  // value's first one (as a NonTensorData written first spans the batch).
  td::TensorDict buf({}, {4});
  buf.index_put_({torch::tensor({true, true, false, true})},
                 td::TensorDict({{"s", td::NonTensorStack({"a", "b", "c"})}}, {3}));
  ASSERT_EQ(buf.entry_kind("s"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(buf.get_non_tensor("s"), json::parse(R"(["a","b","a","c"])"));
}

TEST(NonTensorStackIndexPut, ErrorsWriteNothingAndNameTheKey) {
  auto t = fixture();
  auto before_x = t.get("x").clone();
  auto before = t.get_non_tensor_stack("s");
  // An extra dim that the destination does not have.
  td::TensorDict bad({{"x", torch::zeros({2, 3}, torch::kLong)},
                      {"s", td::NonTensorStack::from_flat(std::vector<json>(12, "a"), {2, 3, 2})}},
                     {2, 3});
  TD_EXPECT_THROW_MSG(t.index_put_({Slice(0, 2)}, bad), td::ShapeError, "'s'", "[2, 3, 2]",
                      "[2, 3]");
  EXPECT_TRUE(torch::equal(t.get("x"), before_x));
  EXPECT_EQ(t.get_non_tensor_stack("s"), before);
  td::TensorDict tensor_there({{"x", torch::zeros({3}, torch::kLong)}, {"s", torch::zeros({3})}},
                              {3});
  TD_EXPECT_THROW_MSG(t.index_put_({0}, tensor_there), td::TypeError, "'s'", "NonTensorStack",
                      "Tensor");
  EXPECT_TRUE(torch::equal(t.get("x"), before_x));
}

// ---- lazy stacks ---------------------------------------------------------------------------

TEST(NonTensorStackLazy, ReadingAKeyWhoseMembersDifferGivesAStack) {
  td::TensorDict a({{"x", torch::zeros({2})}, {"name", "left"}, {"same", "s"}}, {2});
  td::TensorDict b({{"x", torch::ones({2})}, {"name", "right"}, {"same", "s"}}, {2});
  auto s = td::lazy_stack({a, b});
  EXPECT_EQ(s.entry_kind("same"), td::EntryKind::NonTensor);
  EXPECT_EQ(s.at("same").non_tensor().batch_size().vec(), (Shape{2, 2}));
  ASSERT_EQ(s.entry_kind("name"), td::EntryKind::NonTensorStack);
  auto name = s.get_non_tensor_stack("name");
  EXPECT_EQ(name.batch_size().vec(), (Shape{2, 2}));
  EXPECT_EQ(name.tolist(), json::parse(R"([["left","left"],["right","right"]])"));
  auto s1 = td::lazy_stack({a, b}, 1);
  EXPECT_EQ(s1.get_non_tensor("name"), json::parse(R"([["left","right"],["left","right"]])"));
  // Indexing the lazy stack gives the member's value.
  EXPECT_EQ(s[1].get_non_tensor("name"), "right");
  EXPECT_EQ(s.to_tensordict().get_non_tensor("name"), name.tolist());

  // Writing a stack splits it between the members.
  s.set("tag", td::NonTensorStack(json::parse(R"([["p","q"],["r","t"]])"), {2, 2}));
  EXPECT_EQ(a.get_non_tensor("tag"), json::parse(R"(["p","q"])"));
  EXPECT_EQ(b.get_non_tensor("tag"), json::parse(R"(["r","t"])"));
  EXPECT_EQ(s.get_non_tensor("tag"), json::parse(R"([["p","q"],["r","t"]])"));

  // Members of different batch sizes cannot give one stack.
  td::TensorDict c({{"name", "c"}}, {3});
  td::TensorDict d({{"name", "d"}}, {2});
  auto ragged = td::lazy_stack({c, d});
  TD_EXPECT_THROW_MSG(ragged.at("name"), td::ShapeError, "'name'", "[3]", "[2]");
  // repr does not throw: it lists each member's values.
  EXPECT_NE(ragged.repr().find("name: NonTensorStack(\n            [['c', 'c', 'c'], ['d', 'd']]"),
            std::string::npos)
      << ragged.repr();
}

TEST(NonTensorStackLazy, MembersHoldingStacksAndIndexPutThroughTheStack) {
  td::TensorDict a({{"x", torch::zeros({2})}, {"w", td::NonTensorStack({"a0", "a1"})}}, {2});
  td::TensorDict b({{"x", torch::ones({2})}, {"w", "b"}}, {2});
  auto s = td::lazy_stack({a, b});
  EXPECT_EQ(s.entry_kind("w"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(s.get_non_tensor("w"), json::parse(R"([["a0","a1"],["b","b"]])"));
  s.index_put_({1, 0}, td::TensorDict({{"x", torch::tensor(5.0)}, {"w", "B"}}, {}));
  EXPECT_EQ(b.get_non_tensor("w"), json::parse(R"(["B","b"])"));
  EXPECT_EQ(s.get_non_tensor("w"), json::parse(R"([["a0","a1"],["B","b"]])"));
}

// ---- shape ops --------------------------------------------------------------------------------

TEST(NonTensorStackShapeOps, ValuesMoveWithTheirElements) {
  auto t = fixture();
  expect_fixture_follows(t.reshape({12}));
  expect_fixture_follows(t.view({2, 6}));
  expect_fixture_follows(t.flatten());
  expect_fixture_follows(t.reshape({12}).unflatten(0, {3, 4}));
  expect_fixture_follows(t.unsqueeze(1));
  expect_fixture_follows(t.unsqueeze(-1));
  expect_fixture_follows(t.unsqueeze(0).squeeze(0));
  expect_fixture_follows(t.index({Slice(0, 1)}).squeeze());
  expect_fixture_follows(t.permute({1, 0}));
  expect_fixture_follows(t.transpose(0, 1));
  expect_fixture_follows(t.index({Slice(0, 1)}).expand({5, 3}));
  expect_fixture_follows(t.expand({2, 4, 3}));
  expect_fixture_follows(t.gather(1, torch::tensor({{2, 0, 0}, {1, 1, 1}, {0, 1, 2}, {2, 2, 2}})));
  expect_fixture_follows(t.clone());
  expect_fixture_follows(t.copy());
  expect_fixture_follows(t.to_tensordict());
  expect_fixture_follows(t.contiguous());
  expect_fixture_follows(td::stack({t, t}, 1));
  expect_fixture_follows(td::cat({t, t}, 1));
  expect_follows(t.exclude({"nested"}).select({"x", "s"}));
  auto flat = t.flatten_keys();
  EXPECT_EQ(flat.get_non_tensor_stack("nested.s"), t.get_non_tensor_stack({"nested", "s"}));
  TD_EXPECT_THROW_MSG(t.view({5, 2}), td::ShapeError);
}

TEST(NonTensorStackShapeOps, ValueOpsKeepStacksAndReductionsRefuseThem) {
  td::TensorDict t(
      {{"x", torch::arange(3, torch::kFloat)}, {"s", td::NonTensorStack({"a", "b", "c"})}}, {3});
  auto plus = t + 1.0;
  EXPECT_EQ(plus.get_non_tensor_stack("s"), t.get_non_tensor_stack("s"));
  auto ap = t.apply([](const at::Tensor& x) { return x * 2; });
  EXPECT_EQ(ap.get_non_tensor_stack("s"), t.get_non_tensor_stack("s"));
  EXPECT_EQ(t.to(torch::kDouble).get_non_tensor_stack("s"), t.get_non_tensor_stack("s"));
  EXPECT_EQ(t.masked_fill(torch::tensor({true, false, true}), 0).get_non_tensor_stack("s"),
            t.get_non_tensor_stack("s"));
  TD_EXPECT_THROW_MSG(t.sum(), td::ShapeError, "sum", "'s'", "[3]", "exclude it");
  TD_EXPECT_THROW_MSG(t.mean(std::vector<int64_t>{0}), td::ShapeError, "'s'");
  EXPECT_EQ(t.exclude({"s"}).sum().get("x").item<float>(), 3.0f);
  // Equal values collapse to one value of the reduced batch.
  td::TensorDict u(
      {{"x", torch::arange(3, torch::kFloat)}, {"s", td::NonTensorStack({"a", "a", "a"})}}, {3});
  auto red = u.sum(std::vector<int64_t>{0});
  EXPECT_EQ(red.entry_kind("s"), td::EntryKind::NonTensor);
  EXPECT_EQ(red.get_non_tensor("s"), "a");

  EXPECT_TRUE(t.equal(t.clone()));
  auto other = t.clone();
  other.set("s", td::NonTensorStack({"a", "b", "z"}));
  EXPECT_FALSE(t.equal(other));
}

// ---- reads, writes, errors ------------------------------------------------------------------

TEST(NonTensorStackAccess, TheNonTensorFamilyOfAccessors) {
  auto t = fixture();
  EXPECT_TRUE(t.is_non_tensor("s"));
  EXPECT_TRUE(t.is_non_tensor({"nested", "s"}));
  EXPECT_FALSE(t.is_non_tensor("x"));
  EXPECT_EQ(t.entry_kind("s"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(std::string(td::to_string(td::EntryKind::NonTensorStack)), "NonTensorStack");
  EXPECT_EQ(t.get_non_tensor("s")[1][2], "v5");
  EXPECT_EQ(t.get_non_tensor("missing", json("dflt")), "dflt");
  EXPECT_EQ(t.get_item_shape({"nested", "s"}), (Shape{4, 3, 2}));
  td::TensorDict u({{"one", "k"}}, {2});
  EXPECT_EQ(u.get_non_tensor_stack("one").tolist(), json::parse(R"(["k","k"])"));
  TD_EXPECT_THROW_MSG(t.get_non_tensor_stack("x"), td::TypeError, "'x'", "Tensor");
  TD_EXPECT_THROW_MSG(t.get_non_tensor("x"), td::TypeError, "'x'", "not a non-tensor");
  TD_EXPECT_THROW_MSG(td::TensorDict({{"one", "k"}}, {}).get_non_tensor_stack("one"), td::TypeError,
                      "batch size []");
  TD_EXPECT_THROW_MSG(t.get("s"), td::TypeError, "NonTensorStack", "get_non_tensor");
  TD_EXPECT_THROW_MSG(t.at("s").non_tensor(), td::TypeError, "NonTensorStack");
  EXPECT_THROW(t.at("x").non_tensor_stack(), td::TypeError);

  auto keys = t.keys(
      td::KeysOptions{.include_nested = true, .leaves_only = true, .non_tensor_leaves = true});
  EXPECT_NE(std::find(keys.begin(), keys.end(), td::NestedKey({"nested", "s"})), keys.end());
  auto tensor_keys = t.keys(true, true);
  EXPECT_EQ(std::find(tensor_keys.begin(), tensor_keys.end(), td::NestedKey("s")),
            tensor_keys.end());
  auto items = t.non_tensor_items(true);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].second, t.get_non_tensor("s"));
}

TEST(NonTensorStackAccess, StoringChecksTheNumberOfValues) {
  td::TensorDict t({{"x", torch::zeros({3, 2})}}, {3});
  t.set("ok", td::NonTensorStack({"a", "b", "c"}));
  t.set("wide", td::NonTensorStack(json::parse("[[1,2],[3,4],[5,6]]"), {3, 2}));
  TD_EXPECT_THROW_MSG(t.set("bad", td::NonTensorStack({"a", "b"})), td::ShapeError, "'bad'",
                      "batch_size=[3]", "[2]");
  TD_EXPECT_THROW_MSG(t.set({"n", "bad"}, td::NonTensorStack({"a"})), td::ShapeError,
                      "('n', 'bad')");
  EXPECT_FALSE(t.contains("n"));  // nothing created on a refused write

  t.set_non_tensor_stack("labels", json::parse(R"(["p","q","r"])"));
  EXPECT_EQ(t.get_non_tensor_stack("labels").batch_size().vec(), Shape{3});
  t.create_nested("sub");
  t.set_non_tensor_stack({"sub", "l"}, json::parse("[1,2,3]"));
  EXPECT_EQ(t[2].get_non_tensor({"sub", "l"}), 3);
  TD_EXPECT_THROW_MSG(t.set_non_tensor_stack("labels", json::parse(R"(["p","q"])")), td::ValueError,
                      "'labels'", "list of 3 items", "got 2");
  TD_EXPECT_THROW_MSG(t.set_non_tensor_stack({"sub", "l"}, json("text")), td::ValueError,
                      "('sub', 'l')", "got a string");
  TD_EXPECT_THROW_MSG(td::TensorDict().set_non_tensor_stack("a", json::array()), td::ValueError,
                      "'a'", "batch size []");

  // The batch size setter checks stacks like tensors.
  td::TensorDict only({{"ok", td::NonTensorStack({"a", "b", "c"})}}, {3});
  TD_EXPECT_THROW_MSG(only.set_batch_size({3, 3}), td::ShapeError, "NonTensorStack 'ok'", "[3]",
                      "[3, 3]");
  EXPECT_EQ(only.batch_size().vec(), Shape{3});
  auto wide = t.exclude({"ok", "labels", "sub"});
  wide.set_batch_size({3, 2});
  EXPECT_EQ(wide.get_non_tensor_stack("wide").batch_size().vec(), (Shape{3, 2}));
  // update_: a NonTensorData source fills the stack; a stack must match.
  t.update_(td::TensorDict({{"ok", "all"}}, {3}));
  EXPECT_EQ(t.get_non_tensor("ok"), json::parse(R"(["all","all","all"])"));
  t.update_(td::TensorDict({{"ok", td::NonTensorStack({"1", "2", "3"})}}, {3}));
  EXPECT_EQ(t.get_non_tensor("ok"), json::parse(R"(["1","2","3"])"));
}

// ---- repr ------------------------------------------------------------------------------------

TEST(NonTensorStackRepr, PythonsLayout) {
  EXPECT_EQ(td::NonTensorStack({"a", "b"}).repr(),
            "NonTensorStack(\n    ['a', 'b'],\n    batch_size=torch.Size([2]),\n    device=None)");
  td::NonTensorStack mixed(
      {json("it's"), json(true), json(nullptr), json(1.5), json(3), json::parse(R"({"k":[1,2]})")},
      at::Device(at::kCPU));
  EXPECT_EQ(mixed.repr(),
            "NonTensorStack(\n    [\"it's\", True, None, 1.5, 3, {'k': [1, 2]}],\n"
            "    batch_size=torch.Size([6]),\n    device=cpu)");
  // Python cuts the list after 50 characters.
  std::vector<json> many;
  std::string full = "[";
  for (int i = 0; i < 60; ++i) {
    many.emplace_back(std::to_string(i));
    full += (i ? ", '" : "'") + std::to_string(i) + "'";
  }
  full += "]";
  EXPECT_EQ(td::NonTensorStack(many).repr(),
            "NonTensorStack(\n    " + full.substr(0, 50) +
                "...,\n    batch_size=torch.Size([60]),\n    device=None)");
  td::TensorDict t({{"s", td::NonTensorStack({"a", "b"})}}, {2});
  EXPECT_EQ(t.repr(),
            "TensorDict(\n"
            "    fields={\n"
            "        s: NonTensorStack(\n"
            "            ['a', 'b'],\n"
            "            batch_size=torch.Size([2]),\n"
            "            device=None)},\n"
            "    batch_size=torch.Size([2]),\n"
            "    device=None,\n"
            "    is_shared=False)");
  EXPECT_EQ(td::NonTensorData(json::parse(R"([true, null, "x"])"), {}).repr(),
            "NonTensorData(data=[True, None, 'x'], batch_size=torch.Size([]), device=None)");
}

// ---- memmap ----------------------------------------------------------------------------------

TEST_F(NonTensorStackMemmap, RoundTripWritesPythonsLayout) {
  td::TensorDict t({{"x", torch::arange(3)},
                    {"words", td::NonTensorStack({"x", "y", "z"})},
                    {"grid", td::NonTensorStack(json::parse("[[0,1],[0,1],[0,1]]"), {3, 2})}},
                   {3});
  auto m = t.memmap(P());
  EXPECT_TRUE(m.is_memmap());
  EXPECT_EQ(m.get_non_tensor_stack("words").tolist(), json::parse(R"(["x","y","z"])"));
  // The bytes Python's HEAD test asserts (test_memmap_stack).
  EXPECT_EQ(read_text(prefix / "grid/meta.json"),
            R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,)"
            R"("device":null,"data":[[0,1],[0,1],[0,1]]})");
  EXPECT_NE(read_text(prefix / "meta.json").find(R"("words":{"type":"NonTensorStack"})"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(prefix / "words/0"));  // HEAD writes no member directories
  auto back = td::load_memmap(P());
  ASSERT_EQ(back.entry_kind("words"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(back.get_non_tensor_stack("words").values(), t.get_non_tensor_stack("words").values());
  EXPECT_EQ(back.get_non_tensor_stack("grid").batch_size().vec(), (Shape{3, 2}));
  EXPECT_EQ(back[2].get_non_tensor("grid"), json::parse("[0,1]"));
  // A device on the stack is written as its string.
  td::TensorDict on_cpu({{"w", td::NonTensorStack({"a"})}}, {1}, at::Device(at::kCPU));
  on_cpu.memmap((root / "cpu").string());
  EXPECT_NE(read_text(root / "cpu/w/meta.json").find(R"("device":"cpu")"), std::string::npos);
}

TEST_F(NonTensorStackMemmap, InPlaceWritesReachTheFiles) {
  td::TensorDict t(
      {{"x", torch::arange(4)},
       {"s", td::NonTensorStack({"a", "b", "c", "d"})},
       {"n",
        td::TensorDict({{"s", td::NonTensorStack({"p", "q", "r", "t"})}, {"one", "same"}}, {4})},
       {"one", "same"}},
      {4});
  auto m = t.memmap(P());
  m.index_put_({1}, td::TensorDict({{"x", torch::tensor(9)}, {"s", "B"}}, {}));
  EXPECT_EQ(m.get_non_tensor("s"), json::parse(R"(["a","B","c","d"])"));
  m.index_put_({Slice(2)}, td::TensorDict({{"n", td::TensorDict({{"s", "Z"}}, {2})}}, {2}));
  m.update_(td::TensorDict({{"one", "same"}}, {4}));
  auto back = td::load_memmap(P());
  EXPECT_EQ(back.get("x")[1].item<int64_t>(), 9);
  EXPECT_EQ(back.get_non_tensor("s"), json::parse(R"(["a","B","c","d"])"));
  EXPECT_EQ(back.get_non_tensor({"n", "s"}), json::parse(R"(["p","q","Z","Z"])"));
  m.update_(td::TensorDict({{"s", td::NonTensorStack({"1", "2", "3", "4"})}}, {4}));
  EXPECT_EQ(td::load_memmap(P()).get_non_tensor("s"), json::parse(R"(["1","2","3","4"])"));
  // A NonTensorData of a memory-mapped tensordict cannot become a stack
  // (Python refuses too); nothing is written.
  TD_EXPECT_THROW_MSG(
      m.index_put_({0}, td::TensorDict({{"x", torch::tensor(7)}, {"one", "other"}}, {})),
      td::LockedError, "'one'", "NonTensorStack", "memory-mapped");
  TD_EXPECT_THROW_MSG(
      m.index_put_({0}, td::TensorDict({{"n", td::TensorDict({{"one", "other"}}, {})}}, {})),
      td::LockedError, "('n', 'one')");
  EXPECT_EQ(m.get("x")[0].item<int64_t>(), 0);
  EXPECT_EQ(m.entry_kind("one"), td::EntryKind::NonTensor);
  TD_EXPECT_THROW_MSG(
      m.update_(td::TensorDict({{"one", td::NonTensorStack({"a", "b", "c", "d"})}}, {4})),
      td::LockedError, "'one'");
}

TEST_F(NonTensorStackMemmap, PythonFixtureAndOtherLayouts) {
  // Python 0.3.2: data plus artefact member directories 0/, 1/, 2/.
  auto t = td::load_memmap(td_test::data_path("python-0.3.2/memmap/nontensorstack").string(),
                           {.pickled_values_as_markers = true});
  EXPECT_EQ(t.get_non_tensor_stack("ns"),
            td::NonTensorStack({"x", "y", "z"}, at::Device(at::kCPU)));

  // Saved member by member ("data": null): the members are stacked.
  write_text(prefix / "meta.json",
             R"({"a":{"device":"cpu","shape":[2],"dtype":"torch.int64","is_nested":false},)"
             R"("m":{"type":"NonTensorStack"},"shape":[2],"device":"cpu",)"
             R"("_type":"<class 'tensordict._td.TensorDict'>"})");
  write_text(prefix / "a.memmap", std::string(16, '\0'));
  write_text(prefix / "m/meta.json",
             R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,)"
             R"("device":null,"data":null})");
  write_text(
      prefix / "m/0/meta.json",
      R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"first","_metadata":null})");
  write_text(
      prefix / "m/1/meta.json",
      R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"second","_metadata":null})");
  auto members = td::load_memmap(P());
  EXPECT_EQ(members.get_non_tensor("m"), json::parse(R"(["first","second"])"));

  // Broken files: a FormatError naming the file and the key.
  write_text(prefix / "m/meta.json",
             R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,)"
             R"("device":null,"data":5})");
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError, "m/meta.json", "'m'",
                      "must be a list");
  write_text(prefix / "m/meta.json",
             R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,)"
             R"("device":null,"data":["a","b","c"]})");
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError, "'m'", "[3]", "[2]");
  fs::remove_all(prefix / "m/0");
  fs::remove_all(prefix / "m/1");
  write_text(prefix / "m/meta.json",
             R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,)"
             R"("device":null})");
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError, "'m'", "without members");
}
