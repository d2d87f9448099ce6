// The behaviour suite: the semantics of reads, writes, locking and errors on
// every storage, with the in-memory TensorDict as the oracle. Each test builds
// the storage from the same data as the oracle, does the same thing to both,
// and compares them, through the handle that wrote and through a second
// handle on the same storage (StorageCase::reopen). A refused write must name
// the key path, have the documented type and leave the data as it was.
//
// The suite runs over all_storages() (storages.cpp): a new storage joins by
// adding its StorageCase there. What a storage does differently is a declared
// field of StorageCase, asserted here.
//
// RaggedLazyStack: a lazy stack of members whose leaves differ in shape
// (StorageCase::make_ragged) refuses a write that fits members 0..k-1 but not
// member k, and writes none of them.
#include "conformance.h"

#include <tensordict/lazy_stack.h>

#include <algorithm>
#include <string>
#include <vector>

namespace conformance {
namespace {

using namespace torch::indexing;

constexpr int64_t kRows = 6;

/// Three levels, four dtypes and (when the storage keeps them) non-tensors:
///   a            float32 [6, 3]
///   flag         bool    [6]
///   n.b          int32   [6, 2]
///   n.m.c        float64 [6]
///   tag, n.note  non-tensor values
/// Row r holds values derived from r + offset.
td::TensorDict rows_data(double offset, bool non_tensors) {
  auto r = torch::arange(kRows, torch::kDouble) + offset;
  td::TensorDict m({{"c", r * 10 + 0.5}}, {kRows});
  td::TensorDict n({{"b", (r.unsqueeze(1) * 2 + torch::arange(2)).to(torch::kInt)}, {"m", m}},
                   {kRows});
  td::TensorDict d({{"a", (r.unsqueeze(1) * 3 + torch::arange(3)).to(torch::kFloat)},
                    {"flag", r.remainder(2).eq(0)},
                    {"n", n}},
                   {kRows});
  if (non_tensors) {
    d.set_non_tensor("tag", "rows " + std::to_string(static_cast<int>(offset)));
    d.set_non_tensor({"n", "note"}, static_cast<int>(offset));
  }
  return d;
}

/// A value for `count` rows (batch [count], or [] when count < 0) with every
/// tensor leaf of rows_data, values from `offset`.
td::TensorDictBase value_rows(int64_t count, double offset, bool non_tensors) {
  td::TensorDict all = rows_data(offset, non_tensors);
  if (count < 0) return all[0].clone();
  return all.index({Slice(0, count)}).clone();
}

/// Tensor and non-tensor leaves, nested.
const td::KeysOptions kLeaves{
    .include_nested = true, .leaves_only = true, .non_tensor_leaves = true};

std::vector<std::string> sorted_leaf_keys(const td::TensorDictBase& t) {
  std::vector<std::string> out;
  for (const auto& k : t.keys(kLeaves)) out.push_back(k.repr());
  std::sort(out.begin(), out.end());
  return out;
}

/// The per-element values of a non-tensor entry (one value at batch []).
nlohmann::json non_tensor_elements(const td::TensorDictBase& t, const td::NestedKey& k) {
  if (t.batch_dims() == 0) return t.get_non_tensor(k);
  return nlohmann::json(t.get_non_tensor_stack(k).values());
}

/// Same batch size, leaf keys, shapes, dtypes, values and non-tensor values.
void expect_same(const td::TensorDictBase& got, const td::TensorDictBase& want,
                 const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(got.batch_size().vec(), want.batch_size().vec());
  ASSERT_EQ(sorted_leaf_keys(got), sorted_leaf_keys(want));
  for (const auto& k : want.keys(kLeaves)) {
    SCOPED_TRACE(k.repr());
    if (want.is_non_tensor(k)) {
      ASSERT_TRUE(got.is_non_tensor(k));
      EXPECT_EQ(non_tensor_elements(got, k), non_tensor_elements(want, k));
      continue;
    }
    at::Tensor g = got.get(k), w = want.get(k);
    EXPECT_EQ(g.sizes(), w.sizes());
    EXPECT_EQ(g.scalar_type(), w.scalar_type());
    if (g.sizes() == w.sizes() && g.scalar_type() == w.scalar_type())
      EXPECT_TRUE(torch::equal(g, w)) << "got " << g << "\nwant " << w;
  }
}

class Behaviour : public ::testing::TestWithParam<StorageCase> {
 protected:
  void SetUp() override {
    oracle_ = rows_data(0, nt());
    store_ = GetParam().make(oracle_, scratch_);
  }
  /// The suite's data holds non-tensors when the storage keeps them.
  bool nt() const { return GetParam().non_tensors; }
  /// The storage equals the oracle, through this handle and a second one.
  void expect_matches_oracle(const std::string& what) {
    expect_same(store_, oracle_, what + " (the handle that wrote)");
    expect_same(GetParam().reopened(store_), oracle_, what + " (a second handle)");
  }
  /// Reads `index` from the storage and from the oracle.
  void expect_read(const td::IndexList& index, const std::string& what) {
    expect_same(store_.index(index), oracle_.index(index), what);
  }

