// TypedTensorDict: field declaration and inheritance, construction checks,
// typed accessors, live wrapping of every core storage (in memory, memmap,
// shared memory, lazy stacks, another typed wrapper), operations and stacks
// that keep the type, from_schema.
#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

#include <tensordict/typed_tensor_dict.h>

#include <filesystem>
#include <type_traits>

using namespace td_test;
using torch::indexing::Slice;
namespace fs = std::filesystem;

namespace {

struct Replay : td::TypedTensorDict<Replay> {
  TENSORDICT_FIELDS(obs, action, reward);
};

// Inheritance adds fields; an optional one may be absent.
struct ReplayWithInfo : td::TypedTensorDict<ReplayWithInfo, Replay> {
  TENSORDICT_FIELDS(info);
  TENSORDICT_OPTIONAL_FIELDS(mask);
};

// Three levels; a level may add only optional fields.
struct ReplayWithInfoAndNotes : td::TypedTensorDict<ReplayWithInfoAndNotes, ReplayWithInfo> {
  TENSORDICT_FIELDS();
  TENSORDICT_OPTIONAL_FIELDS(notes);
};

// Another class with the same fields, to wrap a Replay.
struct Sample : td::TypedTensorDict<Sample> {
  TENSORDICT_FIELDS(obs, reward);
};

// A nested level with fields of its own (Python: `next: NextState`).
struct NextState : td::TypedTensorDict<NextState> {
  TENSORDICT_FIELDS(obs);
  TENSORDICT_OPTIONAL_FIELDS(info);
};
struct Step : td::TypedTensorDict<Step> {
  TENSORDICT_FIELDS(obs, reward);
  TENSORDICT_NESTED_FIELDS((NextState, next));
};
static_assert(std::is_same_v<decltype(std::declval<Step>().next()), NextState>);

const Shape kB{4};

td::TensorDict replay_td() {
  return td::TensorDict({{"obs", torch::arange(12, torch::kFloat).reshape({4, 3})},
                         {"action", torch::arange(8, torch::kFloat).reshape({4, 2})},
                         {"reward", torch::arange(4, torch::kFloat)}},
                        kB);
}

Replay make_replay(double offset = 0) {
  return Replay({{"obs", torch::arange(12, torch::kFloat).reshape({4, 3}) + offset},
                 {"action", torch::arange(8, torch::kFloat).reshape({4, 2}) + offset},
                 {"reward", torch::arange(4, torch::kFloat) + offset}},
                kB);
}

// Ops return the derived type itself, not a TensorDictBase.
static_assert(std::is_same_v<decltype(std::declval<Replay>()[0]), Replay>);
static_assert(std::is_same_v<decltype(std::declval<Replay>().clone()), Replay>);
static_assert(std::is_same_v<decltype(std::declval<ReplayWithInfo>().clone()), ReplayWithInfo>);
static_assert(std::is_same_v<decltype(Replay::stack({})), Replay>);
static_assert(std::is_same_v<decltype(std::declval<Replay&>().share_memory_()), Replay&>);
static_assert(std::is_base_of_v<td::TensorDictBase, Replay>);
static_assert(std::is_base_of_v<Replay, ReplayWithInfo>);
static_assert(sizeof(Replay) == sizeof(td::TensorDictBase));

}  // namespace

// ---- fields -----------------------------------------------------------------------

TEST(TypedFields, TableAndInheritance) {
  EXPECT_EQ(Replay::field_names(), (std::vector<std::string>{"obs", "action", "reward"}));
  EXPECT_EQ(Replay::optional_field_names(), std::vector<std::string>{});
  EXPECT_EQ(ReplayWithInfo::field_names(),
            (std::vector<std::string>{"obs", "action", "reward", "info", "mask"}));
  EXPECT_EQ(ReplayWithInfo::required_field_names(),
            (std::vector<std::string>{"obs", "action", "reward", "info"}));
  EXPECT_EQ(ReplayWithInfo::optional_field_names(), std::vector<std::string>{"mask"});
  EXPECT_EQ(ReplayWithInfoAndNotes::field_names(),
            (std::vector<std::string>{"obs", "action", "reward", "info", "mask", "notes"}));
  auto f = ReplayWithInfo::fields();
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[4].name, "mask");
  EXPECT_FALSE(f[4].required);
  EXPECT_EQ(f[0].kind, td::FieldKind::Tensor);
  // The table is a compile-time constant.
  static_assert(Replay::td_all_fields_().size() == 3);
  static_assert(Replay::td_all_fields_()[1].name == "action");
  EXPECT_STREQ(Replay::static_type_name(), "Replay");
  EXPECT_STREQ(ReplayWithInfo::static_type_name(), "ReplayWithInfo");
}

