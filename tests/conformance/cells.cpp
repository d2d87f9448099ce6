// The cells: one function template per operation (column), run for both
// wrappers (TensorClass, TypedTensorDict) on every storage the suite is
// instantiated with. What each column checks is listed in
// docs/compatibility.md; a cell that passes with a caveat records it
// (record_cell("`set_()`")) and the matrix shows that text instead of "yes".
#include "conformance.h"

#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>

#include <algorithm>
#include <type_traits>

namespace conformance {

using td_test::Snapshot;
using torch::indexing::Slice;

td::TensorDict sample(int64_t offset) {
  return td::TensorDict(
      {{"a", torch::arange(12, torch::kFloat).reshape({kN, 3}) + static_cast<double>(offset)},
       {"b", torch::arange(20, torch::kLong).reshape({kN, 5}) + (100 + offset)}},
      {kN});
}

Scratch::~Scratch() {
  for (const auto& name : shared_) {
    try {
      td::unlink_shared(name);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cannot unlink shared memory " << name << ": " << e.what();
    }
  }
}

std::string Scratch::new_path(const std::string& stem) {
  if (!dir_) dir_ = std::make_unique<td_test::TempDir>("td_conformance");
  return dir_->str(stem + "_" + std::to_string(counter_++));
}

void Scratch::unlink_at_exit(std::string shared_name) {
  if (!shared_name.empty()) shared_.push_back(std::move(shared_name));
}

void Conformance::SetUp() {
  RecordProperty(kStorageProperty, GetParam().label);
  RecordProperty(kRankProperty, GetParam().rank);
}

namespace {

// ---- the two wrappers behind one interface ------------------------------------------------

template <class W>
constexpr bool kIsTypedTensorDict = std::is_base_of_v<td::TensorDictBase, W>;

/// The storage a wrapper reads and writes (TensorClass HAS-A it, TypedTensorDict IS-A).
const td::TensorDictBase& storage_of(const MyTC& w) { return w.tensordict(); }
const td::TensorDictBase& storage_of(const MyTTD& w) { return w; }

/// W::from_tensordict(t): TypedTensorDict checks the required fields unless
/// check=false; TensorClass (as Python) always accepts missing fields.
template <class W>
W wrap(const td::TensorDictBase& t, bool check = true) {
  if constexpr (kIsTypedTensorDict<W>)
    return W::from_tensordict(t, check);
  else
    return W::from_tensordict(t);
}

/// One row (batch []) built with the wrapper's constructor.
template <class W>
W make_row(int64_t i) {
  return W(
      {{"a", torch::full({3}, static_cast<double>(i))}, {"b", torch::full({5}, i, torch::kLong)}},
      {});
}

/// The top-level keys, sorted.
std::vector<std::string> sorted_keys(const td::TensorDictBase& t) {
  std::vector<std::string> out;
  for (const auto& k : t.keys()) out.push_back(k.front());
  std::sort(out.begin(), out.end());
  return out;
}

/// Same shape, dtype and values.
::testing::AssertionResult same_tensor(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure()
           << "shape " << got.sizes() << ", expected " << want.sizes();
  if (got.scalar_type() != want.scalar_type())
    return ::testing::AssertionFailure()
           << "dtype " << got.scalar_type() << ", expected " << want.scalar_type();
  if (!at::equal(got, want))
    return ::testing::AssertionFailure() << "values\n" << got << "\nexpected\n" << want;
  return ::testing::AssertionSuccess();
}

at::Tensor full_a(double v) { return torch::full({kN, 3}, v); }
at::Tensor full_b(int64_t v) { return torch::full({kN, 5}, v, torch::kLong); }

/// The matrix shows `text` for this cell when the test passes (default "yes").
void record_cell(const std::string& text) { ::testing::Test::RecordProperty(kCellProperty, text); }

// ---- Build: from_tensordict wraps the storage live -----------------------------------------

template <class W>
void build_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict data = sample();
  td::TensorDictBase backend = s.make(data, scratch);
  W w = wrap<W>(backend);
  EXPECT_TRUE(storage_of(w).is_same(backend)) << "from_tensordict copied the storage";
  EXPECT_EQ(w.batch_size().vec(), Shape{kN});