  Scratch scratch_;
  td::TensorDictBase oracle_;
  td::TensorDictBase store_;
};

// ---- reads ----------------------------------------------------------------------------------

TEST_P(Behaviour, BuiltStorageHoldsTheData) { expect_matches_oracle("after make"); }

TEST_P(Behaviour, IntegerIndexReadsOneRow) {
  for (int64_t i = -kRows; i < kRows; ++i) {
    expect_same(store_[i], oracle_[i], "td[" + std::to_string(i) + "]");
    EXPECT_EQ(store_[i].batch_dims(), 0);
  }
}

TEST_P(Behaviour, SliceWithStepReadsTheRows) {
  expect_read({Slice(1, None, 2)}, "td[1::2]");
  expect_read({Slice(None, None, 4)}, "td[::4]");
  expect_read({Slice(-4, -1, 2)}, "td[-4:-1:2]");
  expect_read({Slice(2, 100, 3)}, "td[2:100:3] (clamped)");
  expect_read({Slice(4, 2)}, "td[4:2] (empty)");
}

TEST_P(Behaviour, LongIndexWithRepeatsReadsTheRowsInOrder) {
  expect_read({torch::tensor({4, 0, 4, -1, 2}, torch::kLong)}, "td[[4, 0, 4, -1, 2]]");
  expect_read({torch::tensor({3}, torch::kLong)}, "td[[3]]");
}

TEST_P(Behaviour, BoolMaskReadsTheSelectedRows) {
  expect_read({torch::tensor({true, false, false, true, true, false})}, "td[mask]");
  expect_read({torch::zeros({kRows}, torch::kBool)}, "td[no row]");
}

TEST_P(Behaviour, EllipsisAndNoneFollowLibTorch) {
  expect_read({Ellipsis}, "td[...]");
  expect_read({Ellipsis, 2}, "td[..., 2]");
  expect_read({None, Slice(1, 3)}, "td[None, 1:3]");
  expect_read({Slice(), None}, "td[:, None]");
}

TEST_P(Behaviour, OutOfRangeIndexIsAnIndexErrorNamingIt) {
  TD_EXPECT_THROW_MSG(store_[kRows], td::IndexError, "index 6");
  TD_EXPECT_THROW_MSG(store_[-kRows - 1], td::IndexError, "index -7");
  TD_EXPECT_THROW_MSG(store_.index({torch::tensor({1, 9}, torch::kLong)}), td::IndexError,
                      "index 9");
  TD_EXPECT_THROW_MSG(store_.index({torch::ones({kRows + 1}, torch::kBool)}), td::IndexError, "7");
  // More indices than batch dims.
  EXPECT_THROW(store_.index({0, 1}), td::IndexError);
  expect_matches_oracle("after the refused reads");
}

// ---- writes -----------------------------------------------------------------------------------

TEST_P(Behaviour, IndexPutOfARowWritesEveryLevel) {
  auto value = value_rows(-1, 50, false);
  store_.index_put_({2}, value);
  oracle_.index_put_({2}, value);
  expect_matches_oracle("td[2] = row");
  store_.index_put_({-1}, value_rows(-1, 70, false));
  oracle_.index_put_({-1}, value_rows(-1, 70, false));
  expect_matches_oracle("td[-1] = row");
}

TEST_P(Behaviour, IndexPutOfASliceWritesEveryLevel) {
  auto value = value_rows(3, 50, false);
  store_.index_put_({Slice(0, 5, 2)}, value);
  oracle_.index_put_({Slice(0, 5, 2)}, value);
  expect_matches_oracle("td[0:5:2] = rows");
}

TEST_P(Behaviour, IndexPutOfALongIndexWritesEveryLevel) {
  auto idx = torch::tensor({5, 0, 3}, torch::kLong);
  auto value = value_rows(3, 50, false);
  store_.index_put_({idx}, value);
  oracle_.index_put_({idx}, value);
  expect_matches_oracle("td[[5, 0, 3]] = rows");
}

TEST_P(Behaviour, IndexPutOfAMaskWritesEveryLevel) {
  auto mask = torch::tensor({false, true, false, false, true, false});
  auto value = value_rows(2, 50, false);
  store_.index_put_({mask}, value);
  oracle_.index_put_({mask}, value);
  expect_matches_oracle("td[mask] = rows");
}

TEST_P(Behaviour, IndexPutOfATensorOrScalarWritesEveryLeaf) {
  store_.index_put_({Slice(1, 3)}, torch::tensor(7));
  oracle_.index_put_({Slice(1, 3)}, torch::tensor(7));
  expect_matches_oracle("td[1:3] = tensor(7)");
  store_.index_put_({torch::tensor({4, 0}, torch::kLong)}, at::Scalar(2));
  oracle_.index_put_({torch::tensor({4, 0}, torch::kLong)}, at::Scalar(2));
  expect_matches_oracle("td[[4, 0]] = 2");
}

TEST_P(Behaviour, IndexPutOfNonTensorValues) {
  if (!nt()) {
    // Declared: this storage keeps tensors only; a non-tensor is refused
    // before anything is written.
    auto with_tag = value_rows(2, 50, false);
    with_tag.set_non_tensor("tag", "text");
    TD_EXPECT_THROW_MSG(store_.index_put_({Slice(1, 3)}, with_tag), td::TypeError, "'tag'");
    TD_EXPECT_THROW_MSG(store_.set_non_tensor({"n", "note"}, 1), td::TypeError, "('n', 'note')");
    expect_matches_oracle("after the refused non-tensors");
    return;
  }
  // The same value as stored: nothing changes (still one NonTensorData).
  auto same = value_rows(2, 50, false);
  same.set_non_tensor("tag", "rows 0");
  store_.index_put_({Slice(1, 3)}, same);
  oracle_.index_put_({Slice(1, 3)}, same);
  expect_matches_oracle("td[1:3] = rows with the stored non-tensor");

  // A different value for some rows.
  auto other = value_rows(2, 60, false);
  other.set_non_tensor("tag", "other");
  other.set_non_tensor({"n", "note"}, 9);
  if (GetParam().non_tensor_row_writes) {
    store_.index_put_({torch::tensor({4, 1}, torch::kLong)}, other);
    oracle_.index_put_({torch::tensor({4, 1}, torch::kLong)}, other);
    expect_matches_oracle("td[[4, 1]] = rows with other non-tensors");
    // A row of the stack written again, by an integer index.
    auto row = value_rows(-1, 80, false);
    row.set_non_tensor("tag", "row three");
    store_.index_put_({3}, row);
    oracle_.index_put_({3}, row);
    expect_matches_oracle("td[3] = row with a non-tensor");
  } else {
    auto other_tag = value_rows(2, 60, false);
    other_tag.set_non_tensor("tag", "other");
    TD_EXPECT_THROW_MSG(store_.index_put_({torch::tensor({4, 1}, torch::kLong)}, other_tag),
                        td::LockedError, "'tag'", "NonTensorStack");
    expect_matches_oracle("after the refused non-tensor write");
  }
}

TEST_P(Behaviour, NonTensorsAreKeptOrRefused) {
  if (nt()) {
    EXPECT_EQ(store_.get_non_tensor("tag"), "rows 0");
    EXPECT_EQ(store_.get_non_tensor({"n", "note"}), 0);
    EXPECT_EQ(store_[1].get_non_tensor({"n", "note"}), 0);
    return;
  }
  td::TensorDict with = rows_data(0, true);
  Scratch scratch;
  EXPECT_THROW(GetParam().make(with, scratch), td::TypeError);
}

TEST_P(Behaviour, UpdateInPlaceWritesNestedLevels) {
  auto other = rows_data(40, false).exclude({"flag", {"n", "b"}});
  store_.update_(other);
  oracle_.update_(other);
  expect_matches_oracle("update_ of a and n.m.c");
  // Only the listed keys.
  auto more = rows_data(90, false);
  store_.update_(more, {{"n", "b"}});
  oracle_.update_(more, {{"n", "b"}});
  expect_matches_oracle("update_ of n.b only");
}

TEST_P(Behaviour, UpdateInPlaceOfNonTensorValues) {
  if (!nt()) {
    EXPECT_FALSE(store_.is_non_tensor("tag"));  // declared; see NonTensorsAreKeptOrRefused
    return;
  }
  // A new value for the whole batch replaces the stored one, on every storage.
  auto other = rows_data(30, true).select({"tag", {"n", "note"}, {"n", "b"}});
  store_.update_(other);
  oracle_.update_(other);
  expect_matches_oracle("update_ of tag, n.note and n.b");
  EXPECT_EQ(GetParam().reopened(store_).get_non_tensor({"n", "note"}), 30);
}

TEST_P(Behaviour, SetInPlaceOfANestedKey) {
  auto c = torch::linspace(-1, 1, kRows, torch::kDouble);
  store_.set_({"n", "m", "c"}, c);
  oracle_.set_({"n", "m", "c"}, c);
  expect_matches_oracle("set_ of n.m.c");
  // Cast to the stored dtype and broadcast, as LibTorch's copy_.
  auto b = torch::tensor({1.9, -3.2});
  store_.set_({"n", "b"}, b);
  oracle_.set_({"n", "b"}, b);
  EXPECT_EQ(store_.get({"n", "b"}).scalar_type(), torch::kInt);
  expect_matches_oracle("set_ of n.b from a float row");
}

// ---- refused writes: the typed error, the key path, nothing changed
// -------------------------------

TEST_P(Behaviour, WrongShapeIsAShapeErrorAndChangesNothing) {
  auto bad = value_rows(2, 50, false);
  bad.set({"n", "b"}, torch::zeros({2, 3}, torch::kInt));
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 2)}, bad), td::ShapeError, "('n', 'b')");
  expect_matches_oracle("after index_put_ of a wrong shape");
  TD_EXPECT_THROW_MSG(store_.set_({"n", "m", "c"}, torch::zeros({kRows + 1}, torch::kDouble)),
                      td::ShapeError, "('n', 'm', 'c')");
  expect_matches_oracle("after set_ of a wrong shape");
  auto wrong = rows_data(40, false);
  wrong.set("a", torch::zeros({kRows, 4}));
  TD_EXPECT_THROW_MSG(store_.update_(wrong), td::ShapeError, "'a'");
  expect_matches_oracle("after update_ of a wrong shape");
  // The message names both batch sizes.
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 3)}, value_rows(2, 50, false)), td::ShapeError,
                      "[2]", "3");
  expect_matches_oracle("after index_put_ of a wrong batch size");
}

