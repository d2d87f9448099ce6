#pragma once
// What the error messages of tensordict::nn's modules say, shared by them (in
// tensordict::detail: a tensordict::nn::detail would hide the core's detail
// namespace from the component's headers).
#include <tensordict/nested_key.h>

#include <c10/util/Exception.h>

#include <exception>

#include <string>
#include <vector>

namespace tensordict::detail {

/// "'a', ('next', 'obs')": the keys' reprs joined by ", ".
inline std::string join_keys(const std::vector<NestedKey>& keys) {
  std::string joined;
  for (const auto& key : keys) {
    if (!joined.empty()) joined += ", ";
    joined += key.repr();
  }
  return joined;
}

/// The message of an exception LibTorch or a model runtime threw, without
/// LibTorch's C++ backtrace.
inline std::string runtime_message(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e))
    return error->what_without_backtrace();
  return e.what();
}

}  // namespace tensordict::detail
