// LazyStackedTensorDict: construction, heterogeneous members, reads, indexing
// (checked against a dense stack of the same members), writes through to the
// members, member-wise operations, locking, and the memmap layout.
#include "support/core_test_helpers.h"

#include <filesystem>
#include <fstream>

using namespace td_test;
using torch::indexing::Ellipsis;
using torch::indexing::None;
using torch::indexing::Slice;
namespace fs = std::filesystem;

namespace {

// A member with batch [3]: a float leaf, an int leaf and a nested level.
td::TensorDict member(double base) {
  auto a = torch::arange(6, torch::kFloat).reshape({3, 2}) + base;
  auto i = (torch::arange(3, torch::kLong) + static_cast<int64_t>(base)) * 10;
  td::TensorDict nested({{"x", torch::full({3, 1}, base)}}, {3});
  return td::TensorDict({{"a", a}, {"i", i}, {"nested", nested}}, {3});
}

std::vector<td::TensorDictBase> members(int n) {
  std::vector<td::TensorDictBase> out;
  for (int k = 0; k < n; ++k) out.push_back(member(100.0 * k));
  return out;
}

// Same values, every leaf compared (the lazy one densified).
void expect_same(const td::TensorDictBase& lazy, const td::TensorDictBase& dense) {
  EXPECT_EQ(batch_of(lazy), batch_of(dense));
  td::TensorDict d = lazy.to_tensordict();
  ASSERT_EQ(d.keys(true, true), dense.keys(true, true)) << d << dense;
  for (const auto& k : dense.keys(true, true))
    EXPECT_TRUE(torch::equal(d.get(k), dense.get(k))) << k.repr();
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), {}};
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("td_lazy_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace

// ---- construction --------------------------------------------------------------

TEST(LazyStack, BatchSizeInsertsTheMemberCountAtTheStackDim) {
  auto ms = members(2);
  EXPECT_EQ(batch_of(td::lazy_stack(ms, 0)), (Shape{2, 3}));
  EXPECT_EQ(batch_of(td::lazy_stack(ms, 1)), (Shape{3, 2}));
  EXPECT_EQ(batch_of(td::lazy_stack(ms, -1)), (Shape{3, 2}));
  EXPECT_EQ(td::lazy_stack(ms, -1).stack_dim(), 1);
  auto s = td::lazy_stack(ms);
  EXPECT_EQ(s.type_name(), "LazyStackedTensorDict");
  EXPECT_TRUE(td::TensorDictBase(s).is<td::LazyStackedTensorDict>());
  EXPECT_FALSE(td::TensorDictBase(s).is<td::TensorDict>());
  EXPECT_TRUE(s.tensordicts()[1].is_same(ms[1]));  // no copy
}

TEST(LazyStack, ConstructionErrors) {
  TD_EXPECT_THROW_MSG(td::lazy_stack({}), td::ValueError, "at least one");
  td::TensorDict two_dims({{"a", torch::zeros({3, 2})}}, {3, 2});
  TD_EXPECT_THROW_MSG(td::lazy_stack({member(0), two_dims}), td::ShapeError,
                      "same number of batch dims", "[3, 2]");
  td::TensorDict four({{"a", torch::zeros({4, 2})}}, {4});
  TD_EXPECT_THROW_MSG(td::lazy_stack({member(0), four}, 0, /*strict_shape=*/true), td::ShapeError,
                      "batch sizes in tensordicts differs");
  td::TensorDict on_cpu({{"a", torch::zeros({3, 2})}}, {3}, at::Device(at::kCPU));
  TD_EXPECT_THROW_MSG(td::lazy_stack({member(0), on_cpu}), td::DeviceError, "devices differ");
  TD_EXPECT_THROW_MSG(td::lazy_stack(members(2), 3), td::IndexError, "lazy_stack");
}

// ---- heterogeneous members -----------------------------------------------------

TEST(LazyStack, KeysAreTheSortedIntersectionAndDifferingDimsAreMinusOne) {
  td::TensorDict a(
      {{"z", torch::zeros({3})}, {"obs", torch::zeros({3, 4})}, {"only_a", torch::zeros({3})}},
      {3});
  td::TensorDict b(
      {{"obs", torch::ones({5, 7})}, {"z", torch::ones({5})}, {"only_b", torch::ones({5})}}, {5});
  auto s = td::lazy_stack({a, b});
  EXPECT_EQ(s.keys(), (std::vector<td::NestedKey>{"obs", "z"}));
  EXPECT_EQ(batch_of(s), (Shape{2, -1}));
  EXPECT_FALSE(s.contains("only_a"));
  EXPECT_EQ(s[0].get("only_a").sizes().vec(), (Shape{3}));  // through the member
  EXPECT_EQ(s.get_item_shape("obs"), (Shape{2, -1, -1}));
  std::string r = s.repr();
  EXPECT_NE(r.find("LazyStackedTensorDict("), std::string::npos) << r;
  EXPECT_NE(r.find("shape=torch.Size([2, -1, -1])"), std::string::npos) << r;
  EXPECT_NE(r.find("exclusive_fields={"), std::string::npos) << r;
  EXPECT_NE(
      r.find(
          "    exclusive_fields={\n        0 ->\n            only_a: Tensor(shape=torch.Size([3])"),
      std::string::npos)
      << r;
  EXPECT_NE(r.find("only_b: Tensor(shape=torch.Size([5])"), std::string::npos) << r;
  EXPECT_NE(r.find("batch_size=torch.Size([2, -1])"), std::string::npos) << r;
  EXPECT_NE(r.find("stack_dim=0)"), std::string::npos) << r;
}

TEST(LazyStack, RaggedLeavesAreRefusedByGetAndReadAsListOrPadded) {
  td::TensorDict a({{"obs", torch::ones({2, 3})}}, {2});
  td::TensorDict b({{"obs", torch::full({2, 5}, 2.0)}}, {2});
  auto s = td::lazy_stack({a, b});
  EXPECT_EQ(batch_of(s), (Shape{2, 2}));
  TD_EXPECT_THROW_MSG(s.get("obs"), td::ShapeError, "Failed to stack tensors", "'obs'",
                      "[2, 3], [2, 5]", "get_as_list");
  auto list = s.get_as_list("obs");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_TRUE(list[0].is_same(a.get("obs")));
  at::Tensor right = s.get_padded("obs", -1.0);
  EXPECT_EQ(right.sizes().vec(), (Shape{2, 2, 5}));
  EXPECT_TRUE(torch::equal(right[0].narrow(1, 0, 3), torch::ones({2, 3})));
  EXPECT_TRUE(torch::equal(right[0].narrow(1, 3, 2), torch::full({2, 2}, -1.0)));
  at::Tensor left = s.get_padded("obs", 0.0, td::PaddingSide::Left);
  EXPECT_TRUE(torch::equal(left[0].narrow(1, 0, 2), torch::zeros({2, 2})));
  EXPECT_TRUE(torch::equal(left[0].narrow(1, 2, 3), torch::ones({2, 3})));
  EXPECT_TRUE(torch::equal(left[1], b.get("obs")));
}

TEST(LazyStack, GetStacksAFreshCopyAndNestedKeysWork) {
  auto ms = members(3);
  auto s = td::lazy_stack(ms, 1);
  at::Tensor a = s.get("a");
  EXPECT_EQ(a.sizes().vec(), (Shape{3, 3, 2}));
  EXPECT_TRUE(torch::equal(a, torch::stack({ms[0].get("a"), ms[1].get("a"), ms[2].get("a")}, 1)));
  a.fill_(-5);  // a copy (Python's rule): the members keep their values
  EXPECT_FALSE(torch::equal(ms[0].get("a"), torch::full({3, 2}, -5.0)));
  EXPECT_EQ(s.get({"nested", "x"}).sizes().vec(), (Shape{3, 3, 1}));
  auto nested = s.get_tensordict("nested");
  EXPECT_TRUE(nested.is<td::LazyStackedTensorDict>());
  EXPECT_EQ(batch_of(nested), (Shape{3, 3}));
}

// ---- indexing: checked against the dense stack ------------------------------------

TEST(LazyStack, IndexingMatchesTheDenseStack) {
  for (int64_t dim : {0, 1}) {
    auto ms = members(4);
    auto lazy = td::lazy_stack(ms, dim);
    td::TensorDictBase dense = td::stack(ms, dim);
    auto long_idx = torch::tensor({2, 0, 1}, torch::kLong);
    auto mask4 = torch::tensor({true, false, true, true});
    auto mask3 = torch::tensor({false, true, true});
    auto mask2d = dim == 0 ? torch::rand({4, 3}) > 0.5 : torch::rand({3, 4}) > 0.5;
    std::vector<std::vector<torch::indexing::TensorIndex>> cases = {
        {1},
        {-1},
        {Slice(1, 3)},
        {Slice(None, None, 2)},
        {Slice(), 2},
        {Slice(), -1},
        {Slice(), Slice(0, 2)},
        {2, 1},
        {None, 1},
        {Ellipsis, 1},
        {1, None},
        {Slice(), None, 1},
        {long_idx},
        {Slice(), torch::tensor({1, 1}, torch::kLong)},
        {mask2d},
        {Slice(), Slice(1, None)},
        {torch::tensor(2, torch::kLong)}};
    cases.push_back(dim == 0 ? std::vector<torch::indexing::TensorIndex>{mask4}
                             : std::vector<torch::indexing::TensorIndex>{mask3});
    cases.push_back(dim == 0 ? std::vector<torch::indexing::TensorIndex>{Slice(), mask3}
                             : std::vector<torch::indexing::TensorIndex>{Slice(), mask4});
    for (std::size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE("stack dim " + std::to_string(dim) + ", case " + std::to_string(c));
      expect_same(lazy.index(cases[c]), dense.index(cases[c]));
    }
  }
}

TEST(LazyStack, AnIntOnTheStackDimIsTheMemberItself) {
  auto ms = members(3);
  auto s = td::lazy_stack(ms);
  EXPECT_TRUE(s[1].is_same(ms[1]));
  EXPECT_TRUE(s[-1].is_same(ms[2]));
  auto inner = td::lazy_stack(ms, 1);
  EXPECT_TRUE(inner.index({Slice(), 2}).is_same(ms[2]));
  // Live: a write through the result reaches the member.
  s[0].set("a", torch::zeros({3, 2}));
  EXPECT_TRUE(torch::equal(ms[0].get("a"), torch::zeros({3, 2})));
  TD_EXPECT_THROW_MSG(s[3], td::IndexError, "out of range", "3 members");
}

TEST(LazyStack, SlicesAndIndexTensorsOnTheStackDimKeepMembersLive) {
  auto ms = members(4);
  auto s = td::lazy_stack(ms);
  auto sub = s.index({Slice(1, 4, 2)});
  ASSERT_TRUE(sub.is<td::LazyStackedTensorDict>());
  auto sl = sub.as<td::LazyStackedTensorDict>();
  ASSERT_EQ(sl.num_members(), 2u);
  EXPECT_TRUE(sl.tensordicts()[0].is_same(ms[1]));
  EXPECT_TRUE(sl.tensordicts()[1].is_same(ms[3]));
  auto picked = s.index({torch::tensor({3, 3, 0}, torch::kLong)}).as<td::LazyStackedTensorDict>();
  EXPECT_TRUE(picked.tensordicts()[1].is_same(ms[3]));
  EXPECT_TRUE(picked.tensordicts()[2].is_same(ms[0]));
  // Across the other dim: every member indexed, still a lazy stack.
  auto rows = s.index({Slice(), 1});
  ASSERT_TRUE(rows.is<td::LazyStackedTensorDict>());
  EXPECT_EQ(batch_of(rows), (Shape{4}));
}

TEST(LazyStack, IndexingRaggedMembersWorksMemberByMember) {
  td::TensorDict a({{"obs", torch::ones({2, 3})}}, {2});
  td::TensorDict b({{"obs", torch::full({2, 5}, 2.0)}}, {2});
  auto s = td::lazy_stack({a, b});
  auto row = s.index({Slice(), 1});
  EXPECT_EQ(batch_of(row), (Shape{2}));
  auto list = row.as<td::LazyStackedTensorDict>().get_as_list("obs");
  EXPECT_EQ(list[1].sizes().vec(), (Shape{5}));
  EXPECT_TRUE(torch::equal(list[1], torch::full({5}, 2.0)));
}

// ---- writes -----------------------------------------------------------------------

TEST(LazyStack, IndexPutWritesThroughToTheMembers) {
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE("stack dim " + std::to_string(dim));
    auto ms = members(3);
    auto lazy = td::lazy_stack(ms, dim);
    td::TensorDictBase dense = td::stack(members(3), dim);
    auto row = [&](double v, Shape batch) {
      Shape a = batch, x = batch;
      a.push_back(2);
      x.push_back(1);
      return td::TensorDict({{"a", torch::full(a, v)},
                             {"i", torch::full(batch, 7, torch::kLong)},
                             {"nested", td::TensorDict({{"x", torch::full(x, v)}}, batch)}},
                            batch);
    };
    std::vector<std::pair<std::vector<torch::indexing::TensorIndex>, td::TensorDict>> writes = {
        {{1}, row(-1, dim == 0 ? Shape{3} : Shape{3})},
        {{Slice(), 2}, row(-2, dim == 0 ? Shape{3} : Shape{3})},
        {{Slice(0, 2)}, row(-3, dim == 0 ? Shape{2, 3} : Shape{2, 3})},
        {{torch::tensor({2, 0}, torch::kLong)}, row(-4, Shape{2, 3})},
        {{Ellipsis}, row(-5, Shape{3})},
    };
    int n = 0;
    for (auto& [idx, value] : writes) {
      SCOPED_TRACE("write " + std::to_string(n++));
      lazy.index_put_(idx, value);
      dense.index_put_(idx, value);
      expect_same(lazy, dense);
    }
    SCOPED_TRACE("tensor and scalar writes");
    // Tensors and scalars broadcast to every leaf.
    lazy.index_put_({Slice(), 0}, torch::tensor(9.0));
    dense.index_put_({Slice(), 0}, torch::tensor(9.0));
    lazy.index_put_({0}, at::Scalar(4));
    dense.index_put_({0}, at::Scalar(4));
    expect_same(lazy, dense);
    // The members hold the data.
    EXPECT_TRUE(torch::equal(td::stack(ms, dim).get("a"), dense.get("a")));
  }
}