TEST_P(Behaviour, WrongKindIsATypeErrorAndChangesNothing) {
  // A tensordict where the storage has a tensor, a tensor where it has a
  // tensordict.
  auto bad = value_rows(2, 50, false);
  bad.set("a", td::TensorDict({{"x", torch::zeros({2})}}, {2}));
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 2)}, bad), td::TypeError, "'a'");
  auto bad_level = value_rows(2, 50, false);
  bad_level.set({"n", "m"}, torch::zeros({2}));
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 2)}, bad_level), td::TypeError, "('n', 'm')");
  auto non_tensor = value_rows(2, 50, false);
  non_tensor.set_non_tensor({"n", "b"}, "text");
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 2)}, non_tensor), td::TypeError, "('n', 'b')");
  expect_matches_oracle("after the refused writes");
}

TEST_P(Behaviour, MissingKeyIsAKeyErrorAndChangesNothing) {
  TD_EXPECT_THROW_MSG(store_.set_({"n", "zz"}, torch::zeros({kRows})), td::KeyError, "('n', 'zz')");
  auto other = rows_data(40, false);
  other.set({"n", "m", "new"}, torch::zeros({kRows}));
  TD_EXPECT_THROW_MSG(store_.update_(other), td::KeyError, "('n', 'm', 'new')");
  TD_EXPECT_THROW_MSG(store_.update_at_(other.index({Slice(0, 2)}), {Slice(0, 2)}), td::KeyError,
                      "('n', 'm', 'new')");
  expect_matches_oracle("after the refused writes");
}