  // A write through the wrapper reaches the storage (in place: every storage
  // allows it), seen through a second handle too.
  w.set_a_(full_a(7));
  EXPECT_TRUE(same_tensor(backend.get("a"), full_a(7)));
  EXPECT_TRUE(same_tensor(s.reopened(backend).get("a"), full_a(7)));
  // And the reverse: the wrapper reads the storage, it caches nothing.
  backend.set_("b", full_b(9));
  EXPECT_TRUE(same_tensor(w.b(), full_b(9)));
  if (!s.writes_in_place_only) {
    backend.set("b", full_b(11));  // replaces the entry
    EXPECT_TRUE(same_tensor(w.b(), full_b(11)));
  }

  // A partly filled storage: TypedTensorDict's check names the missing field,
  // check=false (and TensorClass, as Python) wrap it; the field fails when read.
  td::TensorDictBase partial = s.make(data.exclude({"b"}), scratch);
  if constexpr (kIsTypedTensorDict<W>)
    TD_EXPECT_THROW_MSG(W::from_tensordict(partial), td::SchemaError,
                        "from_tensordict() missing required field(s): b");
  W pw = wrap<W>(partial, /*check=*/false);
  EXPECT_TRUE(same_tensor(pw.a(), data.get("a")));
  TD_EXPECT_THROW_MSG(pw.b(), td::SchemaError, "has field 'b' declared but not set");

  // An empty storage wrapped with check=false and filled row by row
  // (index_put_ pre-allocates); a locked storage refuses new keys.
  td::TensorDictBase empty = s.make(td::TensorDict(Shape{kN}), scratch);
  W ew = wrap<W>(empty, /*check=*/false);
  EXPECT_TRUE(storage_of(ew).is_same(empty));
  if (s.writes_in_place_only) {
    TD_EXPECT_THROW_MSG(ew.index_put_({0}, make_row<W>(0)), td::LockedError, "locked");
    EXPECT_EQ(empty.num_keys(), 0u) << "a refused write left keys behind";
  } else {
    for (int64_t i = 0; i < kN; ++i) ew.index_put_({i}, make_row<W>(i));
    EXPECT_TRUE(
        same_tensor(empty.get("a"),
                    torch::arange(kN, torch::kFloat).unsqueeze(1).expand({kN, 3}).contiguous()));
    EXPECT_TRUE(same_tensor(
        ew.b(), torch::arange(kN, torch::kLong).unsqueeze(1).expand({kN, 5}).contiguous()));
  }
}

// ---- Read: the typed accessors return the storage's values -----------------------------------

template <class W>
void read_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict data = sample();
  td::TensorDictBase backend = s.make(data, scratch);
  const W w = wrap<W>(backend);
  EXPECT_TRUE(same_tensor(w.a(), data.get("a")));
  EXPECT_TRUE(same_tensor(w.b(), data.get("b")));
  EXPECT_TRUE(same_tensor(w.a(), backend.get("a")));
  EXPECT_EQ(w.is_memmap(), s.memmap);
  EXPECT_EQ(w.is_shared(), s.shared);
  EXPECT_EQ(w.is_locked(), s.writes_in_place_only);
}

// ---- Write: the typed setters --------------------------------------------------------------

