// Values refused where they enter a tensordict (issue #32), so that no save,
// store or send meets them later: keys and non-tensor strings that are not
// UTF-8, non-tensor JSON nested past the loaders' bound, and in-place writes
// into expanded leaves, which LibTorch refuses halfway through.
#include "reliability/reliability.h"

#include <tensordict/tensordict.h>

#include <torch/torch.h>

namespace td = tensordict;
using namespace td_rel;

namespace {

template <class E, class F>
::testing::AssertionResult throws_typed(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const E& e) {
    if (std::string(e.what()).find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << e.what();
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception";
}

nlohmann::json nested_lists(int depth) {
  nlohmann::json j = 1;
  for (int i = 0; i < depth; ++i) j = nlohmann::json::array({std::move(j)});
  return j;
}

}  // namespace

TEST_F(Reliability, NonTensorStringsThatAreNotUtf8AreRefusedWhenSet) {
  td::TensorDict t({{"x", torch::zeros({2})}}, {2});
  EXPECT_TRUE(throws_typed<td::ValueError>([&] { t.set_non_tensor("s", "caf\xe9"); },
                                           "key 's': a string is not valid UTF-8 (byte 3"));
  // Inside lists and objects, and as an object key.
  EXPECT_TRUE(throws_typed<td::ValueError>(
      [&] {
        t.set_non_tensor({"n", "s"}, nlohmann::json{{"a", {1, "\xc0\xaf"}}});
      },
      "('n', 's')"));
  nlohmann::json bad_key = nlohmann::json::object();
  bad_key["\xff"] = 1;
  EXPECT_TRUE(
      throws_typed<td::ValueError>([&] { t.set_non_tensor("o", bad_key); }, "an object key"));
  // Surrogates (CESU-8) and code points past U+10FFFF are not UTF-8 either.
  EXPECT_TRUE(
      throws_typed<td::ValueError>([&] { t.set_non_tensor("s", "\xed\xa0\x80"); }, "UTF-8"));
  EXPECT_TRUE(
      throws_typed<td::ValueError>([&] { t.set_non_tensor("s", "\xf4\x90\x80\x80"); }, "UTF-8"));
  // One bad value in a stack refuses the stack.
  EXPECT_TRUE(throws_typed<td::ValueError>(
      [&] {
        t.set("st", td::NonTensorStack(std::vector<nlohmann::json>{"ok", "\x80"}));
      },
      "key 'st'"));
  EXPECT_TRUE(throws_typed<td::ValueError>(
      [&] {
        t.set_non_tensor_stack("st", nlohmann::json::array({"ok", "bad\xfe"}));
      },
      "UTF-8"));
  // Nothing was stored, not even the intermediate level.
  EXPECT_EQ(t.keys(true), std::vector<td::NestedKey>{"x"});
  // Valid multi-byte text goes in, and through a save.
  t.set_non_tensor("s", "caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80");
  auto back = td::load_memmap(t.memmap((root / "m").string()).saved_path().value());
  EXPECT_EQ(back.get_non_tensor("s"), "caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80");
}

TEST_F(Reliability, KeysThatAreNotUtf8AreRefusedWhereTheyEnter) {
  td::TensorDict t({{"x", torch::zeros({2})}}, {2});
  EXPECT_TRUE(throws_typed<td::KeyError>([&] { t.set("bad\xff", torch::zeros({2})); },
                                         "not valid UTF-8 (byte 3)"));
  EXPECT_TRUE(throws_typed<td::KeyError>(
      [&] {
        t.set({"ok", "bad\xff"}, torch::zeros({2}));
      },
      "not valid UTF-8"));
  EXPECT_TRUE(throws_typed<td::KeyError>([&] { t.create_nested({"\xc3"}); }, "UTF-8"));
  EXPECT_TRUE(throws_typed<td::KeyError>([&] { t.rename_key_("x", "\xe2\x82"); }, "UTF-8"));
  EXPECT_TRUE(throws_typed<td::KeyError>(
      [&] {
        td::TensorDict({{"ok", torch::ones({2})}, {"bad\xff", torch::zeros({2})}}, {2});
      },
      "UTF-8"));
  EXPECT_EQ(t.keys(true), std::vector<td::NestedKey>{"x"});
}

TEST_F(Reliability, NonTensorJsonDeeperThanTheLoadersReadIsRefusedWhenSet) {
  td::TensorDict t({}, {});
  EXPECT_TRUE(throws_typed<td::ValueError>([&] { t.set_non_tensor("deep", nested_lists(513)); },
                                           "nested deeper than 512"));
  // A value this deep would overflow the stack of the recursive JSON writer.
  EXPECT_TRUE(throws_typed<td::ValueError>([&] { t.set_non_tensor("deep", nested_lists(200000)); },
                                           "nested deeper than 512"));
  EXPECT_FALSE(t.contains("deep"));
  // The deepest accepted value saves and loads back.
  t.set_non_tensor("deep", nested_lists(500));
  auto back = td::load_memmap(t.memmap((root / "m").string()).saved_path().value());
  EXPECT_EQ(back.get_non_tensor("deep"), nested_lists(500));
}

TEST_F(Reliability, InPlaceWritesIntoAnExpandedLeafAreValueErrorsThatWriteNothing) {
  auto fresh = [] {
    td::TensorDict t({{"a", torch::zeros({4, 3})}, {"e", torch::zeros({1, 3}).expand({4, 3})}},
                     {4});
    return t;
  };
  auto t = fresh();
  EXPECT_TRUE(throws_typed<td::ValueError>(
      [&] {
        t.set_("e", torch::ones({4, 3}));
      },
      "set_(): cannot write into 'e' in place"));
  // update_ checks every entry before writing any: "a" stays zero.
  td::TensorDict src({{"a", torch::ones({4, 3})}, {"e", torch::ones({4, 3})}}, {4});
  EXPECT_TRUE(throws_typed<td::ValueError>([&] { t.update_(src); }, "'e'"));
  EXPECT_EQ(t.get("a").sum().item<float>(), 0.0f);
  // A row write: td[1] = row.
  EXPECT_TRUE(throws_typed<td::ValueError>([&] { t.index_put_({1}, src[1]); }, "index_put_"));
  EXPECT_EQ(t.get("a").sum().item<float>(), 0.0f);
  // In-place arithmetic over every leaf.
  EXPECT_TRUE(throws_typed<td::ValueError>([&] { t.add_(1); }, "expanded"));
  EXPECT_TRUE(throws_typed<td::ValueError>(
      [&] { t.apply_([](const at::Tensor& x) { return x + 1; }); }, "expanded"));
  EXPECT_EQ(t.get("a").sum().item<float>(), 0.0f);
  // set() replaces the leaf instead, which is allowed.
  t.set("e", torch::ones({4, 3}));
  t.set_("e", torch::full({4, 3}, 2.0));
  EXPECT_EQ(t.get("e").sum().item<float>(), 24.0f);
}

TEST_F(Reliability, ADirectoryNamedByBytesThatAreNotUtf8IsAFormatError) {
  // Python 0.3.2's layout names nested tensordicts by raw directory names,
  // which a hostile or foreign file system may hold as any bytes.
  const std::string kMeta =
      R"({"shape": [2], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})";
  const fs::path dir = root / "p";
  fs::create_directories(dir / "bad\xff");
  write_text(dir / "meta.json", kMeta);
  write_text(dir / "bad\xff" / "meta.json", kMeta);
  EXPECT_TRUE(throws_typed<td::FormatError>([&] { td::load_memmap(dir.string()); }, "UTF-8"));
}
