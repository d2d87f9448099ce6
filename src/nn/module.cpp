// Module interop: from_module, to_module, submodule, load_submodule
// (include/tensordict/module.h).
#include <tensordict/detail/format.h>
#include <tensordict/errors.h>
#include <tensordict/module.h>

#include "storage/memmap/mapped_file.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <string>
#include <utility>
#include <vector>

namespace tensordict {

namespace {

// The defined tensors of an OrderedDict of parameters or buffers.
template <class Dict>
void append_defined(const Dict& dict, std::vector<std::pair<std::string, at::Tensor>>& out) {
  for (const auto& item : dict)
    if (item.value().defined()) out.emplace_back(item.key(), item.value());
}

// The module's own parameters, then its own buffers (Python's order).
std::vector<std::pair<std::string, at::Tensor>> own_tensors(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  append_defined(m.named_parameters(/*recurse=*/false), out);
  append_defined(m.named_buffers(/*recurse=*/false), out);
  return out;
}

// nullopt when filter_empty drops the module (no tensor anywhere below it).
std::optional<TensorDict> collect(const torch::nn::Module& m, const FromModuleOptions& opt) {
  TensorDict out;
  for (auto& [name, t] : own_tensors(m)) out.set(name, std::move(t));
  for (const auto& child : m.named_children()) {
    if (!child.value()) continue;
    if (auto sub = collect(*child.value(), opt)) out.set(child.key(), *sub);
  }
  if (opt.filter_empty && out.num_keys() == 0) return std::nullopt;
  return out;
}

// "parameters ['weight', 'bias'], buffers [...], submodules [...]"
std::string describe_level(const torch::nn::Module& m) {
  std::vector<std::string> params, buffers, children;
  for (const auto& p : m.named_parameters(false))
    if (p.value().defined()) params.push_back(p.key());
  for (const auto& b : m.named_buffers(false))
    if (b.value().defined()) buffers.push_back(b.key());
  for (const auto& c : m.named_children()) children.push_back(c.key());
  return "parameters " + detail::format_key_list(params) + ", buffers " +
         detail::format_key_list(buffers) + ", submodules " + detail::format_key_list(children);
}

std::string module_label(const NestedKey& path) {
  return path.empty() ? std::string("the module") : "the submodule " + path.repr();
}

// "layers.0.weight" (a name from named_parameters()) as {"layers", "0", "weight"}.
NestedKey dotted(const std::string& name) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(name.substr(start, dot - start));
  parts.push_back(name.substr(start));
  return NestedKey(parts);
}

struct Copy {
  at::Tensor dst;
  at::Tensor src;
};

// Checks `params` against `m` (whose path from the root is `path`) and lists
// the copies to make; throws before anything is written.
void plan_copies(const TensorDictBase& params, const torch::nn::Module& m, const NestedKey& path,
                 const ToModuleOptions& opt, std::vector<Copy>& plan,
                 std::vector<NestedKey>& missing) {
  auto own = own_tensors(m);
  auto children = m.named_children();
  auto find_own = [&](const std::string& k) -> const at::Tensor* {
    for (const auto& [name, t] : own)
      if (name == k) return &t;
    return nullptr;
  };
  for (const auto& [k, v] : params.items()) {
    const std::string& name = k.front();
    const NestedKey full = path.child(name);
    if (v.is_non_tensor_or_stack())
      throw TypeError("to_module: key " + full.repr() +
                      " is a non-tensor entry; only tensors can be written into a module");
    const at::Tensor* dst = find_own(name);
    const std::shared_ptr<torch::nn::Module>* child = children.find(name);
    if (!dst && !child)
      throw KeyError("to_module: key " + full.repr() +
                     " matches no parameter, buffer or "
                     "submodule of " +
                     module_label(path) + ", which has " + describe_level(m));
    switch (v.kind()) {
      case EntryKind::Tensor: {
        if (!dst)
          throw TypeError("to_module: key " + full.repr() + " is a submodule of " +
                          module_label(path) + ", but the tensordict holds a tensor there");
        const at::Tensor& src = v.tensor();
        if (src.sizes() != dst->sizes())
          throw ShapeError("to_module: shape mismatch for key " + full.repr() +
                           ": the module expects " + detail::format_shape(dst->sizes()) +
                           ", the tensordict has " + detail::format_shape(src.sizes()));
        if (src.scalar_type() != dst->scalar_type())
          throw TypeError("to_module: dtype mismatch for key " + full.repr() +
                          ": the module expects " + detail::torch_dtype_repr(dst->scalar_type()) +
                          ", the tensordict has " + detail::torch_dtype_repr(src.scalar_type()) +
                          " (no implicit cast)");
        if (opt.share_storage && src.device() != dst->device())
          throw DeviceError("to_module: device mismatch for key " + full.repr() +
                            " with share_storage: the module's tensor is on " +
                            dst->device().str() + ", the tensordict's on " + src.device().str());
        plan.push_back({*dst, src});
        break;
      }
      case EntryKind::TensorDict:
        if (!child || !*child)
          throw TypeError("to_module: key " + full.repr() + " is a parameter or buffer of " +
                          module_label(path) + ", but the tensordict holds a tensordict there");
        plan_copies(v.tensordict(), **child, full, opt, plan, missing);
        break;
      case EntryKind::NonTensor:
      case EntryKind::NonTensorStack:
        break;  // refused above
    }
  }
  if (!opt.strict) return;
  for (const auto& [name, t] : own)
    if (!params.contains(name)) missing.push_back(path.child(name));
  for (const auto& c : children) {
    if (!c.value() || params.contains(c.key())) continue;
    // A whole submodule absent: each of its tensors is missing.
    for (const auto& p : c.value()->named_parameters(true))
      if (p.value().defined()) missing.push_back(path.child(c.key()) + dotted(p.key()));
    for (const auto& b : c.value()->named_buffers(true))
      if (b.value().defined()) missing.push_back(path.child(c.key()) + dotted(b.key()));
  }
}

}  // namespace