// ---- construction -------------------------------------------------------------------

TEST(TypedConstruction, BuildsAnInMemoryTensorDict) {
  Replay r = make_replay();
  EXPECT_TRUE(r.is<td::TensorDict>());
  EXPECT_EQ(batch_of(r), kB);
  EXPECT_EQ(r.keys().size(), 3u);
  EXPECT_TRUE(at::equal(r.reward(), torch::arange(4, torch::kFloat)));
  Replay on_cpu(
      {{"obs", torch::zeros({2})}, {"action", torch::zeros({2})}, {"reward", torch::zeros({2})}},
      {2}, at::Device(at::kCPU));
  EXPECT_EQ(on_cpu.device(), at::Device(at::kCPU));
  std::vector<td::TensorDict::Item> items = {
      {"obs", torch::zeros({2})}, {"action", torch::zeros({2})}, {"reward", torch::zeros({2})}};
  EXPECT_EQ(batch_of(Replay(items, {2})), Shape{2});
  // A default-constructed wrapper is a null handle.
  EXPECT_FALSE(Replay().defined());
}

TEST(TypedConstruction, MissingAndUnexpectedFields) {
  TD_EXPECT_THROW_MSG(Replay({{"obs", torch::zeros({4})}}, kB), td::SchemaError,
                      "Replay() missing required field(s): action, reward");
  TD_EXPECT_THROW_MSG(Replay({{"obs", torch::zeros({4})},
                              {"action", torch::zeros({4})},
                              {"reward", torch::zeros({4})},
                              {"zeta", torch::zeros({4})},
                              {"alpha", torch::zeros({4})}},
                             kB),
                      td::SchemaError, "Replay() got unexpected field(s): alpha, zeta");
  // Inherited required fields are required too; optional ones are not.
  TD_EXPECT_THROW_MSG(ReplayWithInfo({{"obs", torch::zeros({4})},
                                      {"action", torch::zeros({4})},
                                      {"reward", torch::zeros({4})}},
                                     kB),
                      td::SchemaError, "ReplayWithInfo() missing required field(s): info");
  // TensorDict's own checks still apply after the field checks.
  TD_EXPECT_THROW_MSG(Replay({{"obs", torch::zeros({3})},
                              {"action", torch::zeros({4})},
                              {"reward", torch::zeros({4})}},
                             kB),
                      td::ShapeError, "obs");
}

TEST(TypedConstruction, NestedKeyCountsAsItsFirstLevel) {
  Replay r({{{"obs", "pixels"}, torch::zeros({4, 2})},
            {"action", torch::zeros({4})},
            {"reward", torch::zeros({4})}},
           kB);
  EXPECT_TRUE(r.get_tensordict("obs").contains("pixels"));
  TD_EXPECT_THROW_MSG(r.obs(), td::TypeError, "obs");  // a tensordict, not a tensor
}

// ---- accessors -----------------------------------------------------------------------

TEST(TypedAccess, ReadWriteInPlace) {
  Replay r = make_replay();
  EXPECT_TRUE(r.obs().is_same(r.get("obs")));  // the stored tensor, no copy
  at::Tensor ones = torch::ones({4});
  r.set_reward(ones).set_action(torch::zeros({4, 5}));  // setters chain
  EXPECT_TRUE(r.reward().is_same(ones));
  EXPECT_EQ(r.action().sizes(), (at::IntArrayRef{4, 5}));
  at::Tensor before = r.obs();
  r.set_obs_(torch::full({4, 3}, 7.0));  // copies into the existing tensor
  EXPECT_TRUE(r.obs().is_same(before));
  EXPECT_TRUE(at::equal(before, torch::full({4, 3}, 7.0f)));
  // Untyped access and undeclared keys still work (Python does not enforce
  // the schema after construction).
  r.set("extra", torch::zeros({4}));
  EXPECT_TRUE(r.contains("extra"));
  TD_EXPECT_THROW_MSG(r.set_reward(torch::zeros({3})), td::ShapeError, "reward");
}

