// TensorClass: tensor and non-tensor fields, construction and from_tensordict
// checks, values held beside the tensordict, live wrapping of every core
// storage, operations and stacks that keep the type, and the memmap layout
// (written as Python writes a tensorclass; a Python 0.3.2 fixture read back).
#include "support/core_test_helpers.h"
#include "support/data_path.h"
#include "support/typed_test_helpers.h"

#include <tensordict/tensor_class.h>
#include <tensordict/typed_tensor_dict.h>

#include <filesystem>
#include <type_traits>

using namespace td_test;
using torch::indexing::Slice;
namespace fs = std::filesystem;

namespace {

struct Transition : td::TensorClass<Transition> {
  TENSORDICT_FIELDS(obs, action);
  TENSORDICT_OPTIONAL_FIELDS(mask);
  TENSORDICT_NON_TENSOR_FIELDS((std::string, env), (float, gamma), (std::optional<int>, seed));
};

// The class of the Python 0.3.2 fixture memmap/tensorclass.
struct MyData : td::TensorClass<MyData> {
  TENSORDICT_FIELDS(obs);
  TENSORDICT_NON_TENSOR_FIELDS((std::string, label), (std::optional<std::string>, extra));
};

// Names its Python class for meta.json.
struct Named : td::TensorClass<Named> {
  static constexpr std::string_view python_qualname = "mypkg.data.Named";
  TENSORDICT_FIELDS(x);
};

// A TypedTensorDict with the same tensor fields, used as a backend.
struct TypedObsAction : td::TypedTensorDict<TypedObsAction> {
  TENSORDICT_FIELDS(obs, action);
};

// A tensorclass with a nested typed level.
struct WithNext : td::TensorClass<WithNext> {
  TENSORDICT_FIELDS(obs);
  TENSORDICT_NON_TENSOR_FIELDS((std::string, env));
  TENSORDICT_NESTED_FIELDS((TypedObsAction, next));
};

const Shape kB{4};

Transition make_transition(double offset = 0, const char* env = "CartPole") {
  return Transition({{"obs", torch::arange(12, torch::kFloat).reshape({4, 3}) + offset},
                     {"action", torch::arange(4, torch::kFloat) + offset},
                     {"env", env},
                     {"gamma", td::NonTensorData(0.5f)}},
                    kB);
}

td::TensorDict obs_action() {
  return td::TensorDict({{"obs", torch::arange(12, torch::kFloat).reshape({4, 3})},
                         {"action", torch::arange(4, torch::kFloat)}},
                        kB);
}

static_assert(std::is_same_v<decltype(std::declval<Transition>()[0]), Transition>);
static_assert(std::is_same_v<decltype(std::declval<Transition>().gamma()), float>);
static_assert(std::is_same_v<decltype(std::declval<Transition>().seed()), std::optional<int>>);
static_assert(!std::is_convertible_v<Transition, td::TensorDictBase>);  // HAS-A
static_assert(sizeof(Transition) == sizeof(td::TensorDictBase) + sizeof(std::shared_ptr<int>));

}  // namespace

// ---- fields and construction -------------------------------------------------------

TEST(TensorClassFields, Table) {
  EXPECT_EQ(Transition::field_names(),
            (std::vector<std::string>{"obs", "action", "mask", "env", "gamma", "seed"}));
  EXPECT_EQ(Transition::required_field_names(), (std::vector<std::string>{"obs", "action"}));
  auto f = Transition::fields();
  EXPECT_EQ(f[3].kind, td::FieldKind::NonTensor);
  EXPECT_EQ(f[4].type, "float");
  EXPECT_EQ(f[5].type, "std::optional<int>");
  EXPECT_FALSE(f[3].required);
  EXPECT_STREQ(Transition::static_type_name(), "Transition");
  EXPECT_EQ(Transition::python_type(), "<class '__main__.Transition'>");
  EXPECT_EQ(Named::python_type(), "<class 'mypkg.data.Named'>");
}