TensorDict from_module(const torch::nn::Module& module, const FromModuleOptions& options) {
  std::optional<TensorDict> out = collect(module, options);
  TensorDict result = out ? *out : TensorDict();
  if (options.lock) result.lock_();
  return result;
}

std::shared_ptr<torch::nn::Module> submodule(const torch::nn::Module& root, const NestedKey& path) {
  // Modules are owned by shared_ptrs (ModuleHolder); a root that is not (one
  // on the stack) is handed out as a non-owning pointer.
  auto& mutable_root = const_cast<torch::nn::Module&>(root);
  std::shared_ptr<torch::nn::Module> cur = mutable_root.weak_from_this().lock();
  if (!cur)
    cur = std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>(), &mutable_root);
  NestedKey walked;
  for (const auto& part : path) {
    auto children = cur->named_children();
    const auto* next = children.find(part);
    if (!next || !*next)
      throw KeyError("submodule: " + path.repr() +
                     " not found: " + (walked.empty() ? std::string("the module") : walked.repr()) +
                     " has submodules " + detail::format_key_list(children.keys()));
    cur = *next;
    walked = walked.child(part);
  }
  return cur;
}

void to_module(const TensorDictBase& params, torch::nn::Module& module,
               const ToModuleOptions& options) {
  load_submodule(params, module, NestedKey(), options);
}

void load_submodule(const TensorDictBase& params, torch::nn::Module& root, const NestedKey& path,
                    const ToModuleOptions& options) {
  if (!params.defined()) throw ValueError("to_module: the tensordict is a null handle");
  std::shared_ptr<torch::nn::Module> target = submodule(root, path);
  std::vector<Copy> plan;
  std::vector<NestedKey> missing;
  plan_copies(params, *target, path, options, plan, missing);
  if (!missing.empty()) {
    std::vector<std::string> names;
    names.reserve(missing.size());
    for (const auto& k : missing) names.push_back(k.repr());
    std::string list;
    for (std::size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + names[i];
    throw KeyError("to_module (strict): " + std::to_string(missing.size()) +
                   " parameter(s) or buffer(s) of " + module_label(path) +
                   " missing from the tensordict: " + list);
  }
  // Parameters are leaves that require grad: writing into them must not be
  // recorded by autograd.
  c10::NoGradGuard no_grad;
  for (auto& c : plan) {
    if (c.dst.is_same(c.src)) continue;
    if (options.share_storage)
      c.dst.set_(c.src);
    else if (!detail::read_mapped_into(c.src, c.dst))
      c.dst.copy_(c.src);
  }
}

}  // namespace tensordict