TEST(TypedAccess, DeclaredButNotSet) {
  ReplayWithInfo w({{"obs", torch::zeros({4})},
                    {"action", torch::zeros({4})},
                    {"reward", torch::zeros({4})},
                    {"info", torch::zeros({4})}},
                   kB);
  TD_EXPECT_THROW_MSG(w.mask(), td::SchemaError,
                      "'ReplayWithInfo' has field 'mask' declared but not set");
  w.set_mask(torch::ones({4}, torch::kBool));
  EXPECT_TRUE(w.mask().all().item<bool>());
  auto partial = Replay::from_tensordict(td::TensorDict({{"obs", torch::zeros({4})}}, kB),
                                         /*check=*/false);
  TD_EXPECT_THROW_MSG(partial.reward(), td::SchemaError,
                      "'Replay' has field 'reward' declared but not set");
  // In-place writes need the key.
  TD_EXPECT_THROW_MSG(partial.set_reward_(torch::zeros({4})), td::KeyError, "reward");
}

// ---- wrapping ---------------------------------------------------------------------------

TEST(TypedWrap, InMemoryIsLive) {
  td::TensorDict t = replay_td();
  Replay r = Replay::from_tensordict(t);
  EXPECT_TRUE(r.is_same(t));  // the same storage, no copy
  EXPECT_TRUE(r.obs().is_same(t.get("obs")));
  r.set_reward(torch::full({4}, 5.0));
  EXPECT_TRUE(at::equal(t.get("reward"), torch::full({4}, 5.0f)));
  t.set("obs", torch::zeros({4, 3}));
  EXPECT_TRUE(at::equal(r.obs(), torch::zeros({4, 3})));
  // Copies are handles too.
  Replay copy = r;
  copy.set_action(torch::ones({4, 2}));
  EXPECT_TRUE(at::equal(t.get("action"), torch::ones({4, 2})));
  // Extra keys are kept and visible.
  t.set("extra", torch::zeros({4}));
  EXPECT_TRUE(Replay::from_tensordict(t).contains("extra"));
}

TEST(TypedWrap, CheckAndEmptyBackends) {
  TD_EXPECT_THROW_MSG(Replay::from_tensordict(td::TensorDict({{"obs", torch::zeros({4})}}, kB)),
                      td::SchemaError,
                      "Replay.from_tensordict() missing required field(s): action, reward");
  TD_EXPECT_THROW_MSG(Replay::from_tensordict(td::TensorDictBase()), td::ValueError, "null");
  // check=false wraps an empty buffer; index_put_ of typed rows pre-allocates.
  td::TensorDict empty(Shape{3});
  Replay buffer = Replay::from_tensordict(empty, /*check=*/false);
  for (int64_t i = 0; i < 3; ++i) {
    Replay row({{"obs", torch::full({3}, static_cast<double>(i))},
                {"action", torch::full({2}, static_cast<double>(i))},
                {"reward", torch::full({}, static_cast<double>(i))}},
               {});
    buffer.index_put_({i}, row);
  }
  EXPECT_TRUE(at::equal(buffer.reward(), torch::arange(3, torch::kFloat)));
  EXPECT_EQ(buffer.obs().sizes(), (at::IntArrayRef{3, 3}));
  EXPECT_TRUE(empty.contains("obs"));  // written into the wrapped storage
}

TEST(TypedWrap, IsAndAsTestTheSchema) {
  td::TensorDictBase t = replay_td();
  EXPECT_TRUE(t.is<Replay>());
  EXPECT_TRUE(t.is<Sample>());
  EXPECT_FALSE(t.is<ReplayWithInfo>());
  Replay r = t.as<Replay>();
  EXPECT_TRUE(r.is_same(t));
  TD_EXPECT_THROW_MSG(t.as<ReplayWithInfo>(), td::TypeError,
                      "cannot view a TensorDict as ReplayWithInfo");
  EXPECT_FALSE(td::TensorDictBase().is<Replay>());
}