TEST(LazyStack, IndexPutPreallocatesNewKeysInEveryMember) {
  std::vector<td::TensorDictBase> empties = {td::TensorDict(Shape{4}), td::TensorDict(Shape{4})};
  auto s = td::lazy_stack(empties);
  td::TensorDict row({{"obs", torch::ones({2, 3})}}, {2});  // one row per member
  s.index_put_({Slice(), 1}, row);
  for (const auto& m : empties) {
    ASSERT_TRUE(m.contains("obs"));
    EXPECT_EQ(m.get("obs").sizes().vec(), (Shape{4, 3}));
    EXPECT_TRUE(torch::equal(m.get("obs")[1], torch::ones({3})));
    EXPECT_TRUE(torch::equal(m.get("obs")[0], torch::zeros({3})));
  }
}

TEST(LazyStack, SetSplitsTheValueIntoTheMembers) {
  auto ms = members(2);
  auto s = td::lazy_stack(ms);
  s.set("new", torch::arange(6, torch::kFloat).reshape({2, 3}));
  EXPECT_TRUE(torch::equal(ms[1].get("new"), torch::tensor({3.f, 4.f, 5.f})));
  s.set_("a", torch::zeros({2, 3, 2}));
  EXPECT_TRUE(torch::equal(ms[0].get("a"), torch::zeros({3, 2})));
  s.set({"nested", "y"}, torch::ones({2, 3}));
  EXPECT_TRUE(torch::equal(ms[1].get({"nested", "y"}), torch::ones({3})));
  s.set("note", "hello");
  EXPECT_EQ(ms[0].get_non_tensor("note"), "hello");
  EXPECT_EQ(s.get_non_tensor("note"), "hello");
  s.del_("new");
  EXPECT_FALSE(ms[0].contains("new"));
  td::TensorDict src({{"a", torch::ones({2, 3, 2})}}, {2, 3});
  s.update_(src);
  EXPECT_TRUE(torch::equal(ms[1].get("a"), torch::ones({3, 2})));
  TD_EXPECT_THROW_MSG(s.set_("missing", torch::zeros({2, 3})), td::KeyError, "missing");
  TD_EXPECT_THROW_MSG(s.set("bad", torch::zeros({3, 3})), td::ShapeError, "bad");
}