TEST(TensorClassConstruction, BuildsAndChecks) {
  Transition t = make_transition();
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(batch_of(t.tensordict()), kB);
  EXPECT_EQ(t.batch_size().vec(), kB);
  EXPECT_EQ(t.env(), "CartPole");
  EXPECT_EQ(t.gamma(), 0.5f);
  EXPECT_EQ(t.seed(), std::nullopt);
  EXPECT_TRUE(t.tensordict().is_non_tensor("env"));  // a NonTensorData leaf
  EXPECT_FALSE(Transition().defined());

  TD_EXPECT_THROW_MSG(Transition({{"obs", torch::zeros({4})}}, kB), td::SchemaError,
                      "Transition() missing required field(s): action");
  TD_EXPECT_THROW_MSG(Transition({{"obs", torch::zeros({4})},
                                  {"action", torch::zeros({4})},
                                  {"b", "x"},
                                  {"a", torch::zeros({4})}},
                                 kB),
                      td::SchemaError, "Transition() got unexpected field(s): a, b");
  TD_EXPECT_THROW_MSG(Transition({{"obs", "text"}, {"action", torch::zeros({4})}}, kB),
                      td::SchemaError, "field 'obs' is a tensor field but holds a NonTensorData");
  TD_EXPECT_THROW_MSG(
      Transition(
          {{"obs", torch::zeros({4})}, {"action", torch::zeros({4})}, {"gamma", torch::zeros({4})}},
          kB),
      td::SchemaError, "field 'gamma' is a non-tensor field (float) but holds a Tensor");
  TD_EXPECT_THROW_MSG(
      Transition({{"obs", torch::zeros({4})}, {"action", torch::zeros({4})}, {"gamma", "high"}},
                 kB),
      td::SchemaError, "field 'gamma' expects float, got \"high\"");
}

// ---- accessors ---------------------------------------------------------------------

TEST(TensorClassAccess, TensorAndNonTensorFields) {
  Transition t = make_transition();
  EXPECT_TRUE(t.obs().is_same(t.tensordict().get("obs")));
  t.set_action(torch::ones({4})).set_env("Pong").set_seed(7);
  EXPECT_TRUE(at::equal(t.action(), torch::ones({4})));
  EXPECT_EQ(t.env(), "Pong");
  EXPECT_EQ(t.seed(), 7);
  t.set_seed(std::nullopt);  // removes the entry
  EXPECT_FALSE(t.tensordict().contains("seed"));
  EXPECT_EQ(t.seed(), std::nullopt);
  at::Tensor before = t.obs();
  t.set_obs_(torch::zeros({4, 3}));
  EXPECT_TRUE(t.obs().is_same(before));
  EXPECT_TRUE(at::equal(before, torch::zeros({4, 3})));
  TD_EXPECT_THROW_MSG(t.mask(), td::SchemaError,
                      "'Transition' has field 'mask' declared but not set");
  t.set_mask(torch::ones({4}, torch::kBool));
  EXPECT_EQ(t.mask().sum().item<int64_t>(), 4);
  // A value stored untyped that does not convert is a TypeError naming it.
  td::TensorDictBase(t.tensordict()).set_non_tensor("gamma", "high");
  TD_EXPECT_THROW_MSG(t.gamma(), td::TypeError, "field 'gamma' holds \"high\"", "float");
  // Copies are handles.
  Transition alias = t;
  alias.set_env("Breakout");
  EXPECT_EQ(t.env(), "Breakout");
}

TEST(TensorClassAccess, DeclaredButNotSet) {
  Transition t = Transition::from_tensordict(obs_action());
  TD_EXPECT_THROW_MSG(t.env(), td::SchemaError,
                      "'Transition' has field 'env' declared but not set");
  EXPECT_EQ(t.seed(), std::nullopt);
  auto partial = Transition::from_tensordict(td::TensorDict({{"obs", torch::zeros({4})}}, kB));
  TD_EXPECT_THROW_MSG(partial.action(), td::SchemaError, "'action' declared but not set");
}

// ---- from_tensordict ------------------------------------------------------------------------

TEST(TensorClassWrap, InMemoryIsLive) {
  td::TensorDict t = obs_action();
  Transition tc = Transition::from_tensordict(t);
  EXPECT_TRUE(tc.tensordict().is_same(t));
  tc.set_action(torch::full({4}, 3.0));
  EXPECT_TRUE(at::equal(t.get("action"), torch::full({4}, 3.0f)));
  t.set("obs", torch::zeros({4, 3}));
  EXPECT_TRUE(at::equal(tc.obs(), torch::zeros({4, 3})));
  tc.set_env("Pong");
  EXPECT_EQ(t.get_non_tensor("env"), "Pong");
}

