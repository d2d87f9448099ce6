// JSON as Python writes it (formats spec §0.4): see json_io.h.
#include "formats/json_io.h"

#include <cstdint>
#include <limits>

namespace tensordict::detail {

using ojson = nlohmann::ordered_json;

namespace {

const char* kNaN = "\x01tensordict:NaN";
const char* kInf = "\x01tensordict:Infinity";
const char* kNegInf = "\x01tensordict:-Infinity";

// Python's json writes NaN/Infinity/-Infinity tokens; nlohmann does not read
// them. Replace them (outside strings) by sentinel strings, then restore.
std::string quote_special_numbers(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
    } else if (text.compare(i, 3, "NaN") == 0) {
      out += std::string("\"") + "\\u0001tensordict:NaN\"";
      i += 2;
    } else if (text.compare(i, 8, "Infinity") == 0) {
      out += std::string("\"") + "\\u0001tensordict:Infinity\"";
      i += 7;
    } else if (text.compare(i, 9, "-Infinity") == 0) {
      out += std::string("\"") + "\\u0001tensordict:-Infinity\"";
      i += 8;
    } else {
      out += c;
    }
  }
  return out;
}

void restore_special_numbers(ojson& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == kNaN)
      j = std::numeric_limits<double>::quiet_NaN();
    else if (s == kInf)
      j = std::numeric_limits<double>::infinity();
    else if (s == kNegInf)
      j = -std::numeric_limits<double>::infinity();
  } else if (j.is_structured()) {
    for (auto& v : j) restore_special_numbers(v);
  }
}

}  // namespace

ojson parse_python_json(const std::string& text) {
  ojson j = ojson::parse(quote_special_numbers(text));
  restore_special_numbers(j);
  return j;
}

// Converted element by element: a dump()/parse() round trip would turn the
// NaN/Infinity values read above into null.
nlohmann::json to_plain(const ojson& j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = to_plain(it.value());
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(to_plain(v));
    return out;
  }
  switch (j.type()) {
    case ojson::value_t::null:
      return nullptr;
    case ojson::value_t::boolean:
      return j.get<bool>();
    case ojson::value_t::string:
      return j.get<std::string>();
    case ojson::value_t::number_integer:
      return j.get<int64_t>();
    case ojson::value_t::number_unsigned:
      return j.get<uint64_t>();
    case ojson::value_t::number_float:
      return j.get<double>();
    default:
      return nlohmann::json::parse(j.dump());
  }
}

}  // namespace tensordict::detail