TEST(TypedWrap, Memmap) {
  TempDir dir;
  td::TensorDictBase mapped = replay_td().memmap(dir.str());
  Replay r = Replay::from_tensordict(mapped);
  EXPECT_TRUE(r.is_memmap());
  EXPECT_TRUE(r.is_locked());
  EXPECT_TRUE(at::equal(r.obs(), torch::arange(12, torch::kFloat).reshape({4, 3})));
  // Locked: replacing entries is refused, in-place writes reach the files.
  TD_EXPECT_THROW_MSG(r.set_reward(torch::zeros({4})), td::LockedError, "reward");
  r.set_reward_(torch::full({4}, 2.0));
  r.update_(td::TensorDict({{"action", torch::full({4, 2}, 3.0)}}, kB));
  r.index_put_({0}, td::TensorDict({{"obs", torch::full({3}, -1.0)}}, {}));
  Replay back = Replay::load_memmap(dir.str());
  EXPECT_TRUE(at::equal(back.reward(), torch::full({4}, 2.0f)));
  EXPECT_TRUE(at::equal(back.action(), torch::full({4, 2}, 3.0f)));
  EXPECT_TRUE(at::equal(back.obs()[0], torch::full({3}, -1.0f)));
  // memmap() of a typed wrapper keeps the type.
  Replay saved = make_replay().memmap(dir.str("copy"));
  EXPECT_TRUE(saved.is_memmap());
  EXPECT_TRUE(at::equal(saved.reward(), torch::arange(4, torch::kFloat)));
  TD_EXPECT_THROW_MSG(ReplayWithInfo::load_memmap(dir.str("copy")), td::SchemaError, "info");
}

TEST(TypedWrap, SharedMemory) {
  Replay shared = make_replay().clone().share_memory_();
  const std::string name = shared.shared_name();
  ASSERT_FALSE(name.empty());
  EXPECT_TRUE(shared.is_shared());
  shared.set_reward_(torch::full({4}, 9.0));
  Replay attached = Replay::from_tensordict(td::attach_shared(name));
  EXPECT_TRUE(at::equal(attached.reward(), torch::full({4}, 9.0f)));
  attached.set_obs_(torch::zeros({4, 3}));
  EXPECT_TRUE(at::equal(shared.obs(), torch::zeros({4, 3})));
  TD_EXPECT_THROW_MSG(shared.set_obs(torch::zeros({4, 3})), td::LockedError, "obs");
  td::unlink_shared(name);
}

TEST(TypedWrap, LazyStack) {
  td::TensorDict a({{"obs", torch::zeros({3})},
                    {"action", torch::zeros({2})},
                    {"reward", torch::zeros({})},
                    {"only_a", torch::zeros({})}},
                   {});
  td::TensorDict b(
      {{"obs", torch::ones({3})}, {"action", torch::ones({2})}, {"reward", torch::ones({})}}, {});
  auto ls = td::lazy_stack({a, b});
  Replay r = Replay::from_tensordict(ls);
  EXPECT_TRUE(r.is<td::LazyStackedTensorDict>());
  EXPECT_EQ(batch_of(r), Shape{2});
  EXPECT_TRUE(at::equal(r.reward(), torch::tensor({0.0f, 1.0f})));
  // Indexing a member gives the member itself, typed.
  Replay first = r[1];
  EXPECT_TRUE(first.is_same(b));
  EXPECT_EQ(first.obs().sizes(), (at::IntArrayRef{3}));
  first.set_reward(torch::full({}, 5.0));
  EXPECT_EQ(b.get("reward").item<float>(), 5.0f);
  // Writes through the stack reach the members.
  r.set_reward_(torch::tensor({7.0f, 8.0f}));
  EXPECT_EQ(a.get("reward").item<float>(), 7.0f);
  // A key some members lack is not a field of the stack.
  EXPECT_FALSE(r.contains("only_a"));
  // Replay::lazy_stack of typed members.
  Replay stacked = Replay::lazy_stack({make_replay(0), make_replay(10)}, 1);
  EXPECT_EQ(batch_of(stacked), (Shape{4, 2}));
  EXPECT_TRUE(at::equal(stacked.reward().select(1, 1), torch::arange(4, torch::kFloat) + 10));
}