TEST(TensorClassWrap, NonTensorValuesBeside) {
  td::TensorDict t = obs_action();
  Transition tc =
      Transition::from_tensordict(t, {{"gamma", 0.25}, {"env", "Pong"}, {"seed", nullptr}});
  EXPECT_EQ(tc.gamma(), 0.25f);
  EXPECT_EQ(tc.env(), "Pong");
  EXPECT_EQ(tc.seed(), std::nullopt);
  EXPECT_FALSE(t.contains("gamma"));  // not written into the backend
  EXPECT_EQ(tc.non_tensor_values(), (nlohmann::json{{"gamma", 0.25}, {"env", "Pong"}}));
  // They ride along with operations.
  EXPECT_EQ(tc[1].gamma(), 0.25f);
  EXPECT_EQ(tc.clone().env(), "Pong");
  // A write goes to the tensordict and drops the value held beside it, for
  // every handle.
  Transition alias = tc;
  tc.set_gamma(0.75f);
  EXPECT_EQ(t.get_non_tensor("gamma"), 0.75);
  EXPECT_FALSE(alias.non_tensor_values().contains("gamma"));
  EXPECT_EQ(alias.gamma(), 0.75f);

  TD_EXPECT_THROW_MSG(Transition::from_tensordict(t, {{"oops", 1}}), td::SchemaError,
                      "Transition.from_tensordict() got unexpected field(s): oops");
  TD_EXPECT_THROW_MSG(Transition::from_tensordict(t, {{"obs", 1}}), td::SchemaError,
                      "field 'obs' is a tensor field");
  TD_EXPECT_THROW_MSG(Transition::from_tensordict(t, {{"gamma", 1.0}}), td::SchemaError,
                      "field 'gamma' is given twice");
  TD_EXPECT_THROW_MSG(Transition::from_tensordict(obs_action(), {{"gamma", "x"}}), td::SchemaError,
                      "field 'gamma' expects float");
  TD_EXPECT_THROW_MSG(Transition::from_tensordict(obs_action(), nlohmann::json::array()),
                      td::ValueError, "JSON object");
  td::TensorDict extra = obs_action();
  extra.set("reward", torch::zeros({4}));
  TD_EXPECT_THROW_MSG(Transition::from_tensordict(extra), td::SchemaError,
                      "got unexpected field(s): reward");
  TD_EXPECT_THROW_MSG(Transition::from_tensordict(td::TensorDictBase()), td::ValueError, "null");
}

TEST(TensorClassWrap, Memmap) {
  TempDir dir("td_tensorclass");
  Transition tc = Transition::from_tensordict(obs_action().memmap(dir.str()), {{"env", "Pong"}});
  EXPECT_TRUE(tc.is_memmap());
  EXPECT_TRUE(tc.is_locked());
  TD_EXPECT_THROW_MSG(tc.set_obs(torch::zeros({4, 3})), td::LockedError, "obs");
  TD_EXPECT_THROW_MSG(tc.set_env("x"), td::LockedError, "env");
  tc.set_obs_(torch::ones({4, 3}));
  tc.update_(Transition::from_tensordict(td::TensorDict({{"action", torch::full({4}, 2.0)}}, kB)));
  auto back = td::load_memmap(dir.str());
  EXPECT_TRUE(at::equal(back.get("obs"), torch::ones({4, 3})));
  EXPECT_TRUE(at::equal(back.get("action"), torch::full({4}, 2.0f)));
  EXPECT_EQ(tc[0].env(), "Pong");
}

TEST(TensorClassWrap, SharedMemory) {
  Transition tc = make_transition().clone();
  Transition& same = tc.share_memory_();
  EXPECT_EQ(&same, &tc);
  EXPECT_TRUE(tc.is_shared());
  const std::string name = tc.tensordict().shared_name();
  ASSERT_FALSE(name.empty());
  Transition attached = Transition::from_tensordict(td::attach_shared(name));
  tc.set_action_(torch::full({4}, 6.0));
  EXPECT_TRUE(at::equal(attached.action(), torch::full({4}, 6.0f)));
  EXPECT_EQ(attached.env(), "CartPole");
  td::unlink_shared(name);
}