TEST_P(Behaviour, LockedStorageRefusesNewEntriesAndWritesInPlace) {
  if (!store_.is_locked()) {
    EXPECT_FALSE(GetParam().writes_in_place_only);
    store_.lock_();
  }
  ASSERT_TRUE(store_.is_locked());
  TD_EXPECT_THROW_MSG(store_.set("new", torch::zeros({kRows})), td::LockedError, "'new'");
  TD_EXPECT_THROW_MSG(store_.set({"n", "m", "c"}, torch::zeros({kRows}, torch::kDouble)),
                      td::LockedError, "('n', 'm', 'c')");
  auto with_new = value_rows(2, 50, false);
  with_new.set({"n", "m", "new"}, torch::zeros({2}));
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 2)}, with_new), td::LockedError,
                      "('n', 'm', 'new')");
  auto update = rows_data(40, false);
  update.set({"n", "extra"}, torch::zeros({kRows}));
  EXPECT_THROW(store_.update(update), td::LockedError);
  TD_EXPECT_THROW_MSG(store_.del_({"n", "b"}), td::LockedError, "('n', 'b')");
  expect_matches_oracle("after the refused writes");

  // In-place writes still work.
  auto value = value_rows(2, 50, false);
  store_.index_put_({Slice(3, 5)}, value);
  oracle_.index_put_({Slice(3, 5)}, value);
  store_.set_("a", torch::ones({3}));
  oracle_.set_("a", torch::ones({3}));
  auto in_place = rows_data(20, false).select({{"n", "m", "c"}});
  store_.update_(in_place);
  oracle_.update_(in_place);
  expect_matches_oracle("in-place writes while locked");
}