TEST(TypedWrap, AnotherTypedWrapperAsBackend) {
  Replay r = make_replay();
  Sample s = Sample::from_tensordict(r);  // a Replay is a TensorDictBase
  EXPECT_TRUE(s.is_same(r));
  s.set_reward(torch::zeros({4}));
  EXPECT_TRUE(at::equal(r.reward(), torch::zeros({4})));
  EXPECT_TRUE(s.contains("action"));  // not a Sample field, still there
  Sample row = s[2];
  EXPECT_TRUE(at::equal(row.obs(), r.obs()[2]));
  // A derived class is its base.
  ReplayWithInfo w = ReplayWithInfo::from_tensordict(
      replay_td().set("info", torch::zeros({4})).set("mask", torch::ones({4})));
  Replay base = w;
  EXPECT_TRUE(base.is_same(w));
  EXPECT_EQ(w.mask().sum().item<float>(), 4.0f);
  ReplayWithInfo w0 = w[0];
  EXPECT_EQ(w0.info().dim(), 0);
  ReplayWithInfoAndNotes n = ReplayWithInfoAndNotes::from_tensordict(w);
  TD_EXPECT_THROW_MSG(n.notes(), td::SchemaError, "'ReplayWithInfoAndNotes'", "'notes'");
}

// ---- operations that keep the type ---------------------------------------------------------

TEST(TypedOps, IndexCloneToShape) {
  Replay r = make_replay();
  Replay row = r[1];
  EXPECT_EQ(batch_of(row), Shape{});
  EXPECT_TRUE(at::equal(row.obs(), r.obs()[1]));
  Replay part = r.index({Slice(1, 3)});
  EXPECT_EQ(batch_of(part), Shape{2});
  part.set_reward_(torch::full({2}, -1.0));  // a view: reaches r
  EXPECT_EQ(r.reward()[1].item<float>(), -1.0f);
  Replay c = r.clone();
  EXPECT_FALSE(c.is_same(r));
  c.set_reward_(torch::zeros({4}));
  EXPECT_NE(r.reward().sum().item<float>(), 0.0f);
  EXPECT_EQ(r.to(torch::kDouble).obs().scalar_type(), torch::kDouble);
  EXPECT_EQ(r.to(at::Device(at::kCPU)).device(), at::Device(at::kCPU));
  EXPECT_EQ(batch_of(r.reshape({2, 2})), (Shape{2, 2}));
  EXPECT_EQ(batch_of(r.unsqueeze(0)), (Shape{1, 4}));
  EXPECT_EQ(batch_of(r.unsqueeze(0).squeeze(0)), Shape{4});
  EXPECT_EQ(batch_of(r.expand({3, 4})), (Shape{3, 4}));
  EXPECT_EQ(batch_of(r.expand({3, 4}).permute({1, 0})), (Shape{4, 3}));
  EXPECT_EQ(batch_of(r.view({2, 2}).flatten()), Shape{4});
  EXPECT_EQ(batch_of(r.narrow(0, 1, 2)), Shape{2});
  EXPECT_EQ(batch_of(r.masked_select(torch::tensor({true, false, true, false}))), Shape{2});
  std::vector<Replay> rows = r.unbind(0);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_TRUE(at::equal(rows[3].action(), r.action()[3]));
  EXPECT_EQ(r.split(3).size(), 2u);
  EXPECT_EQ(batch_of(r.chunk(2)[1]), Shape{2});
  ReplayWithInfo w = ReplayWithInfo::from_tensordict(replay_td().set("info", torch::zeros({4})));
  ReplayWithInfo w2 = w.clone();  // the derived type, not Replay
  EXPECT_EQ(w2.info().sizes(), (at::IntArrayRef{4}));
}