TEST(TensorClassWrap, LazyStackAndTypedBackends) {
  td::TensorDict a({{"obs", torch::zeros({3})}, {"action", torch::zeros({})}}, {});
  td::TensorDict b({{"obs", torch::ones({5})}, {"action", torch::ones({})}}, {});  // ragged obs
  Transition tc = Transition::from_tensordict(td::lazy_stack({a, b}));
  EXPECT_EQ(tc.batch_size().vec(), Shape{2});
  EXPECT_EQ(tc[1].obs().sizes(), (at::IntArrayRef{5}));
  EXPECT_TRUE(tc[1].tensordict().is_same(b));
  TD_EXPECT_THROW_MSG(tc.obs(), td::ShapeError, "obs");  // ragged: not stackable
  tc.set_action_(torch::tensor({4.0f, 5.0f}));
  EXPECT_EQ(b.get("action").item<float>(), 5.0f);

  // A TypedTensorDict as the backend: both wrap the same storage.
  TypedObsAction typed = TypedObsAction::from_tensordict(obs_action());
  Transition over_typed = Transition::from_tensordict(typed);
  over_typed.set_action(torch::zeros({4}));
  EXPECT_TRUE(at::equal(typed.action(), torch::zeros({4})));
  EXPECT_EQ(over_typed[2].obs().sizes(), (at::IntArrayRef{3}));
  // ... and the other way round.
  TypedObsAction back = TypedObsAction::from_tensordict(over_typed.tensordict());
  EXPECT_TRUE(back.is_same(typed));
}

// ---- operations ----------------------------------------------------------------------

TEST(TensorClassOps, KeepTheTypeAndTheValues) {
  Transition t = make_transition();
  Transition row = t[2];
  EXPECT_EQ(row.batch_size().vec(), Shape{});
  EXPECT_TRUE(at::equal(row.obs(), t.obs()[2]));
  EXPECT_EQ(row.env(), "CartPole");  // a NonTensorData is the same for every row
  Transition part = t.index({Slice(0, 2)});
  EXPECT_EQ(part.batch_size().vec(), Shape{2});
  part.set_action_(torch::full({2}, -1.0));
  EXPECT_EQ(t.action()[1].item<float>(), -1.0f);  // a view
  Transition c = t.clone();
  c.set_action_(torch::zeros({4}));
  EXPECT_NE(t.action().sum().item<float>(), 0.0f);
  EXPECT_EQ(c.gamma(), 0.5f);
  EXPECT_EQ(t.to(torch::kDouble).obs().scalar_type(), torch::kDouble);
  EXPECT_EQ(t.to(at::Device(at::kCPU)).device(), at::Device(at::kCPU));
  EXPECT_EQ(t.reshape({2, 2}).batch_size().vec(), (Shape{2, 2}));
  EXPECT_EQ(t.unsqueeze(1).batch_size().vec(), (Shape{4, 1}));
  EXPECT_EQ(t.unsqueeze(1).squeeze(1).env(), "CartPole");
  EXPECT_EQ(t.expand({2, 4}).permute({1, 0}).batch_size().vec(), (Shape{4, 2}));
  auto rows = t.unbind();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[3].gamma(), 0.5f);
  EXPECT_EQ(t.split(3).size(), 2u);
  EXPECT_EQ(t.chunk(2)[1].batch_size().vec(), Shape{2});
  EXPECT_NE(t.repr().find("Transition("), std::string::npos);
}

TEST(TensorClassOps, Stacks) {
  Transition a = make_transition(0), b = make_transition(100);
  Transition s = Transition::stack({a, b});
  EXPECT_EQ(s.batch_size().vec(), (Shape{2, 4}));
  EXPECT_TRUE(at::equal(s[1].obs(), b.obs()));
  EXPECT_EQ(s.env(), "CartPole");
  EXPECT_EQ(Transition::cat({a, b}).batch_size().vec(), Shape{8});
  Transition lazy = Transition::lazy_stack({a, b});
  EXPECT_TRUE(lazy.tensordict().is<td::LazyStackedTensorDict>());
  EXPECT_TRUE(lazy[0].tensordict().is_same(a.tensordict()));
  // Values held beside the tensordicts must agree.
  auto x = Transition::from_tensordict(obs_action(), {{"seed", 1}});
  auto y = Transition::from_tensordict(obs_action(), {{"seed", 2}});
  EXPECT_EQ(Transition::stack({x, x}).seed(), 1);
  TD_EXPECT_THROW_MSG(Transition::stack({x, y}), td::SchemaError,
                      "Transition::stack(): non-tensor field 'seed' differs");
  TD_EXPECT_THROW_MSG(Transition::stack({x, make_transition()}), td::Error, "");
}

