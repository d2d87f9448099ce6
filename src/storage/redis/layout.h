#pragma once
// Spellings of Python's Redis layout shared by the stores (docs/formats.md, "Redis keys"):
// stdlib-JSON lists of sizes and the uuid4 td_id.

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

namespace tensordict::detail::redis {

// Python's json.dumps of a list of ints: "[5, 2]", "[]".
inline std::string json_list(c10::IntArrayRef v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Python's str(uuid.uuid4()).
inline std::string uuid4() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  uint64_t a = gen(), b = gen();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  char buf[37];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

}  // namespace tensordict::detail::redis
