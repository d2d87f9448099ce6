// ScriptTensorDictModule: TorchScript models through tensordicts
// (docs/nn_export.md).
#include <tensordict/errors.h>
#include <tensordict/nn/script_module.h>

#include <ATen/core/jit_type.h>
#include <fmt/format.h>

#include <torch/csrc/jit/runtime/jit_exception.h>
#include <torch/csrc/jit/serialization/import.h>
#include "nn/messages.h"

#include <sstream>
#include <utility>

namespace tensordict::nn {

using detail::join_keys;
using detail::runtime_message;

namespace {

std::string class_name(const torch::jit::Module& module) {
  const auto& name = module.type()->name();
  return name ? name->name() : std::string("module");
}

torch::jit::Method forward_method(const torch::jit::Module& module) {
  if (auto method = module.find_method("forward")) return *method;
  throw ValueError(
      fmt::format("ScriptTensorDictModule({}): the TorchScript module has no "
                  "forward method",
                  class_name(module)));
}

// The model's parameters and buffers, the same tensors, registered on
// `holder` under the TorchScript module's hierarchy of names.
void mirror_tensors(const torch::jit::Module& module, torch::nn::Module& holder) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    if (p.value.defined()) holder.register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    if (b.value.defined()) holder.register_buffer(b.name, b.value);
  }
  for (const auto& child : module.named_children()) {
    auto mirror = std::make_shared<torch::nn::Module>(class_name(child.value));
    mirror_tensors(child.value, *mirror);
    holder.register_module(child.name, mirror);
  }
}

std::string describe(const c10::FunctionSchema& schema) {
  std::ostringstream os;
  os << schema;
  return os.str();
}

// The entry of a returned dict at `key`, spelled as `layout` says; null when
// absent.
const c10::IValue* find_in_dict(const c10::IValue& dict, const NestedKey& key,
                                const KeyLayout& layout) {
  if (layout.is_flattened()) {
    const auto d = dict.toGenericDict();
    auto it = d.find(key.join(layout.separator()));
    return it == d.end() ? nullptr : &it->value();
  }
  const c10::IValue* at = &dict;
  for (const auto& part : key.parts()) {
    if (!at->isGenericDict()) return nullptr;
    const auto d = at->toGenericDict();
    auto it = d.find(part);
    if (it == d.end()) return nullptr;
    at = &it->value();
  }
  return at;
}

}  // namespace

torch::jit::Module load_script_module(const std::string& path) {
  try {
    return torch::jit::load(path);
  } catch (const std::exception& e) {
    throw FormatError(
        fmt::format("load_script_module: '{}' is not a TorchScript archive "
                    "(torch.jit.save) that loads: {}",
                    path, runtime_message(e)));
  }
}

ScriptTensorDictModule::ScriptTensorDictModule(torch::jit::Module module,
                                               std::vector<NestedKey> in_keys,
                                               std::vector<NestedKey> out_keys,
                                               std::optional<KeyLayout> layout)
    : TensorDictModuleBase(fmt::format("ScriptTensorDictModule({})", class_name(module)),
                           std::move(in_keys), std::move(out_keys)),
      module_(std::move(module)),
      forward_(forward_method(module_)),
      layout_(std::move(layout)) {
  mirror_tensors(module_, *this);
  // torch::nn::Module's flag follows the model's.
  torch::nn::Module::train(module_.is_training());
}

ScriptTensorDictModule::ScriptTensorDictModule(torch::jit::Module module, PositionalCall call)
    : ScriptTensorDictModule(std::move(module), std::move(call.in_keys), std::move(call.out_keys),
                             std::nullopt) {
  check_positional_signature();
}

ScriptTensorDictModule::ScriptTensorDictModule(torch::jit::Module module, DictCall call)
    : ScriptTensorDictModule(std::move(module), std::move(call.in_keys), std::move(call.out_keys),
                             std::move(call.layout)) {
  check_dict_signature();
}

std::shared_ptr<ScriptTensorDictModule> ScriptTensorDictModule::load(const std::string& path,
                                                                     PositionalCall call) {
  return std::make_shared<ScriptTensorDictModule>(load_script_module(path), std::move(call));
}

std::shared_ptr<ScriptTensorDictModule> ScriptTensorDictModule::load(const std::string& path,
                                                                     DictCall call) {
  return std::make_shared<ScriptTensorDictModule>(load_script_module(path), std::move(call));
}

void ScriptTensorDictModule::check_positional_signature() const {
  const auto& schema = forward_.function().getSchema();
  const auto& args = schema.arguments();  // args[0] is self
  const std::size_t total = args.size() - 1;
  std::size_t required = 0;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (!args[i].default_value()) required = i;
  }
  if (in_keys_.size() < required || in_keys_.size() > total) {
    throw ValueError(fmt::format("{}: forward{} takes {} tensor(s), in_keys has {} ({})",
                                 display_name(), describe(schema), required, in_keys_.size(),
                                 join_keys(in_keys_)));
  }
  for (std::size_t i = 0; i < in_keys_.size(); ++i) {
    const auto& type = args[i + 1].type();
    if (!c10::TensorType::get()->isSubtypeOf(*type)) {
      throw TypeError(fmt::format(
          "{}: argument '{}' of forward is a {}, not a Tensor: in_key {} cannot feed it (a "
          "Dict argument takes DictCall)",
          display_name(), args[i + 1].name(), type->repr_str(), in_keys_[i].repr()));
    }
  }
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    const auto& type = returns[0].type();
    std::size_t count = 0;
    if (type->kind() == c10::TypeKind::TensorType) {
      count = 1;
    } else if (auto tuple = type->cast<c10::TupleType>()) {
      count = tuple->elements().size();
    } else if (type->kind() == c10::TypeKind::ListType) {
      return;  // its length is known when it runs
    } else {
      throw TypeError(
          fmt::format("{}: forward returns a {}; PositionalCall writes a Tensor or "
                      "a tuple or list of tensors (a Dict takes DictCall)",
                      display_name(), type->repr_str()));
    }
    if (count != out_keys_.size()) {
      throw ValueError(fmt::format("{}: forward returns {} value(s) ({}), out_keys has {} ({})",
                                   display_name(), count, type->repr_str(), out_keys_.size(),
                                   join_keys(out_keys_)));
    }
  }
}