TEST(TypedOps, StackAndCat) {
  Replay a = make_replay(0), b = make_replay(100);
  Replay s = Replay::stack({a, b});
  EXPECT_TRUE(s.is<td::TensorDict>());
  EXPECT_EQ(batch_of(s), (Shape{2, 4}));
  EXPECT_TRUE(at::equal(s[1].reward(), b.reward()));
  EXPECT_EQ(batch_of(Replay::stack({a, b}, 1)), (Shape{4, 2}));
  Replay c = Replay::cat({a, b});
  EXPECT_EQ(batch_of(c), Shape{8});
  EXPECT_TRUE(at::equal(c.obs().slice(0, 4), b.obs()));
  // The free functions take typed wrappers too (and return TensorDicts).
  td::TensorDict plain = td::stack({a, b});
  EXPECT_EQ(batch_of(plain), (Shape{2, 4}));
  TD_EXPECT_THROW_MSG(Replay::stack({a, a.reshape({2, 2})}), td::ShapeError, "");
}

TEST(TypedOps, FillRowByRow) {
  Replay buffer = make_replay().clone();
  buffer.zero_();
  for (int64_t i = 0; i < 4; ++i)
    buffer.index_put_({i}, Replay({{"obs", torch::full({3}, double(i))},
                                   {"action", torch::full({2}, double(i))},
                                   {"reward", torch::full({}, double(i))}},
                                  {}));
  EXPECT_TRUE(at::equal(buffer.reward(), torch::arange(4, torch::kFloat)));
  EXPECT_TRUE(at::equal(buffer.obs().select(1, 2), torch::arange(4, torch::kFloat)));
}

// ---- from_schema -------------------------------------------------------------------------

namespace {
td::Schema replay_schema() {
  return td::Schema{{"obs", {{3}, torch::kUInt8}},
                    {"action", {{2}, torch::kFloat32}},
                    {"reward", {{}, torch::kFloat32}}};
}
}  // namespace

TEST(TypedSchema, FromSchemaInMemoryMemmapShared) {
  Replay mem = Replay::from_schema(replay_schema(), {5});
  EXPECT_EQ(batch_of(mem), Shape{5});
  EXPECT_EQ(mem.obs().scalar_type(), torch::kUInt8);
  EXPECT_EQ(mem.reward().sizes(), (at::IntArrayRef{5}));
  EXPECT_EQ(mem.obs().sum().item<int64_t>(), 0);

  TempDir dir;
  Replay mm = Replay::from_schema(replay_schema(), {5}, td::storage::Memmap{.prefix = dir.str()});
  EXPECT_TRUE(mm.is_memmap());
  mm.index_put_({2}, Replay({{"obs", torch::full({3}, 7, torch::kUInt8)},
                             {"action", torch::ones({2})},
                             {"reward", torch::full({}, 3.0)}},
                            {}));
  Replay back = Replay::load_memmap(dir.str());
  EXPECT_EQ(back.reward()[2].item<float>(), 3.0f);
  EXPECT_EQ(back.obs()[2][1].item<int64_t>(), 7);

  Replay by_name =
      Replay::from_schema(replay_schema(), {2}, "memmap", {{"prefix", dir.str("by_name")}});
  EXPECT_TRUE(by_name.is_memmap());

  Replay sh = Replay::from_schema(replay_schema(), {2}, td::storage::Shared{});
  EXPECT_TRUE(sh.is_shared());
  td::unlink_shared(sh.shared_name());
}

TEST(TypedSchema, SchemaMustHoldTheRequiredFields) {
  TempDir dir;
  td::Schema partial{{"obs", {{3}, torch::kFloat32}}};
  TD_EXPECT_THROW_MSG(Replay::from_schema(partial, {5}, td::storage::Memmap{.prefix = dir.str()}),
                      td::SchemaError,
                      "Replay.from_schema() missing required field(s): action, reward");
  EXPECT_FALSE(fs::exists(dir.path));  // checked before anything is allocated
  // check=false accepts it; the missing fields fail when read.
  Replay r = Replay::from_schema(partial, {5}, td::storage::Memory{}, /*check=*/false);
  TD_EXPECT_THROW_MSG(r.action(), td::SchemaError, "declared but not set");
}

// ---- nested fields ---------------------------------------------------------------