TEST(LazyStack, AppendInsertExtend) {
  auto ms = members(2);
  auto s = td::lazy_stack(ms);
  auto extra = member(7);
  s.append(extra);
  EXPECT_EQ(batch_of(s), (Shape{3, 3}));
  EXPECT_TRUE(s[2].is_same(extra));
  auto first = member(8);
  s.insert(0, first);
  EXPECT_TRUE(s[0].is_same(first));
  s.extend({member(9), member(10)});
  EXPECT_EQ(s.num_members(), 6u);
  td::TensorDict wrong({{"a", torch::zeros({4, 2})}}, {4});
  TD_EXPECT_THROW_MSG(s.append(wrong), td::ShapeError, "[4]", "[3]");
  EXPECT_EQ(s.num_members(), 6u);
  s.lock_();
  TD_EXPECT_THROW_MSG(s.append(member(0)), td::LockedError, "locked");
}

// ---- member-wise operations -----------------------------------------------------------

TEST(LazyStack, MemberWiseOperationsWorkOnRaggedStacks) {
  td::TensorDict a({{"obs", torch::ones({2, 3})}}, {2});
  td::TensorDict b({{"obs", torch::full({2, 5}, 2.0)}}, {2});
  auto s = td::lazy_stack({a, b});
  auto c = s.clone();
  ASSERT_TRUE(c.is<td::LazyStackedTensorDict>());
  auto cl = c.as<td::LazyStackedTensorDict>();
  EXPECT_FALSE(cl.tensordicts()[0].is_same(a));
  EXPECT_TRUE(torch::equal(cl.tensordicts()[1].get("obs"), b.get("obs")));
  auto doubled = s.apply([](const at::Tensor& t) { return t * 2; });
  EXPECT_TRUE(torch::equal(doubled[1].get("obs"), torch::full({2, 5}, 4.0)));
  auto plus = (s + 1.0).as<td::LazyStackedTensorDict>();
  EXPECT_TRUE(torch::equal(plus.tensordicts()[0].get("obs"), torch::full({2, 3}, 2.0)));
  auto sum = (s + s).as<td::LazyStackedTensorDict>();
  EXPECT_TRUE(torch::equal(sum.tensordicts()[1].get("obs"), torch::full({2, 5}, 4.0)));
  auto eq = s.eq(1.0);
  EXPECT_EQ(eq[0].get("obs").scalar_type(), torch::kBool);
  s.mul_(3.0);  // in place: the members change
  EXPECT_TRUE(torch::equal(a.get("obs"), torch::full({2, 3}, 3.0)));
  s.add_(s.clone());
  EXPECT_TRUE(torch::equal(b.get("obs"), torch::full({2, 5}, 12.0)));
  s.zero_();
  EXPECT_TRUE(torch::equal(b.get("obs"), torch::zeros({2, 5})));
  auto as_double = s.to(torch::kDouble);
  EXPECT_EQ(as_double[1].get("obs").scalar_type(), torch::kDouble);
  auto named = s.named_apply(
      [](const td::NestedKey& k, const at::Tensor& t) { return k.repr() == "'obs'" ? t + 1 : t; });
  EXPECT_TRUE(torch::equal(named[0].get("obs"), torch::ones({2, 3})));
  EXPECT_TRUE(s.select({"obs"}).is<td::LazyStackedTensorDict>());
  EXPECT_TRUE(s.exclude({"obs"}).keys().empty());
  TD_EXPECT_THROW_MSG(s.contiguous(), td::ShapeError, "Failed to stack tensors", "'obs'");
}