template <class W>
void write_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict data = sample();
  td::TensorDictBase backend = s.make(data, scratch);
  W w = wrap<W>(backend);
  if (s.writes_in_place_only) {
    // The plain setter is a clear error and changes nothing ...
    const Snapshot before = Snapshot::of(backend);
    TD_EXPECT_THROW_MSG(w.set_a(full_a(-1)), td::LockedError, "Cannot modify locked TensorDict",
                        "set_()", "'a'");
    before.expect_unchanged(backend);
    // ... the in-place one writes the storage itself.
    w.set_a_(full_a(-1));
    EXPECT_TRUE(same_tensor(w.a(), full_a(-1)));
    EXPECT_TRUE(same_tensor(s.reopened(backend).get("a"), full_a(-1)));
    record_cell("`set_()`");
  } else {
    w.set_a(full_a(-1));
    EXPECT_TRUE(same_tensor(w.a(), full_a(-1)));
    EXPECT_TRUE(same_tensor(backend.get("a"), full_a(-1)));
    EXPECT_TRUE(same_tensor(s.reopened(backend).get("a"), full_a(-1)));
  }
  // In place keeps the stored dtype (a float value cast into the int64 field).
  w.set_b_(torch::full({kN, 5}, 2.0));
  EXPECT_TRUE(same_tensor(w.b(), full_b(2)));
  EXPECT_TRUE(same_tensor(s.reopened(backend).get("b"), full_b(2)));
}

// ---- Index: w[i], slices and long indices keep the type --------------------------------------

template <class W>
void index_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict data = sample();
  td::TensorDictBase backend = s.make(data, scratch);
  const W w = wrap<W>(backend);
  static_assert(std::is_same_v<decltype(w[0]), W>);
  static_assert(std::is_same_v<decltype(w.index({Slice()})), W>);

  W row = w[2];
  EXPECT_EQ(row.batch_size().vec(), Shape{});
  EXPECT_TRUE(same_tensor(row.a(), data.get("a")[2]));
  EXPECT_TRUE(same_tensor(row.b(), data.get("b")[2]));
  EXPECT_TRUE(same_tensor(w[-1].a(), data.get("a")[3]));
  W mid = w.index({Slice(1, 3)});
  EXPECT_EQ(mid.batch_size().vec(), Shape{2});
  EXPECT_TRUE(same_tensor(mid.a(), data.get("a").slice(0, 1, 3)));
  EXPECT_TRUE(same_tensor(mid.b(), data.get("b").slice(0, 1, 3)));
  const at::Tensor picks = torch::tensor({3, 0}, torch::kLong);
  W picked = w.index({picks});
  EXPECT_EQ(picked.batch_size().vec(), Shape{2});
  EXPECT_TRUE(same_tensor(picked.a(), data.get("a").index_select(0, picks)));
  EXPECT_TRUE(same_tensor(picked.b(), data.get("b").index_select(0, picks)));
  const at::Tensor mask = torch::tensor({true, false, true, false});
  EXPECT_TRUE(same_tensor(w.index({mask}).a(), data.get("a").index({mask})));

  if (s.index_is_live) {
    // Rows and slices are views of the storage: writes through them land there.
    row.set_a_(torch::full({3}, 5.0));
    mid.set_b_(torch::full({2, 5}, -7, torch::kLong));
    at::Tensor want_a = data.get("a").clone(), want_b = data.get("b").clone();
    want_a[2].fill_(5.0);
    want_b.slice(0, 1, 3).fill_(-7);
    EXPECT_TRUE(same_tensor(s.reopened(backend).get("a"), want_a));
    EXPECT_TRUE(same_tensor(s.reopened(backend).get("b"), want_b));
  }

  if (s.make_ragged) {
    // Rows of different shapes stay as they are (Python's lazy stack of
    // heterogeneous members): per row, per slice, but not as a whole.
    const W ragged = wrap<W>(s.make_ragged(scratch));
    for (int64_t i = 0; i < kN; ++i)
      EXPECT_EQ(ragged[i].a().sizes(), (at::IntArrayRef{i + 1})) << "row " << i;
    W part = ragged.index({Slice(1, 3)});
    EXPECT_EQ(part.batch_size().vec(), Shape{2});
    EXPECT_EQ(part[1].a().sizes(), (at::IntArrayRef{3}));
    EXPECT_TRUE(same_tensor(
        part.b(), torch::tensor({1, 2}, torch::kLong).unsqueeze(1).expand({2, 5}).contiguous()));
    TD_EXPECT_THROW_MSG(ragged.a(), td::ShapeError, "'a'");
  }
}