INSTANTIATE_TEST_SUITE_P(Storages, Behaviour, ::testing::ValuesIn(all_storages()), storage_name);

// ---- the ragged lazy stack: all or nothing -----------------------------------------------------

/// The storages that can hold members of different shapes.
std::vector<StorageCase> ragged_storages() {
  std::vector<StorageCase> out;
  for (auto& s : all_storages())
    if (s.make_ragged) out.push_back(std::move(s));
  return out;
}

class RaggedLazyStack : public ::testing::TestWithParam<StorageCase> {
 protected:
  void SetUp() override {
    store_ = GetParam().make_ragged(scratch_);
    for (int64_t i = 0; i < kN; ++i) before_.push_back(store_[i].clone());
  }
  /// Member i: a of shape [a_size] filled with `fill`, b [5] filled with `fill`.
  static td::TensorDict member(int64_t a_size, double fill) {
    return td::TensorDict({{"a", torch::full({a_size}, fill)},
                           {"b", torch::full({5}, static_cast<int64_t>(fill), torch::kLong)}},
                          {});
  }
  /// A value for `members` (row j for member members[j]): the right shape of
  /// a everywhere except at position `bad`.
  static td::TensorDictBase value_for(const std::vector<int64_t>& members, std::size_t bad) {
    std::vector<td::TensorDictBase> rows;
    for (std::size_t j = 0; j < members.size(); ++j)
      rows.push_back(member(j == bad ? members[j] + 3 : members[j] + 1, 50.0 + members[j]));
    return td::lazy_stack(rows);
  }
  void expect_unwritten(const std::string& what) {
    SCOPED_TRACE(what);
    for (int64_t i = 0; i < kN; ++i)
      expect_same(store_[i], before_[i], "member " + std::to_string(i));
  }