TEST(LazyStack, DensifyingGivesATensorDict) {
  auto ms = members(3);
  auto s = td::lazy_stack(ms, 1);
  td::TensorDict d = s.contiguous();
  EXPECT_EQ(d.type_name(), "TensorDict");
  expect_same(s, td::stack(ms, 1));
  td::TensorDict t = s.to_tensordict();
  EXPECT_TRUE(t.get_tensordict("nested").is<td::TensorDict>());
  // A dense stack of lazy stacks stacks their leaves.
  auto twice = td::stack({s, s});
  EXPECT_EQ(batch_of(twice), (Shape{2, 3, 3}));
  // maybe_dense_stack: dense when it can, lazy otherwise.
  EXPECT_TRUE(td::maybe_dense_stack(members(2)).is<td::TensorDict>());
  td::TensorDict other({{"b", torch::zeros({3})}}, {3});
  EXPECT_TRUE(td::maybe_dense_stack({member(0), other}).is<td::LazyStackedTensorDict>());
}

TEST(LazyStack, ShapeOpsMoveTheStackDim) {
  auto ms = members(2);
  auto s = td::lazy_stack(ms);  // [2, 3]
  auto un = s.unbind(0);
  ASSERT_EQ(un.size(), 2u);
  EXPECT_TRUE(un[0].is_same(ms[0]));
  auto rows = s.unbind(1);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0].is<td::LazyStackedTensorDict>());
  EXPECT_EQ(batch_of(rows[0]), (Shape{2}));
  auto u = s.unsqueeze(0);
  EXPECT_EQ(batch_of(u), (Shape{1, 2, 3}));
  EXPECT_EQ(u.as<td::LazyStackedTensorDict>().stack_dim(), 1);
  auto u2 = s.unsqueeze(-1);
  EXPECT_EQ(batch_of(u2), (Shape{2, 3, 1}));
  EXPECT_EQ(u2.as<td::LazyStackedTensorDict>().stack_dim(), 0);
  EXPECT_EQ(batch_of(u2.squeeze(-1)), (Shape{2, 3}));
  EXPECT_EQ(batch_of(u.squeeze()), (Shape{2, 3}));
  auto tr = s.transpose(0, 1);
  EXPECT_EQ(batch_of(tr), (Shape{3, 2}));
  EXPECT_EQ(tr.as<td::LazyStackedTensorDict>().stack_dim(), 1);
  expect_same(tr, td::stack(ms, 0).transpose(0, 1));
  auto one = td::lazy_stack({ms[0]});
  EXPECT_TRUE(one.squeeze(0).is_same(ms[0]));
  auto parts = s.split(1, 0);
  EXPECT_TRUE(parts[1].as<td::LazyStackedTensorDict>().tensordicts()[0].is_same(ms[1]));
  TD_EXPECT_THROW_MSG(s.set_batch_size({2}), td::ShapeError,
                      "Modifying the batch size of a lazy representation");
  // Reshapes across the stack dim densify.
  EXPECT_EQ(batch_of(s.reshape({6})), (Shape{6}));
}

