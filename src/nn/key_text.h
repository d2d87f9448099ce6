#pragma once
// Keys as error messages spell them, shared by the modules of tensordict::nn.
#include <tensordict/nested_key.h>

#include <string>
#include <vector>

namespace tensordict::nn::detail {

/// "'a', ('next', 'obs')": the keys' reprs joined by ", ".
inline std::string join_keys(const std::vector<NestedKey>& keys) {
  std::string joined;
  for (const auto& key : keys) {
    if (!joined.empty()) joined += ", ";
    joined += key.repr();
  }
  return joined;
}

}  // namespace tensordict::nn::detail
