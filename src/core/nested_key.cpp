#include <tensordict/nested_key.h>

#include <algorithm>

namespace tensordict {

NestedKey NestedKey::parent() const {
  NestedKey out;
  if (parts_.size() > 1) out.parts_.assign(parts_.begin(), parts_.end() - 1);
  return out;
}

NestedKey NestedKey::child(std::string_view part) const {
  NestedKey out = *this;
  out.parts_.emplace_back(part);
  return out;
}

NestedKey NestedKey::operator+(const NestedKey& other) const {
  NestedKey out = *this;
  out.parts_.append(other.parts_.begin(), other.parts_.end());
  return out;
}

std::string NestedKey::join(std::string_view sep) const {
  std::string out;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (i) out += sep;
    out += parts_[i];
  }
  return out;
}

std::string NestedKey::repr() const {
  if (parts_.size() == 1) return "'" + parts_[0] + "'";
  std::string out = "(";
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (i) out += ", ";
    out += "'" + parts_[i] + "'";
  }
  if (parts_.size() == 1) out += ",";
  return out + ")";
}

std::strong_ordering operator<=>(const NestedKey& a, const NestedKey& b) noexcept {
  return std::lexicographical_compare_three_way(a.parts_.begin(), a.parts_.end(), b.parts_.begin(),
                                                b.parts_.end());
}

std::ostream& operator<<(std::ostream& os, const NestedKey& key) { return os << key.repr(); }

std::size_t NestedKeyHash::operator()(const NestedKey& key) const noexcept {
  std::size_t h = 0x9e3779b97f4a7c15ULL;
  for (const auto& p : key)
    h ^= std::hash<std::string>{}(p) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

}  // namespace tensordict