// ---- locking ----------------------------------------------------------------------------

TEST(LazyStack, LockingTheStackLocksItsMembers) {
  auto ms = members(2);
  auto s = td::lazy_stack(ms);
  s.lock_();
  EXPECT_TRUE(ms[0].is_locked());
  TD_EXPECT_THROW_MSG(s.set("new", torch::zeros({2, 3})), td::LockedError, "locked");
  TD_EXPECT_THROW_MSG(ms[1].unlock_(), td::LockedError, "locked graph");
  s.set_("a", torch::ones({2, 3, 2}));  // in-place writes are allowed
  EXPECT_TRUE(torch::equal(ms[1].get("a"), torch::ones({3, 2})));
  s.unlock_();
  EXPECT_FALSE(ms[0].is_locked());
  // A stack of locked members is locked (Python's rule).
  auto locked = members(2);
  for (auto& m : locked) m.lock_();
  EXPECT_TRUE(td::lazy_stack(locked).is_locked());
}

// ---- nested lazy stacks ------------------------------------------------------------------

TEST(LazyStack, ALazyStackNestedInATensorDict) {
  auto ms = members(2);
  td::TensorDict root({{"agents", td::lazy_stack(ms, 1)}, {"t", torch::arange(3)}}, {3});
  EXPECT_EQ(root.get({"agents", "a"}).sizes().vec(), (Shape{3, 2, 2}));
  auto row = root[1];
  EXPECT_TRUE(row.get_tensordict("agents").is<td::LazyStackedTensorDict>());
  EXPECT_EQ(batch_of(row.get_tensordict("agents")), (Shape{2}));
  td::TensorDict value(
      {{"agents", td::stack({member(-1)[0], member(-1)[0]})}, {"t", torch::tensor(5)}}, {});
  root.index_put_({2}, value);
  EXPECT_TRUE(torch::equal(ms[1].get("a")[2], member(-1).get("a")[0]));
  auto copy = root.clone();
  EXPECT_TRUE(copy.get_tensordict("agents").is<td::LazyStackedTensorDict>());
  root.lock_();
  EXPECT_TRUE(ms[0].is_locked());
  root.unlock_();
}

