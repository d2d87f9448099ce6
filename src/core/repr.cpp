// Python-compatible repr of tensordicts.
#include "core/internal.h"
#include "core/lazy_dispatch.h"

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
  os << "Tensor(shape=" << detail::format_torch_size(t.sizes()) << ", device=" << t.device().str()
     << ", dtype=" << detail::torch_dtype_repr(t.scalar_type())
     << ", is_shared=" << (shared ? "True" : "False") << ")";
  return os.str();
}

std::string meta_repr(const TensorMeta& m, bool shared) {
  std::ostringstream os;
  os << "Tensor(shape=" << detail::format_torch_size(m.shape) << ", device=" << m.device.str()
     << ", dtype=" << detail::torch_dtype_repr(m.dtype)
     << ", is_shared=" << (shared ? "True" : "False") << ")";
  return os.str();
}

std::string td_repr(const TensorDictBase& td);

// "fields={...}" of the given keys of a node, sorted.
std::string fields_block(const Node& n, const std::vector<std::string>& keys, const char* label) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (const auto& k : keys) {
    std::string s;
    const auto kind = n.holds_values() ? std::nullopt : n.kind(k);
    if (kind == EntryKind::Tensor) {
      // Metadata only: no data read from storages, ragged lazy leaves show -1.
      s = meta_repr(*n.tensor_meta(k), detail::is_shared_node(n));
    } else if (auto lazy = kind == EntryKind::NonTensorStack
                               ? detail::lazy_dispatch(n, detail::lazy_non_tensor_repr, k)
                               : std::nullopt) {
      s = std::move(*lazy);
    } else {
      auto v = n.find(k);
      switch (v->kind()) {
        case EntryKind::Tensor:
          s = tensor_repr(v->tensor(), detail::is_shared_node(n));
          break;
        case EntryKind::TensorDict:
          s = td_repr(v->tensordict());
          break;
        case EntryKind::NonTensor:
          s = v->non_tensor().repr();
          break;
        case EntryKind::NonTensorStack:
          s = v->non_tensor_stack().repr();
          break;
      }
    }
    fields.emplace_back(k, k + ": " + s);
  }
  std::sort(fields.begin(), fields.end());
  std::string body = "\n";
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) body += ",\n";
    body += fields[i].second;
  }
  return std::string(label) + "={" + indent(body, "    ") + "}";
}

// Python's "exclusive_fields={i -> fields...}" of a lazy stack: the keys a
// member has beyond the common ones.
std::string exclusive_block(const detail::LazyStackNode& ls) {
  auto common = ls.keys();
  std::string body;
  bool any = false;
  for (std::size_t i = 0; i < ls.members().size(); ++i) {
    const Node& m = ls.members()[i].node();
    std::vector<std::string> extra;
    for (const auto& k : m.keys())
      if (!std::binary_search(common.begin(), common.end(), k)) extra.push_back(k);
    if (extra.empty()) continue;
    std::string f = fields_block(m, extra, "");
    // Drop the "={" ... "}" wrapper of fields_block for the per-member list.
    f = f.substr(2, f.size() - 3);
    body += (any ? ",\n" : "\n") + std::to_string(i) + " ->" + f;
    any = true;
  }
  if (!any) return "";
  return "exclusive_fields={" + indent(body, "    ") + "}";
}

std::string td_repr(const TensorDictBase& td) {
  const Node& n = td.node();
  std::string inner = indent(fields_block(n, n.keys(), "fields"), "    ") + ",\n";
  // A lazy stack also prints its members' exclusive keys and its stack dim.
  const auto lazy = detail::lazy_dispatch(td, [](const detail::LazyStackNode& ls) {
    return std::make_pair(exclusive_block(ls), ls.stack_dim());
  });
  if (lazy && !lazy->first.empty()) inner += indent(lazy->first, "    ") + ",\n";
  std::string device = n.device() ? n.device()->str() : std::string("None");
  inner +=
      indent("batch_size=" + detail::format_torch_size(n.batch_size()), "    ") + ",\n" +
      indent("device=" + device, "    ") + ",\n" +
      indent(std::string("is_shared=") + (detail::is_shared_node(n) ? "True" : "False"), "    ");
  if (lazy) inner += ",\n" + indent("stack_dim=" + std::to_string(lazy->second), "    ");
  return n.type_name() + "(\n" + inner + ")";
}

}  // namespace

std::string TensorDictBase::repr() const { return td_repr(*this); }

std::ostream& operator<<(std::ostream& os, const TensorDictBase& td) { return os << td.repr(); }

}  // namespace tensordict
