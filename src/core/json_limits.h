#pragma once
// What a JSON value must be to enter a tensordict as a non-tensor, and the
// nesting bound every JSON reader of the library shares. Not installed.

#include <tensordict/nested_key.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string_view>

namespace tensordict::detail {

/// The deepest nesting (of JSON lists/objects, of nested tensordicts in a
/// file or a schema) the library accepts; deeper input is a FormatError (a
/// SchemaError for schemas, a ValueError for a value being set) instead of a
/// stack overflow in a recursive reader or writer. Python's own json cannot
/// write much deeper (recursion limit 1000). Documented in docs/errors.md.
inline constexpr int kMaxNestingDepth = 512;

/// The nesting depth of a parsed value (a scalar is 0), counted without
/// recursion; stops counting past `limit`.
int json_depth(const nlohmann::ordered_json& j, int limit = kMaxNestingDepth);
int json_depth(const nlohmann::json& j, int limit = kMaxNestingDepth);

/// The offset of the first byte of `text` that does not belong to a
/// well-formed UTF-8 sequence (overlong forms, surrogates and code points past
/// U+10FFFF included, as JSON readers refuse them), or nullopt.
std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept;

/// Checks a non-tensor value before it is stored at `key`: ValueError naming
/// the key when a string in it (or an object key) is not valid UTF-8, which
/// no JSON writer can save and Python could not read, or when it is nested
/// deeper than kMaxNestingDepth. Walks the value without recursion.
void check_non_tensor_value(const nlohmann::json& value, const NestedKey& key);

}  // namespace tensordict::detail
