// Python-compatible repr of tensordicts.
#include "internal.h"

#include <algorithm>
#include <ostream>
#include <sstream>

namespace tensordict {
namespace {

// textwrap.indent: prefixes every non-empty line.
std::string indent(const std::string& s, const std::string& pad) {
  std::string out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto end = s.find('\n', start);
    std::string line = s.substr(start, end == std::string::npos ? end : end - start);
    if (!line.empty()) out += pad;
    out += line;
    if (end == std::string::npos) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string tensor_repr(const at::Tensor& t, bool shared) {
  std::ostringstream os;
  os << "Tensor(shape=" << detail::format_torch_size(t.sizes())
     << ", device=" << t.device().str()
     << ", dtype=" << detail::torch_dtype_repr(t.scalar_type())
     << ", is_shared=" << (shared ? "True" : "False") << ")";
  return os.str();
}

std::string td_repr(const TensorDictBase& td) {
  const Node& n = td.node();
  std::vector<std::pair<std::string, std::string>> fields;
  for (const auto& k : n.keys()) {
    auto v = n.find(k);
    std::string s;
    switch (v->kind()) {
      case EntryKind::Tensor: s = tensor_repr(v->tensor(), n.shared_flag()); break;
      case EntryKind::TensorDict: s = td_repr(v->tensordict()); break;
      case EntryKind::NonTensor: s = v->non_tensor().repr(); break;
    }
    fields.emplace_back(k, k + ": " + s);
  }
  std::sort(fields.begin(), fields.end());
  std::string body = "\n";
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) body += ",\n";
    body += fields[i].second;
  }
  std::string fields_str = "fields={" + indent(body, "    ") + "}";
  std::string device = n.device() ? n.device()->str() : std::string("None");
  std::string inner = indent(fields_str, "    ") + ",\n" +
                      indent("batch_size=" + detail::format_torch_size(n.batch_size()), "    ") +
                      ",\n" + indent("device=" + device, "    ") + ",\n" +
                      indent(std::string("is_shared=") + (n.shared_flag() ? "True" : "False"), "    ");
  return n.type_name() + "(\n" + inner + ")";
}

}  // namespace

std::string TensorDictBase::repr() const { return td_repr(*this); }

std::ostream& operator<<(std::ostream& os, const TensorDictBase& td) {
  return os << td.repr();
}

}  // namespace tensordict