  Scratch scratch_;
  td::TensorDictBase store_;
  std::vector<td::TensorDictBase> before_;
};

TEST_P(RaggedLazyStack, FittingWriteReachesEveryMember) {
  if (!GetParam().ragged_writes) {
    // Declared gap: the value's leaves are read stacked.
    TD_EXPECT_THROW_MSG(
        store_.index_put_({torch::tensor({2, 0, 3}, torch::kLong)}, value_for({2, 0, 3}, 99)),
        td::ShapeError, "'a'");
    expect_unwritten("a ragged value refused");
    return;
  }
  store_.index_put_({torch::tensor({2, 0, 3}, torch::kLong)}, value_for({2, 0, 3}, 99));
  EXPECT_TRUE(torch::equal(store_[2].get("a"), torch::full({3}, 52.0)));
  EXPECT_TRUE(torch::equal(store_[0].get("b"), torch::full({5}, 50, torch::kLong)));
  EXPECT_TRUE(torch::equal(store_[3].get("a"), torch::full({4}, 53.0)));
  expect_same(store_[1], before_[1], "member 1 (not indexed)");
}

TEST_P(RaggedLazyStack, TensorDictValueRefusedByALaterMemberWritesNoMember) {
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 3)}, value_for({0, 1, 2}, 2)), td::ShapeError,
                      "'a'");
  expect_unwritten("slice 0:3, member 2 refuses");
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 4, 2)}, value_for({0, 2}, 1)), td::ShapeError,
                      "'a'");
  expect_unwritten("slice 0:4:2, member 2 refuses");
  TD_EXPECT_THROW_MSG(
      store_.index_put_({torch::tensor({3, 0, 1}, torch::kLong)}, value_for({3, 0, 1}, 2)),
      td::ShapeError, "'a'");
  expect_unwritten("long index [3, 0, 1], member 1 refuses");
  // One member: b fits, a does not; b is not written either.
  TD_EXPECT_THROW_MSG(store_.index_put_({2}, member(7, 50)), td::ShapeError, "'a'");
  expect_unwritten("integer index 2");
  // update_at_ takes the same path.
  TD_EXPECT_THROW_MSG(store_.update_at_(value_for({0, 1, 2}, 2), {Slice(0, 3)}), td::ShapeError,
                      "'a'");
  expect_unwritten("update_at_ of slice 0:3");
}

TEST_P(RaggedLazyStack, TensorValueThatNoMemberTakesWritesNothing) {
  // Rows of [2] fit member 1's a but no member's b ([5]).
  TD_EXPECT_THROW_MSG(store_.index_put_({Slice(1, 4)}, torch::ones({3, 2})), td::ShapeError);
  expect_unwritten("slice 1:4 = ones(3, 2)");
  TD_EXPECT_THROW_MSG(store_.index_put_({1}, torch::ones({2})), td::ShapeError);
  expect_unwritten("integer index 1 = ones(2)");
  if (!GetParam().ragged_writes) {
    // Declared gap: the scalar is expanded to member 0's shapes.
    TD_EXPECT_THROW_MSG(store_.index_put_({Slice(0, 4, 3)}, torch::tensor(4.0)), td::ShapeError,
                        "'a'");
    expect_unwritten("a scalar across ragged members refused");
    return;
  }
  // A value every leaf of every member takes (one element) reaches them all.
  store_.index_put_({Slice(0, 4, 3)}, torch::tensor(4.0));
  EXPECT_TRUE(torch::equal(store_[3].get("a"), torch::full({4}, 4.0)));
  EXPECT_TRUE(torch::equal(store_[0].get("b"), torch::full({5}, 4, torch::kLong)));
  expect_same(store_[1], before_[1], "member 1 (not indexed)");
}

