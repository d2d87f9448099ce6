// state_dict / load_state_dict in the layouts of docs/formats.md, "State dict layouts" (flat with
// _metadata, nested, legacy), and the pickle files exchanged with Python.
#include "pch.h"

#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

#include <tensordict/state_dict.h>

#include <ATen/core/ivalue.h>

#include <fstream>

namespace td = tensordict;
using td_test::Shape;
using td_test::Snapshot;
using json = nlohmann::json;

namespace {

using Kind = td::StateDictItem::Kind;

// The example of docs/state_dict.md, "Taking a state dict":
// TensorDict({"a": zeros(2), "sub": {"b": ones(2, 1)}}, [2]).
td::TensorDict spec_example() {
  return td::TensorDict(
      {{"a", torch::zeros({2})}, {"sub", td::TensorDict({{"b", torch::ones({2, 1})}}, {2})}}, {2});
}

std::vector<std::string> metadata_prefixes(const td::StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& [p, m] : sd.metadata()) out.push_back(p);
  return out;
}

td::StateDictMetadata plain_meta(Shape batch, std::optional<at::Device> device = std::nullopt) {
  return td::StateDictMetadata{std::move(batch), device, "", nullptr};
}

json non_tensor_fields(json data) {
  return json{{"data", std::move(data)}, {"_metadata", nullptr}, {"_is_non_tensor", true}};
}

// A tree with three levels, several dtypes and a non-tensor.
td::TensorDict mixed_source() {
  td::TensorDict inner({{"flag", torch::tensor({true, false}).reshape({2, 1})},
                        {"half", torch::arange(6, torch::kHalf).reshape({2, 3})}},
                       {2});
  td::TensorDict sub({{"idx", torch::arange(2, torch::kLong)},
                      {"inner", inner},
                      {"bf", torch::arange(4, torch::kBFloat16).reshape({2, 2})}},
                     {2});
  td::TensorDict root({{"obs", torch::randn({2, 3})},
                       {"sub", sub},
                       {"c", torch::complex(torch::randn({2}), torch::randn({2}))},
                       {"i8", torch::arange(2, torch::kChar)}},
                      {2});
  root.set("label", td::NonTensorData(json{{"env", "CartPole"}, {"seed", 3}}));
  return root;
}

// Same keys, shapes and dtypes; zeros and another non-tensor value.
td::TensorDict zeroed_like(const td::TensorDictBase& src) {
  td::TensorDict out = src.clone().to_tensordict();
  out.zero_();
  for (const auto& [k, v] : out.non_tensor_items(true)) out.set_non_tensor(k, "other");
  return out;
}

}  // namespace

// ---- the layouts of docs/formats.md, "State dict layouts" ----------------------------

TEST(StateDictLayout, FlatIsTheSpecExample) {
  auto data = spec_example();
  auto sd = data.state_dict();
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a", "sub.b"}));
  EXPECT_FALSE(sd.tensor("a").is_same(data.get("a")));             // detached: a new handle
  EXPECT_EQ(sd.tensor("a").data_ptr(), data.get("a").data_ptr());  // ... on the same memory
  EXPECT_EQ(sd.tensor("sub.b").data_ptr(), data.get({"sub", "b"}).data_ptr());
  EXPECT_TRUE(at::equal(sd.tensor("sub.b"), torch::ones({2, 1})));
  EXPECT_EQ(metadata_prefixes(sd), (std::vector<std::string>{"", "sub"}));
  EXPECT_EQ(*sd.find_metadata(""), plain_meta({2}));
  EXPECT_EQ(*sd.find_metadata("sub"), plain_meta({2}));
  EXPECT_TRUE(sd.has_metadata());
}