TEST(TypedNested, FieldTableAndConstruction) {
  auto f = Step::fields();
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[2].name, "next");
  EXPECT_EQ(f[2].kind, td::FieldKind::Nested);
  EXPECT_EQ(f[2].type, "NextState");
  EXPECT_TRUE(f[2].required);
  EXPECT_EQ(Step::required_field_names(), (std::vector<std::string>{"obs", "reward", "next"}));

  // A nested key names the field; a missing nested field is reported.
  Step s({{"obs", torch::zeros({4, 3})},
          {"reward", torch::zeros({4})},
          {{"next", "obs"}, torch::ones({4, 3})}},
         kB);
  EXPECT_TRUE(at::equal(s.next().obs(), torch::ones({4, 3})));
  TD_EXPECT_THROW_MSG(Step({{"obs", torch::zeros({4, 3})}, {"reward", torch::zeros({4})}}, kB),
                      td::SchemaError, "Step() missing required field(s): next");
}

TEST(TypedNested, GetterIsLiveSettersReplaceOrCopy) {
  Step s({{"obs", torch::zeros({4, 3})},
          {"reward", torch::zeros({4})},
          {{"next", "obs"}, torch::zeros({4, 3})}},
         kB);
  // The getter wraps the nested level itself: writes through it land in s.
  NextState n = s.next();
  n.set_obs_(torch::full({4, 3}, 2.0));
  n.set_info(torch::ones({4}));
  EXPECT_TRUE(at::equal(s.get({"next", "obs"}), torch::full({4, 3}, 2.0f)));
  EXPECT_TRUE(s.contains({"next", "info"}));
  EXPECT_TRUE(at::equal(s.next().info(), torch::ones({4})));

  // set_next replaces the level; set_next_ copies into the existing tensors.
  at::Tensor storage_before = s.get({"next", "obs"});
  s.set_next_(NextState({{"obs", torch::full({4, 3}, 5.0)}}, kB));
  EXPECT_TRUE(at::equal(storage_before, torch::full({4, 3}, 5.0f)));
  s.set_next(NextState({{"obs", torch::full({4, 3}, 6.0)}}, kB));
  EXPECT_FALSE(s.contains({"next", "info"}));
  EXPECT_TRUE(at::equal(s.next().obs(), torch::full({4, 3}, 6.0f)));
  EXPECT_TRUE(at::equal(storage_before, torch::full({4, 3}, 5.0f)));  // not written

  // Indexing keeps both levels typed.
  Step row = s[1];
  EXPECT_EQ(row.next().obs().sizes(), (at::IntArrayRef{3}));
}

TEST(TypedNested, ErrorsNameTheField) {
  Step s = Step::from_tensordict(
      td::TensorDict({{"obs", torch::zeros({4, 3})}, {"reward", torch::zeros({4})}}, kB),
      /*check=*/false);
  TD_EXPECT_THROW_MSG(s.next(), td::SchemaError, "'Step' has field 'next' declared but not set");
  s.set("next", torch::zeros({4}));
  TD_EXPECT_THROW_MSG(s.next(), td::TypeError, "next");
  s.set("next", td::TensorDict({}, kB));
  TD_EXPECT_THROW_MSG(s.next().obs(), td::SchemaError,
                      "'NextState' has field 'obs' declared but not set");
  // set_next_ into a level that lacks a key of the value.
  TD_EXPECT_THROW_MSG(s.set_next_(NextState({{"obs", torch::ones({4, 3})}}, kB)), td::KeyError,
                      "obs");
}

TEST(TypedNested, MemmapSchemaRoundTrip) {
  TempDir dir;
  td::Schema schema{{"obs", {{3}, torch::kFloat32}},
                    {"reward", {{}, torch::kFloat32}},
                    {{"next", "obs"}, {{3}, torch::kFloat32}}};
  Step buf = Step::from_schema(schema, {5}, td::storage::Memmap{.prefix = dir.str()});
  // The replay-buffer pattern: write one row's nested level in place.
  buf[2].next().set_obs_(torch::full({3}, 4.0));
  Step back = Step::load_memmap(dir.str());
  EXPECT_TRUE(at::equal(back.next().obs()[2], torch::full({3}, 4.0f)));
  EXPECT_EQ(back.next().obs().sum().item<float>(), 12.0f);
}
