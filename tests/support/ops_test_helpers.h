// Helpers shared by the tensor-like operation tests (index, index_put_, shape
// ops, stack/cat, math): a nested mixed-dtype fixture and leaf-by-leaf checks
// against the same torch op applied by hand.
#pragma once
#include "pch.h"

#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ops_test {

namespace td = tensordict;
using Shape = std::vector<int64_t>;
using Keys = std::vector<td::NestedKey>;

inline Shape batch_of(const td::TensorDictBase& t) { return t.batch_size().vec(); }
inline Shape sizes_of(const at::Tensor& t) { return t.sizes().vec(); }

/// batch [4, 3]:
///   a       float  [4, 3, 2]
///   b       int64  [4, 3]
///   c       bool   [4, 3, 1]
///   nested  TensorDict batch [4, 3]
///     d       float  [4, 3, 5]
///     deeper  TensorDict batch [4, 3, 2]  (one more batch dim than the root)
///       e       double [4, 3, 2]
///       f       int32  [4, 3, 2, 3]
///   label   non-tensor "x"
/// Every tensor holds distinct values.
inline td::TensorDict make_fixture() {
  auto a = torch::arange(24, torch::kFloat).reshape({4, 3, 2}) * 0.5 - 3.0;
  auto b = torch::arange(12, torch::kLong).reshape({4, 3}) * 3 - 7;
  auto c = (torch::arange(12).reshape({4, 3, 1}) % 3) == 0;
  auto d = torch::arange(60, torch::kFloat).reshape({4, 3, 5}) / 7.0 - 2.0;
  auto e = torch::arange(24, torch::kDouble).reshape({4, 3, 2}) * -1.25 + 4.0;
  auto f = torch::arange(72, torch::kInt).reshape({4, 3, 2, 3}) - 30;
  td::TensorDict deeper({{"e", e}, {"f", f}}, {4, 3, 2});
  td::TensorDict nested({{"d", d}, {"deeper", deeper}}, {4, 3});
  return td::TensorDict({{"a", a}, {"b", b}, {"c", c}, {"nested", nested}, {"label", "x"}}, {4, 3});
}

/// The tensor leaves of make_fixture(), in insertion order.
inline Keys fixture_leaves() {
  return {"a", "b", "c", {"nested", "d"}, {"nested", "deeper", "e"}, {"nested", "deeper", "f"}};
}

using LeafFn = std::function<at::Tensor(const at::Tensor&, const td::NestedKey&)>;

/// `result` has exactly the tensor leaves of `source`, and each one equals
/// fn(the leaf of source) in shape, dtype and values.
inline void expect_leafwise(const td::TensorDictBase& result, const td::TensorDictBase& source,
                            const LeafFn& fn) {
  auto ks = source.keys(/*include_nested=*/true, /*leaves_only=*/true);
  auto kr = result.keys(true, true);
  EXPECT_EQ(std::set<td::NestedKey>(kr.begin(), kr.end()),
            std::set<td::NestedKey>(ks.begin(), ks.end()));
  for (const auto& k : ks) {
    if (!result.contains(k)) {
      ADD_FAILURE() << "leaf " << k << " missing from the result";
      continue;
    }
    at::Tensor expected = fn(source.get(k), k);
    at::Tensor got = result.get(k);
    EXPECT_EQ(sizes_of(got), sizes_of(expected)) << "shape of " << k;
    EXPECT_EQ(got.scalar_type(), expected.scalar_type()) << "dtype of " << k;
    EXPECT_TRUE(got.sizes() == expected.sizes() && got.scalar_type() == expected.scalar_type() &&
                torch::equal(got, expected))
        << "values of " << k << ":\n got " << got << "\n expected " << expected;
  }
}