TEST(StateDictLayout, NestedHasMetadataAtEveryLevel) {
  auto sd = spec_example().state_dict({.flatten = false});
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a", "sub"}));
  EXPECT_EQ(metadata_prefixes(sd), (std::vector<std::string>{""}));
  EXPECT_EQ(*sd.find_metadata(""), plain_meta({2}));
  const auto& sub = sd.at("sub").nested();
  EXPECT_EQ(sub.keys(), (std::vector<std::string>{"b"}));
  EXPECT_EQ(metadata_prefixes(sub), (std::vector<std::string>{""}));
  EXPECT_EQ(*sub.find_metadata(""), plain_meta({2}));
  EXPECT_TRUE(at::equal(sub.tensor("b"), torch::ones({2, 1})));
}

TEST(StateDictLayout, LegacyNestedAsPython032) {
  auto data = spec_example();
  auto sd = data.state_dict({.flatten = false, .legacy = true});
  EXPECT_FALSE(sd.has_metadata());
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a", "sub", "__batch_size", "__device"}));
  EXPECT_EQ(sd.at("__batch_size").batch_size(), Shape{2});
  EXPECT_EQ(sd.at("__device").kind(), Kind::Device);
  EXPECT_FALSE(sd.at("__device").device().has_value());
  const auto& sub = sd.at("sub").nested();
  EXPECT_EQ(sub.keys(), (std::vector<std::string>{"b", "__batch_size", "__device"}));
  EXPECT_EQ(sub.at("__batch_size").batch_size(), Shape{2});
  // Legacy leaves are clones.
  EXPECT_NE(sd.tensor("a").data_ptr(), data.get("a").data_ptr());
  EXPECT_TRUE(at::equal(sd.tensor("a"), data.get("a")));
}

TEST(StateDictLayout, LegacyFlatHasOnlyRootSentinels) {
  auto sd = spec_example().state_dict({.legacy = true});
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a", "sub.b", "__batch_size", "__device"}));
  EXPECT_FALSE(sd.has_metadata());
}

TEST(StateDictLayout, DeviceIsRecorded) {
  td::TensorDict data({{"a", torch::zeros({2})}}, {2}, at::Device(at::kCPU));
  EXPECT_EQ(data.state_dict().find_metadata("")->device, at::Device(at::kCPU));
  EXPECT_EQ(data.state_dict({.legacy = true}).at("__device").device(), at::Device(at::kCPU));
}

TEST(StateDictLayout, LeavesAreDetachedUnlessKeepVars) {
  td::TensorDict data({{"w", torch::randn({3}).requires_grad_()}}, {3});
  auto detached = data.state_dict();
  EXPECT_FALSE(detached.tensor("w").requires_grad());
  EXPECT_EQ(detached.tensor("w").data_ptr(), data.get("w").data_ptr());
  auto kept = data.state_dict({.keep_vars = true});
  EXPECT_TRUE(kept.tensor("w").is_same(data.get("w")));
  EXPECT_TRUE(kept.tensor("w").requires_grad());
}

