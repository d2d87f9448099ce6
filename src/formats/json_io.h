#pragma once
// JSON as Python writes it (formats spec §0.4), shared by the memmap loader
// and the consolidated format. Not installed.

#include <nlohmann/json.hpp>

#include <string>

namespace tensordict::detail {

/// Parses JSON text written by Python's json or orjson, including the
/// NaN / Infinity / -Infinity tokens that nlohmann does not read. Object keys
/// keep their order. Throws nlohmann::json::exception on malformed text.
nlohmann::ordered_json parse_python_json(const std::string& text);

/// `j` as a plain nlohmann::json (objects sorted by key), NaN and infinities
/// kept.
nlohmann::json to_plain(const nlohmann::ordered_json& j);

}  // namespace tensordict::detail