// ---- memmap ------------------------------------------------------------------------------

TEST(LazyStack, MemmapWritesPythonsLayoutAndLoadsBack) {
  TempDir dir;
  td::TensorDict a({{"obs", torch::ones({2, 3})}, {"only_a", torch::zeros({2})}}, {2});
  td::TensorDict b({{"obs", torch::full({2, 5}, 2.0)}}, {2});
  auto s = td::lazy_stack({a, b}, 1);
  auto saved = s.memmap(dir.path.string());
  ASSERT_TRUE(saved.is<td::LazyStackedTensorDict>());
  EXPECT_TRUE(saved.is_memmap());
  EXPECT_EQ(read_text(dir.path / "meta.json"),
            "{\"_type\":\"<class 'tensordict._lazy.LazyStackedTensorDict'>\",\"stack_dim\":1}");
  EXPECT_TRUE(fs::exists(dir.path / "0" / "only_a.memmap"));
  EXPECT_TRUE(fs::exists(dir.path / "1" / "obs.memmap"));
  auto loaded = td::load_memmap(dir.path.string()).as<td::LazyStackedTensorDict>();
  EXPECT_EQ(loaded.stack_dim(), 1);
  EXPECT_EQ(batch_of(loaded), (Shape{2, 2}));
  EXPECT_TRUE(torch::equal(loaded.get_as_list("obs")[1], b.get("obs")));
  EXPECT_TRUE(loaded.tensordicts()[0].contains("only_a"));
}