TEST(StateDictLayout, NonTensorDataIsAMetadataNode) {
  td::TensorDict data({{"a", torch::zeros({3})}}, {3});
  data.set("s", "hello");
  auto flat = data.state_dict();
  EXPECT_EQ(flat.keys(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(metadata_prefixes(flat), (std::vector<std::string>{"", "s"}));
  const auto& m = *flat.find_metadata("s");
  EXPECT_EQ(m.type, "NonTensorData");
  EXPECT_EQ(m.batch_size, Shape{3});
  EXPECT_EQ(m.non_tensor, non_tensor_fields("hello"));

  auto nested = data.state_dict({.flatten = false});
  const auto& s = nested.at("s").nested();
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.find_metadata("")->type, "NonTensorData");
  EXPECT_EQ(s.find_metadata("")->non_tensor, non_tensor_fields("hello"));

  // Python <= 0.11: the tensorclass form.
  auto legacy = data.state_dict({.flatten = false, .legacy = true});
  const auto& l = legacy.at("s").nested();
  EXPECT_EQ(l.keys(), (std::vector<std::string>{"_tensordict", "_non_tensordict"}));
  EXPECT_EQ(l.at("_tensordict").nested().at("__batch_size").batch_size(), Shape{3});
  EXPECT_EQ(l.at("_non_tensordict").value(), non_tensor_fields("hello"));
}

TEST(StateDictLayout, FlatteningCollisionIsAKeyError) {
  td::TensorDict data(
      {{"a.b", torch::zeros({1})}, {"a", td::TensorDict({{"b", torch::ones({1})}}, {1})}}, {1});
  TD_EXPECT_THROW_MSG(data.state_dict(), td::KeyError, "('a', 'b')", "'a.b'", "flatten=false");
  EXPECT_EQ(data.state_dict({.flatten = false}).keys(), (std::vector<std::string>{"a.b", "a"}));
}

TEST(StateDictLayout, LazyStackGivesStackedLeaves) {
  td::TensorDict m0({{"x", torch::zeros({3})}}, {3});
  td::TensorDict m1({{"x", torch::ones({3})}}, {3});
  auto stack = td::lazy_stack({m0, m1});
  auto sd = stack.state_dict();
  EXPECT_TRUE(at::equal(sd.tensor("x"), torch::stack({torch::zeros({3}), torch::ones({3})})));
  EXPECT_EQ(sd.find_metadata("")->batch_size, (Shape{2, 3}));

  m1.set("only_here", torch::zeros({3}));
  TD_EXPECT_THROW_MSG(stack.state_dict(), td::ValueError, "exclusive keys", "member 1",
                      "'only_here'");
}

// ---- load_state_dict: round trips ----------------------------------------------------

class StateDictRoundTrip : public ::testing::TestWithParam<td::StateDictOptions> {};

TEST_P(StateDictRoundTrip, MixedDtypesNestedAndNonTensor) {
  auto src = mixed_source();
  auto dst = zeroed_like(src);
  const at::Tensor obs_before = dst.get("obs");
  auto sd = src.state_dict(GetParam());
  dst.load_state_dict(sd);
  EXPECT_TRUE(dst.equal(src));
  EXPECT_EQ(dst.get_non_tensor("label"), (json{{"env", "CartPole"}, {"seed", 3}}));
  // Copied into the existing leaves, not aliased to the source.
  EXPECT_TRUE(dst.get("obs").is_same(obs_before));
  EXPECT_NE(dst.get("obs").data_ptr(), src.get("obs").data_ptr());
}

TEST_P(StateDictRoundTrip, SetsBatchSizeAndDevice) {
  td::TensorDict src({{"a", torch::zeros({2, 3})},
                      {"sub", td::TensorDict({{"b", torch::ones({2, 3, 4})}}, {2, 3})}},
                     {2}, at::Device(at::kCPU));
  td::TensorDict dst({{"a", torch::full({2, 3}, 5.)},
                      {"sub", td::TensorDict({{"b", torch::full({2, 3, 4}, 5.)}}, {})}},
                     {});
  dst.load_state_dict(src.state_dict(GetParam()));
  EXPECT_EQ(td_test::batch_of(dst), Shape{2});
  EXPECT_TRUE(at::equal(dst.get({"sub", "b"}), torch::ones({2, 3, 4})));
  if (!(GetParam().legacy && GetParam().flatten)) {  // the flat legacy layout has root data only
    EXPECT_EQ(td_test::batch_of(dst.get_tensordict("sub")), (Shape{2, 3}));
  }
  EXPECT_EQ(dst.device(), at::Device(at::kCPU));
}

INSTANTIATE_TEST_SUITE_P(Layouts, StateDictRoundTrip,
                         ::testing::Values(td::StateDictOptions{},
                                           td::StateDictOptions{.flatten = false},
                                           td::StateDictOptions{.flatten = false, .legacy = true},
                                           td::StateDictOptions{.flatten = true, .legacy = true}),
                         [](const auto& info) {
                           return std::string(info.param.legacy ? "Legacy" : "Head") +
                                  (info.param.flatten ? "Flat" : "Nested");
                         });

TEST(StateDictLoad, IntoALazyStackWritesTheMembers) {
  td::TensorDict m0({{"x", torch::zeros({3})}}, {3});
  td::TensorDict m1({{"x", torch::zeros({3})}}, {3});
  auto dst = td::lazy_stack({m0, m1});
  td::TensorDict src({{"x", torch::arange(6, torch::kFloat).reshape({2, 3})}}, {2, 3});
  dst.load_state_dict(src.state_dict());
  EXPECT_TRUE(at::equal(m0.get("x"), torch::arange(3, torch::kFloat)));
  EXPECT_TRUE(at::equal(m1.get("x"), torch::arange(3, 6, torch::kFloat)));
  // A lazy stack's batch size cannot change.
  td::TensorDict wrong({{"x", torch::zeros({2, 3})}}, {2});
  Snapshot before = Snapshot::of(m0);
  TD_EXPECT_THROW_MSG(dst.load_state_dict(wrong.state_dict()), td::ShapeError, "lazy stack",
                      "[2, 3]", "[2]");
  before.expect_unchanged(m0);
}

TEST(StateDictLoad, FlatLayoutCreatesEmptyNestedFromMetadata) {
  td::TensorDict src({{"a", torch::zeros({2})}, {"empty", td::TensorDict({}, {2})}}, {2});
  td::TensorDict dst({{"a", torch::ones({2})}}, {2});
  dst.load_state_dict(src.state_dict());  // strict: empty nested levels are allowed
  ASSERT_EQ(dst.entry_kind("empty"), td::EntryKind::TensorDict);
  EXPECT_EQ(td_test::batch_of(dst.get_tensordict("empty")), Shape{2});
}

// ---- load_state_dict: errors change nothing -------------------------------------------------

TEST(StateDictLoad, StrictMissingKeyNamesThePathAndChangesNothing) {
  auto dst = spec_example();
  dst.set({"sub", "c"}, torch::zeros({2}));
  auto src = spec_example();
  src.get("a").fill_(7);
  src.get({"sub", "b"}).fill_(7);
  Snapshot before = Snapshot::of(dst);
  TD_EXPECT_THROW_MSG(dst.load_state_dict(src.state_dict()), td::KeyError, "('sub', 'c')",
                      "not in the state dict");
  before.expect_unchanged(dst);
  // Without strict the missing key is left alone.
  dst.load_state_dict(src.state_dict(), /*strict=*/false);
  EXPECT_TRUE(at::equal(dst.get("a"), torch::full({2}, 7.)));
  EXPECT_TRUE(at::equal(dst.get({"sub", "b"}), torch::full({2, 1}, 7.)));
  EXPECT_TRUE(at::equal(dst.get({"sub", "c"}), torch::zeros({2})));
}

TEST(StateDictLoad, StrictUnexpectedKeyNamesThePathAndChangesNothing) {
  auto dst = spec_example();
  auto src = spec_example();
  src.set({"sub", "extra"}, torch::full({2}, 3.));
  src.get("a").fill_(9);
  Snapshot before = Snapshot::of(dst);
  TD_EXPECT_THROW_MSG(dst.load_state_dict(src.state_dict()), td::KeyError, "('sub', 'extra')",
                      "not in the tensordict");
  before.expect_unchanged(dst);
  // Without strict it is added, as a copy.
  dst.load_state_dict(src.state_dict(), false);
  EXPECT_TRUE(at::equal(dst.get({"sub", "extra"}), torch::full({2}, 3.)));
  EXPECT_NE(dst.get({"sub", "extra"}).data_ptr(), src.get({"sub", "extra"}).data_ptr());
  EXPECT_TRUE(at::equal(dst.get("a"), torch::full({2}, 9.)));
}

TEST(StateDictLoad, ShapeAndDtypeMismatchesChangeNothing) {
  auto dst = spec_example();
  Snapshot before = Snapshot::of(dst);
  // "a" comes first and is fine; the error on ("sub", "b") must still leave it.
  td::TensorDict bad_shape(
      {{"a", torch::full({2}, 4.)}, {"sub", td::TensorDict({{"b", torch::ones({2, 2})}}, {2})}},
      {2});
  TD_EXPECT_THROW_MSG(dst.load_state_dict(bad_shape.state_dict()), td::ShapeError, "('sub', 'b')",
                      "[2, 2]", "[2, 1]");
  before.expect_unchanged(dst);
  td::TensorDict bad_dtype(
      {{"a", torch::full({2}, 4.)},
       {"sub", td::TensorDict({{"b", torch::ones({2, 1}, torch::kLong)}}, {2})}},
      {2});
  TD_EXPECT_THROW_MSG(dst.load_state_dict(bad_dtype.state_dict()), td::TypeError, "('sub', 'b')",
                      "torch.int64", "torch.float32");
  before.expect_unchanged(dst);
  // A batch size the leaves do not start with.
  auto sd = spec_example().state_dict();
  sd.set_metadata("", plain_meta({3}));
  TD_EXPECT_THROW_MSG(dst.load_state_dict(sd), td::ShapeError, "[3]");
  before.expect_unchanged(dst);
  // A tensor where the tensordict has a nested level.
  td::StateDict kind_clash;
  kind_clash.insert("a", torch::zeros({2}));
  kind_clash.insert("sub", torch::zeros({2}));
  TD_EXPECT_THROW_MSG(dst.load_state_dict(kind_clash), td::TypeError, "'sub'", "TensorDict");
  before.expect_unchanged(dst);
}

TEST(StateDictLoad, DeviceOtherThanOursIsRefused) {
  td::TensorDict dst({{"a", torch::zeros({2})}}, {2}, at::Device(at::kCPU));
  auto sd = dst.state_dict();
  sd.set_metadata("", plain_meta({2}, at::Device("cuda:0")));
  Snapshot before = Snapshot::of(dst);
  TD_EXPECT_THROW_MSG(dst.load_state_dict(sd), td::DeviceError, "cuda:0", "cpu");
  before.expect_unchanged(dst);
}

TEST(StateDictLoad, LockedTensorDictTakesValuesButNoNewKeys) {
  auto dst = spec_example();
  dst.lock_();
  auto src = spec_example();
  src.get("a").fill_(2);
  dst.load_state_dict(src.state_dict());
  EXPECT_TRUE(at::equal(dst.get("a"), torch::full({2}, 2.)));
  src.set("new", torch::zeros({2}));
  Snapshot before = Snapshot::of(dst);
  TD_EXPECT_THROW_MSG(dst.load_state_dict(src.state_dict(), false), td::LockedError, "'new'");
  before.expect_unchanged(dst);
}

TEST(StateDictLoad, NonTensorValueIsReplaced) {
  td::TensorDict dst({{"a", torch::zeros({2})}}, {2});
  dst.set("s", "old");
  td::TensorDict src({{"a", torch::ones({2})}}, {2});
  src.set("s", "new");
  for (auto opt : {td::StateDictOptions{}, td::StateDictOptions{.flatten = false},
                   td::StateDictOptions{.flatten = false, .legacy = true}}) {
    dst.set_non_tensor("s", "old");
    dst.load_state_dict(src.state_dict(opt));
    EXPECT_EQ(dst.get_non_tensor("s"), "new");
  }
  // A tensor where the state dict has a NonTensorData.
  td::TensorDict clash({{"a", torch::zeros({2})}, {"s", torch::zeros({2})}}, {2});
  TD_EXPECT_THROW_MSG(clash.load_state_dict(src.state_dict()), td::TypeError, "'s'",
                      "NonTensorData");
}

// ---- exchange with Python: the IValue and the pickle file --------------------------------------

TEST(StateDictPickle, LegacyLayoutIsAPlainDictPythonLoads) {
  auto sd = spec_example().state_dict({.flatten = false, .legacy = true});
  c10::IValue v = td::state_dict_to_ivalue(sd);
  ASSERT_TRUE(v.isGenericDict());
  auto d = v.toGenericDict();
  std::vector<std::string> keys;
  for (const auto& e : d) keys.push_back(e.key().toStringRef());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "sub", "__batch_size", "__device"}));
  // torch.Size has no C++ pickle form: a tuple, which Python's batch_size
  // setter accepts (and compares equal to a torch.Size).
  ASSERT_TRUE(d.at("__batch_size").isTuple());
  EXPECT_EQ(d.at("__batch_size").toTupleRef().elements().size(), 1u);
  EXPECT_EQ(d.at("__batch_size").toTupleRef().elements()[0].toInt(), 2);
  EXPECT_TRUE(d.at("__device").isNone());
  EXPECT_TRUE(d.at("sub").isGenericDict());
  EXPECT_FALSE(d.contains("_metadata"));
}