/// A fixture-shaped result: root and "nested" have batch `root`, "deeper"
/// has `root` + `deeper_extra`, and "label" is "x" with batch `root`.
inline void expect_fixture_batches(const td::TensorDictBase& r, const Shape& root,
                                   const Shape& deeper_extra = {2}) {
  EXPECT_EQ(batch_of(r), root);
  ASSERT_TRUE(r.contains("nested"));
  EXPECT_EQ(batch_of(r.get_tensordict("nested")), root) << "batch of 'nested'";
  Shape deeper = root;
  deeper.insert(deeper.end(), deeper_extra.begin(), deeper_extra.end());
  EXPECT_EQ(batch_of(r.get_tensordict({"nested", "deeper"})), deeper)
      << "batch of ('nested', 'deeper')";
  ASSERT_TRUE(r.is_non_tensor("label"));
  EXPECT_EQ(r.get_non_tensor("label"), nlohmann::json("x"));
  EXPECT_EQ(r.at("label").non_tensor().batch_size().vec(), root) << "batch of 'label'";
}

/// Every key of `t` in one set (nested, all kinds).
inline std::set<td::NestedKey> key_set(const td::TensorDictBase& t) {
  auto ks = t.keys(true);
  return {ks.begin(), ks.end()};
}

/// A record of a tensordict: its keys, batch sizes, the identity and a copy of
/// every tensor, every non-tensor. expect_unchanged() fails on any difference.
struct Frozen {
  Keys keys;
  std::vector<std::pair<td::NestedKey, Shape>> batches;
  std::vector<std::pair<td::NestedKey, std::pair<at::Tensor, at::Tensor>>> leaves;
  std::vector<std::pair<td::NestedKey, nlohmann::json>> non_tensors;

  static Frozen of(const td::TensorDictBase& t) {
    Frozen f;
    f.keys = t.keys(true);
    f.batches.emplace_back(td::NestedKey(), batch_of(t));
    for (const auto& [k, v] : t.items(true)) {
      if (v.is_tensor())
        f.leaves.push_back({k, {v.tensor(), v.tensor().clone()}});
      else if (v.is_tensordict())
        f.batches.emplace_back(k, batch_of(v.tensordict()));
    }
    f.non_tensors = t.non_tensor_items(true);
    return f;
  }

  void expect_unchanged(const td::TensorDictBase& t) const {
    EXPECT_EQ(t.keys(true), keys);
    for (const auto& [k, b] : batches)
      EXPECT_EQ(k.empty() ? batch_of(t) : batch_of(t.get_tensordict(k)), b)
          << "batch size of " << k;
    for (const auto& [k, pair] : leaves) {
      if (!t.contains(k)) {
        ADD_FAILURE() << k << " disappeared";
        continue;
      }
      at::Tensor now = t.get(k);
      EXPECT_TRUE(now.is_same(pair.first)) << "storage of " << k << " replaced";
      EXPECT_TRUE(torch::equal(now, pair.second)) << "values of " << k << " changed";
    }
    EXPECT_EQ(t.non_tensor_items(true), non_tensors);
  }
};

inline void expect_contains(const std::string& what, std::initializer_list<std::string> needles) {
  for (const auto& n : needles)
    EXPECT_NE(what.find(n), std::string::npos)
        << "error message lacks \"" << n << "\":\n  " << what;
}

}  // namespace ops_test

/// EXPECT that `stmt` throws `type` (or a subclass) whose what() contains each
/// of the following strings. Any other exception is a failure.
#define OPS_EXPECT_THROW_MSG(stmt, type, ...)                              \
  do {                                                                     \
    try {                                                                  \
      stmt;                                                                \
      ADD_FAILURE() << "expected " #type " from: " #stmt;                  \
    } catch (const type& ops_error_) {                                     \
      ::ops_test::expect_contains(ops_error_.what(), {__VA_ARGS__});       \
    } catch (const std::exception& ops_other_) {                           \
      ADD_FAILURE() << "expected " #type " from: " #stmt                   \
                    << "\n  got another exception: " << ops_other_.what(); \
    }                                                                      \
  } while (0)