TEST(LazyStack, NestedLazyStackRoundTripsThroughMemmap) {
  TempDir dir;
  auto ms = members(2);
  td::TensorDict root({{"agents", td::lazy_stack(ms)}, {"t", torch::arange(2)}}, {2});
  root.memmap(dir.path.string());
  auto meta = nlohmann::json::parse(read_text(dir.path / "meta.json"));
  EXPECT_EQ(meta["agents"], nlohmann::json::parse("{\"type\":\"LazyStackedTensorDict\"}"));
  auto loaded = td::load_memmap(dir.path.string());
  auto agents = loaded.get_tensordict("agents");
  ASSERT_TRUE(agents.is<td::LazyStackedTensorDict>());
  EXPECT_TRUE(
      torch::equal(loaded.get({"agents", "nested", "x"}), root.get({"agents", "nested", "x"})));
  // memmap_ in place on a lazy stack maps every member.
  TempDir dir2;
  auto fresh = members(2);
  auto s = td::lazy_stack(fresh);
  s.memmap_(dir2.path.string());
  EXPECT_TRUE(s.is_memmap());
  EXPECT_TRUE(fresh[1].is_memmap());
  EXPECT_TRUE(td::MemoryMappedTensor::filename(fresh[1].get("a")).has_value());
  EXPECT_TRUE(fs::exists(dir2.path / "meta.json"));
  expect_same(td::load_memmap(dir2.path.string()), td::stack(fresh));
}

// ---- fixes found while documenting --------------------------------------------------------

TEST(LazyStack, WritesThatMustReachTheMembers) {
  td::TensorDict a({{"obs", torch::ones({2, 3})}, {"r", torch::ones({2})}}, {2});
  td::TensorDict b({{"obs", torch::full({2, 5}, 2.0)}, {"r", torch::ones({2})}}, {2});
  auto s = td::lazy_stack({a, b});
  s.fill_("r", 7);  // not the stacked copy that get() returns
  EXPECT_TRUE(torch::equal(b.get("r"), torch::full({2}, 7.0)));
  TD_EXPECT_THROW_MSG(s.fill_("missing", 1), td::KeyError, "missing");
  // A scalar written across members with ragged leaves.
  s.index_put_({Slice(), 0}, at::Scalar(0));
  EXPECT_TRUE(torch::equal(b.get("obs")[0], torch::zeros({5})));
  EXPECT_TRUE(torch::equal(a.get("obs")[1], torch::ones({3})));
  EXPECT_TRUE(s.member(1).is_same(b));
  TD_EXPECT_THROW_MSG(s.member(2), td::IndexError, "out of range");
  EXPECT_FALSE(s.is_empty());
  auto e = s.empty();
  EXPECT_TRUE(e.is<td::LazyStackedTensorDict>());
  EXPECT_TRUE(e.is_empty());
}

TEST(LazyStack, InsertFollowsPythonsListInsert) {
  auto ms = members(3);
  auto s = td::lazy_stack(ms);
  auto x = member(5);
  s.insert(-1, x);  // before the last member
  EXPECT_TRUE(s.member(2).is_same(x));
  EXPECT_TRUE(s.member(3).is_same(ms[2]));
  auto y = member(6);
  s.insert(100, y);  // clamped: appended
  EXPECT_TRUE(s.member(4).is_same(y));
}

TEST(LazyStack, ReprOfDifferingNonTensorValuesDoesNotThrow) {
  td::TensorDict a({{"name", "left"}}, {2});
  td::TensorDict b({{"name", "right"}}, {2});
  auto s = td::lazy_stack({a, b});
  std::string r = s.repr();
  EXPECT_NE(r.find("name: NonTensorStack("), std::string::npos) << r;
  EXPECT_NE(r.find("[['left', 'left'], ['right', 'right']]"), std::string::npos) << r;
  EXPECT_EQ(s.get_non_tensor("name"),
            nlohmann::json::parse(R"([["left","left"],["right","right"]])"));
}