TEST(StateDictPickle, HeadLayoutCarriesMetadataAsAnItem) {
  td::TensorDict data({{"a", torch::zeros({2})}}, {2}, at::Device(at::kCPU));
  data.set("s", "x");
  auto d = td::state_dict_to_ivalue(data.state_dict()).toGenericDict();
  ASSERT_TRUE(d.contains("_metadata"));
  auto meta = d.at("_metadata").toGenericDict();
  auto root = meta.at("").toGenericDict();
  EXPECT_TRUE(root.at("batch_size").isTuple());
  EXPECT_EQ(root.at("device").toDevice(), at::Device(at::kCPU));
  auto s = meta.at("s").toGenericDict();
  EXPECT_EQ(s.at("_type").toStringRef(), "NonTensorData");
  EXPECT_EQ(s.at("_non_tensor").toGenericDict().at("data").toStringRef(), "x");

  td::StateDict clash;
  clash.insert("_metadata", torch::zeros({1}));
  clash.set_metadata("", plain_meta({}));
  TD_EXPECT_THROW_MSG(td::state_dict_to_ivalue(clash), td::ValueError, "_metadata");
}

TEST(StateDictPickle, FileRoundTripOfEveryLayout) {
  td_test::TempDir dir("td_state_dict");
  std::filesystem::create_directories(dir.path);
  auto src = mixed_source();
  int n = 0;
  for (auto opt : {td::StateDictOptions{}, td::StateDictOptions{.flatten = false},
                   td::StateDictOptions{.flatten = false, .legacy = true},
                   td::StateDictOptions{.legacy = true}}) {
    const std::string path = dir.str("sd" + std::to_string(n++) + ".pt");
    auto sd = src.state_dict(opt);
    td::save_state_dict(sd, path);
    // A torch.save-style zip archive.
    std::ifstream f(path, std::ios::binary);
    char magic[2] = {};
    f.read(magic, 2);
    EXPECT_EQ(std::string(magic, 2), "PK");
    auto back = td::load_state_dict_file(path);
    EXPECT_EQ(back.keys(), sd.keys());
    EXPECT_EQ(back.metadata(), sd.metadata());
    auto dst = zeroed_like(src);
    dst.load_state_dict(back);
    EXPECT_TRUE(dst.equal(src)) << "layout " << n - 1;
  }
}