// ---- Clone: an independent copy of the wrapper type ---------------------------------------------

template <class W>
void clone_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict data = sample();
  td::TensorDictBase backend = s.make(data, scratch);
  W w = wrap<W>(backend);
  W c = w.clone();
  static_assert(std::is_same_v<decltype(w.clone()), W>);
  EXPECT_FALSE(storage_of(c).is_same(backend));
  EXPECT_TRUE(same_tensor(c.a(), data.get("a")));
  EXPECT_TRUE(same_tensor(c.b(), data.get("b")));
  // An ordinary, unlocked copy in memory, whatever the storage ...
  EXPECT_FALSE(c.is_locked());
  EXPECT_FALSE(c.is_memmap());
  EXPECT_FALSE(c.is_shared());
  EXPECT_FALSE(td::MemoryMappedTensor::is_memory_mapped(c.a()));
  // ... that keeps the storage's structure (a lazy stack stays one) ...
  EXPECT_EQ(storage_of(c).template is<td::LazyStackedTensorDict>(),
            backend.is<td::LazyStackedTensorDict>());
  // ... and shares nothing with it, either way.
  c.set_a(full_a(0));
  EXPECT_TRUE(same_tensor(s.reopened(backend).get("a"), data.get("a")));
  w.set_b_(full_b(-3));
  EXPECT_TRUE(same_tensor(c.b(), data.get("b")));
}

// ---- Stack: dense and lazy stacks of wrappers are wrappers --------------------------------------

template <class W>
void stack_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict d0 = sample(0), d1 = sample(1000);
  W w0 = wrap<W>(s.make(d0, scratch));
  W w1 = wrap<W>(s.make(d1, scratch));
  static_assert(std::is_same_v<decltype(W::stack({w0, w1})), W>);
  static_assert(std::is_same_v<decltype(W::lazy_stack({w0, w1})), W>);

  W dense = W::stack({w0, w1});
  EXPECT_EQ(dense.batch_size().vec(), (Shape{2, kN}));
  EXPECT_TRUE(same_tensor(dense.a(), torch::stack({d0.get("a"), d1.get("a")})));
  EXPECT_TRUE(same_tensor(dense[1].b(), d1.get("b")));
  EXPECT_EQ(W::stack({w0, w1}, 1).batch_size().vec(), (Shape{kN, 2}));
  W cat = W::cat({w0, w1});
  EXPECT_EQ(cat.batch_size().vec(), Shape{2 * kN});
  EXPECT_TRUE(same_tensor(cat.b(), torch::cat({d0.get("b"), d1.get("b")})));

  W lazy = W::lazy_stack({w0, w1});
  EXPECT_TRUE(storage_of(lazy).template is<td::LazyStackedTensorDict>());
  EXPECT_EQ(lazy.batch_size().vec(), (Shape{2, kN}));
  EXPECT_TRUE(same_tensor(lazy.a(), torch::stack({d0.get("a"), d1.get("a")})));
  // Its members are the stacked wrappers' storages, live.
  EXPECT_TRUE(storage_of(lazy[1]).is_same(storage_of(w1)));
  lazy.set_b_(torch::stack({full_b(-1), full_b(-2)}));
  EXPECT_TRUE(same_tensor(w0.b(), full_b(-1)));
  EXPECT_TRUE(same_tensor(w1.b(), full_b(-2)));

  if (s.make_ragged) {
    // Rows of different shapes: a lazy stack keeps them, a dense one refuses them.
    const W ragged = wrap<W>(s.make_ragged(scratch));
    W nested = W::lazy_stack({ragged, ragged});
    EXPECT_EQ(nested.batch_size().vec(), (Shape{2, kN}));
    EXPECT_EQ(nested[1][2].a().sizes(), (at::IntArrayRef{3}));
    TD_EXPECT_THROW_MSG(W::stack({ragged, ragged}), td::ShapeError, "'a'");
  }
}