TEST(LazyStack, WholeTreeUnaryOpsKeepANestedRaggedStackLazy) {
  td::TensorDict a({{"obs", torch::ones({2, 3})}}, {2});
  td::TensorDict b({{"obs", torch::full({2, 5}, 2.0)}}, {2});
  td::TensorDict root({{"agents", td::lazy_stack({a, b}, 1)}, {"t", torch::ones({2})}}, {2});
  for (const auto& out : {root + 1.0, root.apply([](const at::Tensor& t) { return t + 1; }),
                          root.to(torch::kDouble) + 1.0}) {
    auto agents = out.get_tensordict("agents");
    ASSERT_TRUE(agents.is<td::LazyStackedTensorDict>());
    auto list = agents.as<td::LazyStackedTensorDict>().get_as_list("obs");
    EXPECT_TRUE(torch::allclose(list[1], torch::full({2, 5}, 3.0).to(list[1].dtype())));
    EXPECT_TRUE(torch::allclose(out.get("t"), torch::full({2}, 2.0).to(out.get("t").dtype())));
  }
  EXPECT_EQ(root.to(torch::kDouble)
                .get_tensordict("agents")
                .as<td::LazyStackedTensorDict>()
                .get_as_list("obs")[0]
                .scalar_type(),
            torch::kDouble);
  auto c = root.clone();
  EXPECT_TRUE(c.get_tensordict("agents").is<td::LazyStackedTensorDict>());
}

// index_put_ checks every member's part before writing any (issue #33): a
// part that fits member 0 but not member 1 of a ragged stack changes nothing.
TEST(LazyStack, RefusedWriteIntoARaggedStackLeavesEveryMemberAsItWas) {
  td::TensorDict a({{"obs", torch::ones({2, 3})}}, {2});
  td::TensorDict b({{"obs", torch::ones({2, 5})}}, {2});
  auto s = td::lazy_stack({a, b});
  td::TensorDict rows({{"obs", torch::zeros({2, 3})}}, {2});  // fits a's obs, not b's
  EXPECT_THROW(s.index_put_({Slice(), 0}, rows), td::ShapeError);
  EXPECT_TRUE(torch::equal(a.get("obs"), torch::ones({2, 3})));
  EXPECT_TRUE(torch::equal(b.get("obs"), torch::ones({2, 5})));
  EXPECT_THROW(s.update_at_(rows, {Slice(), 0}), td::ShapeError);
  EXPECT_TRUE(torch::equal(a.get("obs"), torch::ones({2, 3})));
  // A new key refused in member 1 (locked) is not created in member 0.
  b.lock_();
  td::TensorDict extra({{"new", torch::zeros({2})}}, {2});
  EXPECT_THROW(s.index_put_({Slice(), 0}, extra), td::LockedError);
  EXPECT_FALSE(a.contains("new"));
}

// A lazy stack nested in a dense tensordict is checked by the dense walk's
// checking pass too: the dense leaves are not written when it refuses.
TEST(LazyStack, RefusedWriteIntoANestedRaggedStackLeavesTheParentAsItWas) {
  td::TensorDict a({{"obs", torch::ones({2, 3})}}, {2});
  td::TensorDict b({{"obs", torch::ones({2, 5})}}, {2});
  td::TensorDict root({{"x", torch::zeros({2})}, {"agents", td::lazy_stack({a, b}, 1)}}, {2});
  td::TensorDict row(
      {{"x", torch::ones({})}, {"agents", td::TensorDict({{"obs", torch::zeros({2, 3})}}, {2})}},
      {});
  EXPECT_THROW(root.index_put_({0}, row), td::ShapeError);
  EXPECT_TRUE(torch::equal(root.get("x"), torch::zeros({2})));
  EXPECT_TRUE(torch::equal(a.get("obs"), torch::ones({2, 3})));
  // A row whose agents part is itself ragged fits every member: written everywhere.
  auto parts = td::lazy_stack({td::TensorDict({{"obs", torch::zeros({3})}}, {}),
                               td::TensorDict({{"obs", torch::zeros({5})}}, {})});
  td::TensorDict good({{"x", torch::ones({})}, {"agents", parts}}, {});
  root.index_put_({0}, good);
  EXPECT_TRUE(torch::equal(root.get("x"), torch::tensor({1.0f, 0.0f})));
  EXPECT_TRUE(torch::equal(a.get("obs")[0], torch::zeros({3})));
  EXPECT_TRUE(torch::equal(b.get("obs")[0], torch::zeros({5})));
  EXPECT_TRUE(torch::equal(b.get("obs")[1], torch::ones({5})));
}
