// Helpers shared by the core unit tests (construction, access, mutation, lock).
#pragma once
#include "pch.h"

#include <string>
#include <vector>

namespace td_test {

namespace td = tensordict;
using Shape = std::vector<int64_t>;

inline Shape batch_of(const td::TensorDictBase& t) { return t.batch_size().vec(); }

/// Fails the test unless `what` contains every string of `needles`.
inline void expect_message_contains(const std::string& what,
                                    std::initializer_list<const char*> needles) {
  for (const char* n : needles)
    EXPECT_NE(what.find(n), std::string::npos)
        << "error message lacks \"" << n << "\":\n  " << what;
}

/// A record of everything stored in a tensordict: the key tree, the identity
/// and a copy of the values of every tensor, and every non-tensor value.
struct Snapshot {
  struct Leaf {
    td::NestedKey key;
    at::Tensor stored;  // the tensor object itself (identity)
    at::Tensor copy;    // its values at snapshot time
  };
  std::vector<td::NestedKey> keys;
  std::vector<Leaf> leaves;
  std::vector<std::pair<td::NestedKey, nlohmann::json>> non_tensors;
  std::vector<std::pair<td::NestedKey, Shape>> batch_sizes;

  static Snapshot of(const td::TensorDictBase& t) {
    Snapshot s;
    s.keys = t.keys(/*include_nested=*/true);
    s.batch_sizes.emplace_back(td::NestedKey(), batch_of(t));
    for (const auto& [k, v] : t.items(/*include_nested=*/true)) {
      if (v.is_tensor())
        s.leaves.push_back({k, v.tensor(), v.tensor().clone()});
      else if (v.is_tensordict())
        s.batch_sizes.emplace_back(k, batch_of(v.tensordict()));
    }
    s.non_tensors = t.non_tensor_items(/*include_nested=*/true);
    return s;
  }

  /// Fails the test unless `t` holds exactly what was recorded.
  void expect_unchanged(const td::TensorDictBase& t) const {
    EXPECT_EQ(t.keys(true), keys);
    for (const auto& [k, b] : batch_sizes)
      EXPECT_EQ(k.empty() ? batch_of(t) : batch_of(t.get_tensordict(k)), b)
          << "batch size of " << k;
    for (const auto& leaf : leaves) {
      ASSERT_TRUE(t.contains(leaf.key)) << leaf.key;
      at::Tensor now = t.get(leaf.key);
      EXPECT_TRUE(now.is_same(leaf.stored)) << "storage of " << leaf.key << " replaced";
      EXPECT_TRUE(at::equal(now, leaf.copy)) << "values of " << leaf.key << " changed";
    }
    EXPECT_EQ(t.non_tensor_items(true), non_tensors);
  }
};

}  // namespace td_test

/// EXPECT that `stmt` throws exactly `type` (or a subclass) and that what()
/// contains each of the following strings.
#define TD_EXPECT_THROW_MSG(stmt, type, ...)                                    \
  do {                                                                          \
    try {                                                                       \
      stmt;                                                                     \
      ADD_FAILURE() << "expected " #type " from: " #stmt;                       \
    } catch (const type& td_test_error_) {                                      \
      ::td_test::expect_message_contains(td_test_error_.what(), {__VA_ARGS__}); \
    }                                                                           \
  } while (0)