void ScriptTensorDictModule::check_dict_signature() const {
  const auto& schema = forward_.function().getSchema();
  const auto& args = schema.arguments();
  const auto dict = args.size() >= 2 ? args[1].type()->cast<c10::DictType>() : nullptr;
  if (!dict || dict->getKeyType()->kind() != c10::TypeKind::StringType) {
    throw TypeError(
        fmt::format("{}: DictCall needs forward(self, d: Dict[str, ...]); the "
                    "model's forward is {}",
                    display_name(), describe(schema)));
  }
  for (std::size_t i = 2; i < args.size(); ++i) {
    if (!args[i].default_value()) {
      throw ValueError(
          fmt::format("{}: forward's argument '{}' has no default; DictCall passes "
                      "one dict",
                      display_name(), args[i].name()));
    }
  }
  if (in_keys_.empty())
    throw ValueError(fmt::format("{}: DictCall without in_keys", display_name()));
}

c10::IValue ScriptTensorDictModule::run(std::vector<c10::IValue> stack) {
  try {
    return forward_(std::move(stack));
  } catch (const torch::jit::JITException& e) {
    throw ModelError(fmt::format("{}: the TorchScript model raised: {}", display_name(), e.what()));
  } catch (const std::exception& e) {
    throw ModelError(
        fmt::format("{}: the TorchScript model failed: {}", display_name(), runtime_message(e)));
  }
}

void ScriptTensorDictModule::forward_into(const TensorDictBase& in, TensorDictBase& out) {
  if (!layout_) {
    auto inputs = read_inputs(in);
    std::vector<c10::IValue> stack;
    stack.reserve(inputs.size());
    for (auto& t : inputs) stack.emplace_back(std::move(t));
    write_positional(out, run(std::move(stack)));
    return;
  }
  for (const auto& key : in_keys_) {
    if (!in.entry_kind(key)) {
      throw KeyError(fmt::format("{}: input key {} is not in the tensordict (in_keys: {})",
                                 display_name(), key.repr(), join_keys(in_keys_)));
    }
  }
  c10::IValue dict(to_ivalue_dict(in, in_keys_, *layout_));
  // The keys are strings (checked when made); the values' type decides.
  const auto& expected = forward_.function().getSchema().arguments()[1].type();
  const auto& given = dict.toGenericDict().valueType();
  if (!given->isSubtypeOf(*expected->castRaw<c10::DictType>()->getValueType())) {
    throw TypeError(fmt::format("{}: forward takes a {}; in_keys ({}) with {} make a Dict[str, {}]",
                                display_name(), expected->repr_str(), join_keys(in_keys_),
                                layout_->is_flattened()
                                    ? fmt::format("flat names joined by '{}'", layout_->separator())
                                    : std::string("nested dicts"),
                                given->repr_str()));
  }
  std::vector<c10::IValue> stack;
  stack.push_back(std::move(dict));
  write_dict(out, run(std::move(stack)));
}

void ScriptTensorDictModule::write_positional(TensorDictBase& out,
                                              const c10::IValue& result) const {
  std::vector<at::Tensor> outputs;
  const auto take = [&](const c10::IValue& v, std::size_t i) {
    if (!v.isTensor()) {
      throw TypeError(
          fmt::format("{}: output {} is a {}, not a tensor", display_name(), i, v.tagKind()));
    }
    outputs.push_back(v.toTensor());
  };
  if (result.isTensor()) {
    outputs.push_back(result.toTensor());
  } else if (result.isTuple()) {
    const auto& elements = result.toTupleRef().elements();
    for (std::size_t i = 0; i < elements.size(); ++i) take(elements[i], i);
  } else if (result.isList()) {
    const auto elements = result.toListRef();
    for (std::size_t i = 0; i < elements.size(); ++i) take(elements[i], i);
  } else {
    throw TypeError(fmt::format("{}: forward returned a {}, not a tensor or a tuple of tensors",
                                display_name(), result.tagKind()));
  }
  write_outputs(out, std::move(outputs));
}

void ScriptTensorDictModule::write_dict(TensorDictBase& out, const c10::IValue& result) const {
  if (!result.isGenericDict()) {
    throw TypeError(fmt::format("{}: forward returned a {}; DictCall expects a dict",
                                display_name(), result.tagKind()));
  }
  if (out_keys_.empty()) {
    update_from_ivalue(out, result, *layout_);
    return;
  }
  for (const auto& key : out_keys_) {
    const c10::IValue* value = find_in_dict(result, key, *layout_);
    if (!value) {
      std::string returned;
      for (const auto& entry : result.toGenericDict()) {
        if (!returned.empty()) returned += ", ";
        returned += entry.key().isString() ? "'" + entry.key().toStringRef() + "'" : "?";
      }
      throw KeyError(fmt::format("{}: out_key {} is not in the dict the model returned (keys: {})",
                                 display_name(), key.repr(), returned));
    }
    set_from_ivalue(out, key, *value, *layout_);
  }
}

void ScriptTensorDictModule::train(bool on) {
  module_.train(on);
  torch::nn::Module::train(on);
}

}  // namespace tensordict::nn