TEST(StateDictPickle, ReadsWhatPythonWritesFromAPlainDict) {
  // What torch.save({...}) of a plain dict unpickles to: batch sizes as lists
  // or tuples, devices as strings, torch.device or None.
  c10::impl::GenericDict meta(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("batch_size", c10::List<int64_t>({2}));
  root.insert("device", std::string("cpu"));
  meta.insert("", root);
  c10::impl::GenericDict sub(c10::StringType::get(), c10::AnyType::get());
  sub.insert("batch_size", c10::ivalue::Tuple::create({c10::IValue(int64_t(2))}));
  sub.insert("device", c10::IValue());
  meta.insert("sub", sub);
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("a", torch::full({2}, 3.));
  d.insert("sub.b", torch::full({2, 1}, 4.));
  d.insert("_metadata", meta);
  auto sd = td::state_dict_from_ivalue(d);
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a", "sub.b"}));
  EXPECT_EQ(*sd.find_metadata(""), plain_meta({2}, at::Device(at::kCPU)));
  EXPECT_EQ(*sd.find_metadata("sub"), plain_meta({2}));
  auto dst = spec_example();
  dst.load_state_dict(sd);
  EXPECT_TRUE(at::equal(dst.get({"sub", "b"}), torch::full({2, 1}, 4.)));
  EXPECT_EQ(dst.device(), at::Device(at::kCPU));

  c10::impl::GenericDict bad(c10::StringType::get(), c10::AnyType::get());
  bad.insert("__batch_size", std::string("2"));
  TD_EXPECT_THROW_MSG(td::state_dict_from_ivalue(bad), td::FormatError, "__batch_size",
                      "tuple or list");
}

TEST(StateDictPickle, CorruptOrMissingFileIsAFormatError) {
  td_test::TempDir dir("td_state_dict");
  std::filesystem::create_directories(dir.path);
  const std::string garbage = dir.str("garbage.pt");
  std::ofstream(garbage, std::ios::binary) << "this is not a zip archive";
  TD_EXPECT_THROW_MSG(td::load_state_dict_file(garbage), td::FormatError, garbage.c_str(),
                      "not a pickle archive");
  TD_EXPECT_THROW_MSG(td::load_state_dict_file(dir.str("missing.pt")), td::FormatError,
                      "missing.pt", "cannot open");
}

// ---- the StateDict container ---------------------------------------------------------------

TEST(StateDictContainer, InsertReplaceEraseAndLookups) {
  td::StateDict sd;
  sd.insert("a", torch::zeros({1}));
  sd.insert("b", torch::ones({1}));
  sd.insert("a", torch::full({1}, 2.));  // replaced in place
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(sd.tensor("a").item<float>(), 2.f);
  EXPECT_TRUE(sd.erase("a"));
  EXPECT_FALSE(sd.erase("a"));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"b"}));
  EXPECT_EQ(sd.tensor("b").item<float>(), 1.f);  // the index follows the erase
  EXPECT_EQ(sd.find("a"), nullptr);
  TD_EXPECT_THROW_MSG(sd.at("zz"), td::KeyError, "'zz'", "['b']");
  TD_EXPECT_THROW_MSG(sd.at("b").nested(), td::TypeError, "a tensor", "nested");
  EXPECT_FALSE(sd.has_metadata());
  sd.set_metadata("", plain_meta({1}));
  sd.set_metadata("x", plain_meta({1}));
  sd.set_metadata("", plain_meta({}));  // replaced in place
  EXPECT_EQ(metadata_prefixes(sd), (std::vector<std::string>{"", "x"}));
  EXPECT_EQ(sd.find_metadata("")->batch_size, Shape{});
  EXPECT_EQ(sd.find_metadata("y"), nullptr);
}

TEST(StateDictPickle, UnwritablePathIsAStorageError) {
  const std::string path = "/nonexistent-dir-td/sd.pt";
  TD_EXPECT_THROW_MSG(td::save_state_dict(spec_example().state_dict(), path), td::StorageError,
                      path.c_str());
}

// Python writes a NonTensorStack as a node of members; until that layout is
// produced, the entry is refused by name rather than silently dropped.
TEST(StateDictLayout, NonTensorStackIsRefusedNamingTheKey) {
  td::TensorDict d({{"a", torch::zeros({2})}}, {2});
  d.set({"sub", "b"}, torch::zeros({2}));
  d.set_non_tensor_stack({"sub", "s"}, json::array({1, 2}));
  for (bool flatten : {true, false})
    TD_EXPECT_THROW_MSG(d.state_dict({.flatten = flatten}), td::TypeError,
                        "('sub', 's') is a NonTensorStack");
}