TEST(TensorClassOps, FillRowByRow) {
  Transition buffer = Transition::from_tensordict(td::TensorDict(Shape{3}));
  for (int64_t i = 0; i < 3; ++i)
    buffer.index_put_({i}, Transition({{"obs", torch::full({3}, double(i))},
                                       {"action", torch::full({}, double(i))},
                                       {"env", "CartPole"}},
                                      {}));
  EXPECT_TRUE(at::equal(buffer.action(), torch::arange(3, torch::kFloat)));
  EXPECT_EQ(buffer.env(), "CartPole");
}

// ---- memmap layout ----------------------------------------------------------------------

TEST(TensorClassMemmap, PythonLayoutAndRoundTrip) {
  TempDir dir("td_tensorclass");
  Transition t = make_transition();
  t.set_seed(3);
  Transition saved = t.memmap(dir.str());
  // Python 0.15's layout: meta.json holds _type only; every set field is in
  // _tensordict/ (non-tensors as NonTensorData); mask is not set: absent.
  EXPECT_EQ(read_text(dir.path / "meta.json"), R"({"_type":"<class '__main__.Transition'>"})");
  EXPECT_TRUE(fs::exists(dir.path / "_tensordict" / "meta.json"));
  EXPECT_TRUE(fs::exists(dir.path / "_tensordict" / "obs.memmap"));
  EXPECT_FALSE(fs::exists(dir.path / "_tensordict" / "mask.memmap"));
  auto inner = nlohmann::json::parse(read_text(dir.path / "_tensordict" / "meta.json"));
  EXPECT_EQ(inner["shape"], nlohmann::json::array({4}));
  EXPECT_EQ(inner["env"], nlohmann::json({{"type", "NonTensorData"}}));
  EXPECT_FALSE(inner.contains("mask"));
  auto env = nlohmann::json::parse(read_text(dir.path / "_tensordict" / "env" / "meta.json"));
  EXPECT_EQ(env["data"], "CartPole");
  // The result: mapped tensors (locked), values beside them.
  EXPECT_TRUE(saved.is_memmap());
  EXPECT_EQ(saved.env(), "CartPole");
  EXPECT_EQ(saved.seed(), 3);
  EXPECT_TRUE(at::equal(saved.obs(), t.obs()));
  saved.set_action_(torch::full({4}, 8.0));

  Transition back = Transition::load_memmap(dir.str());
  EXPECT_TRUE(at::equal(back.obs(), t.obs()));
  EXPECT_TRUE(at::equal(back.action(), torch::full({4}, 8.0f)));
  EXPECT_EQ(back.env(), "CartPole");
  EXPECT_EQ(back.gamma(), 0.5f);
  EXPECT_EQ(back.seed(), 3);
  EXPECT_EQ(back.batch_size().vec(), kB);
  // Saving again over the same directory replaces it.
  t.set_env("Pong");
  t.memmap(dir.str());
  EXPECT_EQ(Transition::load_memmap(dir.str()).env(), "Pong");
  // A class whose fields do not match the directory is refused.
  TD_EXPECT_THROW_MSG(MyData::load_memmap(dir.str()), td::SchemaError, "unexpected field(s)");
  Named n({{"x", torch::zeros({2})}}, {2});
  n.memmap(dir.str("named"));
  EXPECT_EQ(read_text(dir.path / "named" / "meta.json"),
            R"({"_type":"<class 'mypkg.data.Named'>"})");
}