// ---- Iter: over the first batch dim (unbind, split, chunk) and over the keys --------------------

template <class W>
void iter_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict data = sample();
  td::TensorDictBase backend = s.make(data, scratch);
  const W w = wrap<W>(backend);
  std::vector<W> rows = w.unbind(0);
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_EQ(rows[i].batch_size().vec(), Shape{});
    EXPECT_TRUE(same_tensor(rows[i].a(), data.get("a")[i])) << "row " << i;
    EXPECT_TRUE(same_tensor(rows[i].b(), data.get("b")[i])) << "row " << i;
  }
  std::vector<W> parts = w.split(3);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].batch_size().vec(), Shape{1});
  EXPECT_TRUE(same_tensor(parts[1].a(), data.get("a").slice(0, 3)));
  std::vector<W> halves = w.chunk(2);
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_TRUE(same_tensor(halves[1].b(), data.get("b").slice(0, 2)));
  EXPECT_EQ(sorted_keys(storage_of(w)), (std::vector<std::string>{"a", "b"}));
  if (s.make_ragged) {
    const W ragged = wrap<W>(s.make_ragged(scratch));
    std::vector<W> ragged_rows = ragged.unbind(0);
    ASSERT_EQ(ragged_rows.size(), static_cast<std::size_t>(kN));
    for (int64_t i = 0; i < kN; ++i)
      EXPECT_EQ(ragged_rows[i].a().sizes(), (at::IntArrayRef{i + 1})) << "row " << i;
  }
}

// ---- Update: from a tensordict ------------------------------------------------------------------

template <class W>
void update_cell(const StorageCase& s, Scratch& scratch) {
  const td::TensorDict data = sample();
  td::TensorDictBase backend = s.make(data, scratch);
  W w = wrap<W>(backend);
  const td::TensorDict src({{"a", full_a(-2)}}, {kN});
  // update_: in place, on every storage.
  w.update_(src);
  EXPECT_TRUE(same_tensor(w.a(), full_a(-2)));
  EXPECT_TRUE(same_tensor(s.reopened(backend).get("a"), full_a(-2)));
  EXPECT_TRUE(same_tensor(w.b(), data.get("b")));

  // update: replaces and adds entries.
  const td::TensorDict more({{"a", full_a(3)}, {"c", torch::zeros({kN})}}, {kN});
  auto update = [&] { w.update(more); };
  if (s.writes_in_place_only) {
    const Snapshot before = Snapshot::of(backend);
    TD_EXPECT_THROW_MSG(update(), td::LockedError, "Cannot modify locked TensorDict");
    before.expect_unchanged(backend);
  } else {
    update();
    EXPECT_TRUE(same_tensor(w.a(), full_a(3)));
    EXPECT_TRUE(same_tensor(backend.get("a"), full_a(3)));
    EXPECT_TRUE(backend.contains("c"));
  }
  if (s.writes_in_place_only) record_cell("`update_()`");
}

}  // namespace

// One test per (wrapper, operation); the instantiations in storages.cpp add the storage.
#define CONFORMANCE_CELLS(Op, cell)                                           \
  TEST_P(Conformance, TensorClass_##Op) { cell<MyTC>(GetParam(), scratch_); } \
  TEST_P(Conformance, TypedTensorDict_##Op) { cell<MyTTD>(GetParam(), scratch_); }

CONFORMANCE_CELLS(Build, build_cell)
CONFORMANCE_CELLS(Read, read_cell)
CONFORMANCE_CELLS(Write, write_cell)
CONFORMANCE_CELLS(Index, index_cell)
CONFORMANCE_CELLS(Clone, clone_cell)
CONFORMANCE_CELLS(Stack, stack_cell)
CONFORMANCE_CELLS(Iter, iter_cell)
CONFORMANCE_CELLS(Update, update_cell)

#undef CONFORMANCE_CELLS

}  // namespace conformance
