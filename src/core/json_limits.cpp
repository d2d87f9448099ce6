// Checks on JSON values entering a tensordict: see json_limits.h.
#include "core/json_limits.h"

#include <tensordict/errors.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::detail {

namespace {

template <class Json>
int depth_of(const Json& root, int limit) {
  std::vector<std::pair<const Json*, int>> todo{{&root, 0}};
  int deepest = 0;
  while (!todo.empty()) {
    auto [j, d] = todo.back();
    todo.pop_back();
    if (!j->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    if (deepest > limit) return deepest;
    for (const auto& v : *j) todo.emplace_back(&v, d + 1);
  }
  return deepest;
}

}  // namespace

int json_depth(const nlohmann::ordered_json& j, int limit) { return depth_of(j, limit); }
int json_depth(const nlohmann::json& j, int limit) { return depth_of(j, limit); }

std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::nullopt;
}

void check_non_tensor_value(const nlohmann::json& value, const NestedKey& key) {
  auto check_text = [&](const std::string& text, const char* what) {
    if (auto at = first_invalid_utf8(text))
      throw ValueError("non-tensor value for key " + key.repr() + ": " + what +
                       " is not valid UTF-8 (byte " + std::to_string(*at) + " of " +
                       std::to_string(text.size()) +
                       "); JSON, and so every format that saves non-tensors, holds text only: "
                       "store bytes as a uint8 tensor instead");
  };
  // Scalars, the usual case, need no walk.
  if (value.is_string()) return check_text(value.get_ref<const std::string&>(), "a string");
  if (!value.is_structured()) return;
  std::vector<std::pair<const nlohmann::json*, int>> todo{{&value, 0}};
  while (!todo.empty()) {
    auto [j, depth] = todo.back();
    todo.pop_back();
    if (j->is_string()) {
      check_text(j->get_ref<const std::string&>(), "a string");
      continue;
    }
    if (!j->is_structured()) continue;
    if (depth + 1 > kMaxNestingDepth)
      throw ValueError("non-tensor value for key " + key.repr() +
                       ": lists/objects nested deeper than " + std::to_string(kMaxNestingDepth) +
                       " levels, which no loader of the library reads back");
    if (j->is_object())
      for (auto it = j->begin(); it != j->end(); ++it) check_text(it.key(), "an object key");
    for (const auto& v : *j) todo.emplace_back(&v, depth + 1);
  }
}

}  // namespace tensordict::detail