TEST(TensorClassMemmap, UnsetOptionalFieldsAreLeftOutAndReadBackUnset) {
  TempDir dir("td_tensorclass");
  Transition t = make_transition();  // no mask, no seed
  t.memmap(dir.str());
  EXPECT_EQ(read_text(dir.path / "meta.json"), R"({"_type":"<class '__main__.Transition'>"})");
  EXPECT_FALSE(fs::exists(dir.path / "_tensordict" / "seed"));
  EXPECT_FALSE(fs::exists(dir.path / "_tensordict" / "mask.memmap"));
  Transition back = Transition::load_memmap(dir.str());
  TD_EXPECT_THROW_MSG(back.mask(), td::SchemaError, "'mask' declared but not set");
  EXPECT_EQ(back.seed(), std::nullopt);
  EXPECT_EQ(back.env(), "CartPole");
  // Saved again with both set: no null left, and they load.
  t.set_mask(torch::ones({4}, torch::kBool));
  t.set_seed(7);
  t.memmap(dir.str());
  EXPECT_TRUE(fs::exists(dir.path / "_tensordict" / "seed" / "meta.json"));
  back = Transition::load_memmap(dir.str());
  EXPECT_EQ(back.mask().sum().item<int64_t>(), 4);
  EXPECT_EQ(back.seed(), 7);
  // And unset again: the earlier save's mask file does not come back.
  make_transition().memmap(dir.str());
  EXPECT_FALSE(std::filesystem::exists(dir.path / "_tensordict" / "mask.memmap"));
  TD_EXPECT_THROW_MSG(Transition::load_memmap(dir.str()).mask(), td::SchemaError,
                      "'mask' declared but not set");
}

TEST(TensorClassMemmap, ReadsPythonNoneFields) {
  // Python 0.14: Transition(obs, action, mask=None, env="Pong", gamma=0.5,
  // seed=None, batch_size=[4]).memmap(p), written after docs/formats.md, "Tensorclass directories".
  const std::string dir = data_path("hand-built/tensorclass_none_fields").string();
  Transition t = Transition::load_memmap(dir);
  EXPECT_EQ(t.batch_size().vec(), kB);
  EXPECT_TRUE(at::equal(t.obs(), torch::arange(12, torch::kFloat).reshape({4, 3})));
  EXPECT_TRUE(at::equal(t.action(), torch::arange(4, torch::kFloat)));
  TD_EXPECT_THROW_MSG(t.mask(), td::SchemaError, "'mask' declared but not set");
  EXPECT_EQ(t.seed(), std::nullopt);
  EXPECT_EQ(t.env(), "Pong");
  EXPECT_EQ(t.gamma(), 0.5f);
  // Untyped, the null fields are absent too.
  EXPECT_EQ(td::load_memmap(dir).keys(),
            (std::vector<td::NestedKey>{"obs", "action", "env", "gamma"}));
}

TEST(TensorClassMemmap, LoadMemmapIsNotLockedLikePython) {
  TempDir dir("td_tensorclass");
  Transition saved = make_transition().memmap(dir.str());
  EXPECT_TRUE(saved.is_locked());
  Transition back = Transition::load_memmap(dir.str());
  EXPECT_FALSE(back.is_locked());
  back.set_mask(torch::zeros({4}, torch::kBool));  // allowed: not locked
  EXPECT_EQ(back.mask().sum().item<int64_t>(), 0);
}

TEST(TensorClassMemmap, ReadsPython032Fixture) {
  MyData d = MyData::load_memmap(data_path("python-0.3.2/memmap/tensorclass").string());
  EXPECT_EQ(d.batch_size().vec(), Shape{2});
  EXPECT_TRUE(at::equal(d.obs(), torch::ones({2, 3})));
  EXPECT_EQ(d.label(), "hello");
  EXPECT_EQ(d.extra(), std::nullopt);  // pickled by Python: not read
}

TEST(TensorClassNested, TypedLevelUnderATensorClass) {
  WithNext w({{"obs", torch::zeros({4, 3})}, {"env", "Pong"}, {"next", obs_action()}}, kB);
  EXPECT_EQ(WithNext::fields()[2].kind, td::FieldKind::Nested);
  EXPECT_TRUE(at::equal(w.next().action(), torch::arange(4, torch::kFloat)));
  w.next().set_action_(torch::full({4}, 3.0));
  EXPECT_TRUE(at::equal(w.tensordict().get({"next", "action"}), torch::full({4}, 3.0f)));
  EXPECT_EQ(w[1].next().obs().sizes(), (at::IntArrayRef{3}));
  // A nested field must hold a tensordict, and is not a non-tensor value.
  TD_EXPECT_THROW_MSG(WithNext({{"obs", torch::zeros({4, 3})}, {"next", torch::zeros({4})}}, kB),
                      td::SchemaError,
                      "'next' is a nested TypedObsAction field but holds a Tensor");
  TD_EXPECT_THROW_MSG(
      WithNext::from_tensordict(td::TensorDict({{"obs", torch::zeros({4, 3})}}, kB), {{"next", 1}}),
      td::SchemaError, "'next' is a tensor field");
}
