#pragma once
/// @file nested_key.h
/// NestedKey: a key of a tensordict, either one string ("obs") or a path of
/// strings ({"next", "obs"}). Python's ("a",) and "a" are the same key here too.

#include <c10/util/SmallVector.h>

#include <compare>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict {

/// A path of string keys into a nested tensordict.
///
/// Implicitly constructible from a string (one level) or a braced list of
/// strings (a path), so every API taking a NestedKey reads like Python:
/// @code
///   td.get("obs");              // one level
///   td.get({"next", "obs"});    // nested
/// @endcode
/// Paths of up to four parts do not allocate beyond the strings themselves.
class NestedKey {
 public:
  using Parts = c10::SmallVector<std::string, 4>;

  NestedKey() = default;
  NestedKey(const char* key) : parts_{std::string(key)} {}       // NOLINT(implicit)
  NestedKey(std::string key) : parts_{std::move(key)} {}         // NOLINT(implicit)
  NestedKey(std::string_view key) : parts_{std::string(key)} {}  // NOLINT
  NestedKey(std::initializer_list<std::string_view> parts) {     // NOLINT
    parts_.reserve(parts.size());
    for (auto p : parts) parts_.emplace_back(p);
  }
  explicit NestedKey(const std::vector<std::string>& parts) : parts_(parts.begin(), parts.end()) {}

  /// Number of levels (1 for a plain string key, 0 for the empty key).
  std::size_t size() const noexcept { return parts_.size(); }
  bool empty() const noexcept { return parts_.empty(); }
  /// True when the key has more than one level.
  bool is_nested() const noexcept { return parts_.size() > 1; }

  const std::string& operator[](std::size_t i) const { return parts_[i]; }
  const std::string& front() const { return parts_.front(); }
  const std::string& back() const { return parts_.back(); }
  auto begin() const noexcept { return parts_.begin(); }
  auto end() const noexcept { return parts_.end(); }
  const Parts& parts() const noexcept { return parts_; }
  std::vector<std::string> to_vector() const {
    return std::vector<std::string>(parts_.begin(), parts_.end());
  }

  /// The key of the parent level ({"a","b","c"} -> {"a","b"}).
  NestedKey parent() const;
  /// This key with `part` appended as a deeper level.
  NestedKey child(std::string_view part) const;
  /// The concatenation of two paths.
  NestedKey operator+(const NestedKey& other) const;

  /// The parts joined with `sep` ("a.b.c" for the default separator).
  std::string join(std::string_view sep = ".") const;
  /// Python's spelling: 'a' for one level, ('a', 'b') for a path.
  std::string repr() const;

  friend bool operator==(const NestedKey& a, const NestedKey& b) noexcept {
    return std::equal(a.parts_.begin(), a.parts_.end(), b.parts_.begin(), b.parts_.end());
  }
  friend std::strong_ordering operator<=>(const NestedKey& a, const NestedKey& b) noexcept;

 private:
  Parts parts_;
};

/// Prints NestedKey::repr().
std::ostream& operator<<(std::ostream& os, const NestedKey& key);

/// Hash of a NestedKey, for unordered containers.
struct NestedKeyHash {
  std::size_t operator()(const NestedKey& key) const noexcept;
};

}  // namespace tensordict