INSTANTIATE_TEST_SUITE_P(Storages, RaggedLazyStack, ::testing::ValuesIn(ragged_storages()),
                         storage_name);

// A tensor value that fits members 0..k-1 and not member k: the members
// below hold a of [2], [2], [3], [2] (and c of [2] each).
TEST(RaggedLazyStackTensorValue, RefusedByALaterMemberWritesNoMember) {
  std::vector<td::TensorDictBase> members;
  for (int64_t n : {2, 2, 3, 2})
    members.push_back(td::TensorDict(
        {{"a", torch::full({n}, static_cast<double>(n))}, {"c", torch::zeros({2}, torch::kInt)}},
        {}));
  td::TensorDictBase stack = td::lazy_stack(members);
  std::vector<td::TensorDictBase> before;
  for (int64_t i = 0; i < 4; ++i) before.push_back(stack[i].clone());
  auto expect_unwritten = [&](const std::string& what) {
    for (int64_t i = 0; i < 4; ++i)
      expect_same(stack[i], before[i], what + ", member " + std::to_string(i));
  };
  TD_EXPECT_THROW_MSG(stack.index_put_({Slice(0, 3)}, torch::ones({3, 2})), td::ShapeError, "'a'");
  expect_unwritten("slice 0:3");
  TD_EXPECT_THROW_MSG(stack.index_put_({Slice(0, 4, 2)}, torch::ones({2, 2})), td::ShapeError,
                      "'a'");
  expect_unwritten("slice 0:4:2");
  TD_EXPECT_THROW_MSG(
      stack.index_put_({torch::tensor({3, 1, 2}, torch::kLong)}, torch::ones({3, 2})),
      td::ShapeError, "'a'");
  expect_unwritten("long index [3, 1, 2]");
  TD_EXPECT_THROW_MSG(stack.index_put_({2}, torch::ones({2})), td::ShapeError, "'a'");
  expect_unwritten("integer index 2");
  // The fitting writes reach their members.
  stack.index_put_({torch::tensor({3, 0}, torch::kLong)}, torch::tensor({{5.0, 6.0}, {7.0, 8.0}}));
  EXPECT_TRUE(torch::equal(stack[3].get("a"), torch::tensor({5.0, 6.0})));
  EXPECT_TRUE(torch::equal(stack[0].get("c"), torch::tensor({7, 8}, torch::kInt)));
  expect_same(stack[1], before[1], "member 1 (not indexed)");
  // Each member takes the value broadcast to its own shapes, not member 0's.
  td::TensorDictBase a_only = td::lazy_stack({td::TensorDict({{"a", torch::zeros({2})}}, {}),
                                              td::TensorDict({{"a", torch::zeros({3})}}, {}),
                                              td::TensorDict({{"a", torch::zeros({3})}}, {})});
  a_only.index_put_({Slice(1, 3)}, torch::full({2, 3}, 9.0));
  EXPECT_TRUE(torch::equal(a_only[2].get("a"), torch::full({3}, 9.0)));
  EXPECT_TRUE(torch::equal(a_only[0].get("a"), torch::zeros({2})));
  stack.index_put_({torch::tensor({1, 2}, torch::kLong)}, torch::tensor({{1.0}, {2.0}}));
  EXPECT_TRUE(torch::equal(stack[1].get("a"), torch::full({2}, 1.0)));
  EXPECT_TRUE(torch::equal(stack[2].get("a"), torch::full({3}, 2.0)));
  EXPECT_TRUE(torch::equal(stack[2].get("c"), torch::full({2}, 2, torch::kInt)));
}

}  // namespace
}  // namespace conformance
