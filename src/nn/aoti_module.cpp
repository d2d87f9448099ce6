// AOTITensorDictModule: AOTInductor packages through tensordicts, flattened in
// the order of the package's pytree call spec (docs/nn_export.md).
#include <tensordict/errors.h>
#include <tensordict/nn/aoti_module.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "nn/messages.h"

namespace tensordict::nn {

using detail::join_keys;
using detail::runtime_message;

namespace {

// One node of a pytree spec (torch.utils._pytree, serialization protocol 1):
// {"type": "builtins.dict" | ... | null (a leaf), "context": JSON text,
//  "children_spec": [...]}.
struct SpecNode {
  std::string type;  // empty for a leaf
  std::string context;
  std::vector<SpecNode> children;
  bool is_leaf() const { return type.empty(); }
  // A TensorDict node is serializable once examples/policy/export_policy.py's
  // register_tensordict_serialization() ran; its context is
  // {"keys": [...], "batch_dims": n}.
  bool is_tensordict() const { return type == "tensordict._td.TensorDict"; }
  bool is_dict() const {
    return type == "builtins.dict" || type == "collections.OrderedDict" || is_tensordict();
  }
  bool is_sequence() const { return type == "builtins.tuple" || type == "builtins.list"; }
};

SpecNode parse_node(const nlohmann::json& j) {
  SpecNode node;
  if (!j.at("type").is_null()) node.type = j.at("type").get<std::string>();
  if (j.at("context").is_string()) node.context = j.at("context").get<std::string>();
  for (const auto& child : j.at("children_spec")) node.children.push_back(parse_node(child));
  return node;
}

SpecNode parse_spec(const std::string& text, const std::string& what, const std::string& path) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_array() || j.size() != 2 || j.at(0) != 1) {
      throw FormatError(
          fmt::format("AOTITensorDictModule('{}'): the {} is not a pytree spec "
                      "of serialization protocol 1: {}",
                      path, what, text));
    }
    return parse_node(j.at(1));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("AOTITensorDictModule('{}'): the {} cannot be read ({}): {}",
                                  path, what, e.what(), text));
  }
}

// The keys of a dict node, in the order its children (and the flat list)
// follow: Python's insertion order, as the spec's context lists them.
std::vector<std::string> dict_keys(const SpecNode& node, const std::string& path) {
  nlohmann::json keys;
  try {
    auto context = nlohmann::json::parse(node.context);
    keys = node.is_tensordict() ? context.at("keys") : std::move(context);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(
        fmt::format("AOTITensorDictModule('{}'): the context of a {} node cannot "
                    "be read ({}): {}",
                    path, node.type, e.what(), node.context));
  }
  if (!keys.is_array()) {
    throw FormatError(
        fmt::format("AOTITensorDictModule('{}'): the context of a {} node is not "
                    "a list of keys: {}",
                    path, node.type, node.context));
  }
  std::vector<std::string> names;
  for (const auto& key : keys) {
    if (!key.is_string()) {
      throw TypeError(
          fmt::format("AOTITensorDictModule('{}'): the package's dict has the key "
                      "{}; only string keys name tensordict entries",
                      path, key.dump()));
    }
    names.push_back(key.get<std::string>());
  }
  if (names.size() != node.children.size()) {
    throw FormatError(
        fmt::format("AOTITensorDictModule('{}'): a dict node lists {} keys for {} "
                    "children",
                    path, names.size(), node.children.size()));
  }
  return names;
}

// The key of every leaf under `node`, depth first in the spec's order (the
// order of the flat tensors): dict entries by their keys, tuple and list
// elements by "0", "1", ...
void collect_leaves(const SpecNode& node, const NestedKey& prefix, const KeyLayout& layout,
                    const std::string& path, std::vector<NestedKey>& out) {
  if (node.is_leaf()) {
    out.push_back(prefix);
  } else if (node.is_dict()) {
    const auto names = dict_keys(node, path);
    for (std::size_t i = 0; i < names.size(); ++i) {
      collect_leaves(node.children[i], layout.child(prefix, names[i]), layout, path, out);
    }
  } else if (node.is_sequence()) {
    for (std::size_t i = 0; i < node.children.size(); ++i) {
      collect_leaves(node.children[i], prefix + NestedKey(std::to_string(i)), layout, path, out);
    }
  } else {
    throw TypeError(
        fmt::format("AOTITensorDictModule('{}'): the package's spec holds a {} at {}; "
                    "tensordict keys name dict, tuple and list entries only",
                    path, node.type, prefix.empty() ? "the top" : prefix.repr()));
  }
}

std::optional<c10::ScalarType> dtype_from_python(const std::string& name) {
  static const std::pair<const char*, c10::ScalarType> names[] = {
      {"float32", c10::kFloat},
      {"float64", c10::kDouble},
      {"float16", c10::kHalf},
      {"bfloat16", c10::kBFloat16},
      {"int64", c10::kLong},
      {"int32", c10::kInt},
      {"int16", c10::kShort},
      {"int8", c10::kChar},
      {"uint8", c10::kByte},
      {"bool", c10::kBool},
      {"complex64", c10::kComplexFloat},
      {"complex128", c10::kComplexDouble}};
  for (const auto& [python, type] : names) {
    if (name == python) return type;
  }
  return std::nullopt;
}

std::optional<c10::DeviceType> device_from_name(const std::string& name) {
  if (name.empty()) return std::nullopt;
  try {
    return c10::Device(name).type();
  } catch (const c10::Error&) {
    return std::nullopt;
  }
}

// The metadata "tensordict.inputs" (examples/policy/export_policy.py): one
// {"dtype", "shape": [int | {"min", "max"}], "device"} per flat input.
std::vector<AOTIInputSpec> parse_input_specs(const std::string& text, const std::string& path) {
  std::vector<AOTIInputSpec> specs;
  try {
    for (const auto& entry : nlohmann::json::parse(text)) {
      AOTIInputSpec spec;
      spec.dtype = dtype_from_python(entry.value("dtype", ""));
      spec.device = device_from_name(entry.value("device", ""));
      for (const auto& dim : entry.at("shape")) {
        if (dim.is_number_integer()) {
          spec.sizes.push_back(dim.get<int64_t>());
          spec.min_sizes.push_back(dim.get<int64_t>());
          spec.max_sizes.emplace_back(dim.get<int64_t>());
        } else {
          spec.sizes.push_back(-1);
          spec.min_sizes.push_back(dim.value("min", int64_t{0}));
          spec.max_sizes.push_back(dim.contains("max") && dim.at("max").is_number_integer()
                                       ? std::optional<int64_t>(dim.at("max").get<int64_t>())
                                       : std::nullopt);
        }
      }
      specs.push_back(std::move(spec));
    }
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(
        fmt::format("AOTITensorDictModule('{}'): the metadata tensordict.inputs "
                    "cannot be read ({}): {}",
                    path, e.what(), text));
  }
  return specs;
}

std::string file_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dims_text(at::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

}  // namespace

AOTITensorDictModule::AOTITensorDictModule(const std::string& package_path, std::size_t num_runners)
    : TensorDictModuleBase(fmt::format("AOTITensorDictModule({})", file_name(package_path)), {},
                           {}),
      path_(package_path) {
  try {
    loader_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        package_path, "model", /*run_single_threaded=*/false, num_runners);
  } catch (const std::exception& e) {
    throw FormatError(
        fmt::format("AOTITensorDictModule: '{}' cannot be loaded as an "
                    "AOTInductor package: {}",
                    package_path, runtime_message(e)));
  }
  const auto metadata = loader_->get_metadata();
  if (auto it = metadata.find("tensordict.inputs"); it != metadata.end()) {
    input_specs_ = parse_input_specs(it->second, path_);
  }
  if (auto it = metadata.find("AOTI_DEVICE_KEY"); it != metadata.end()) {
    package_device_ = device_from_name(it->second);
  }
}

AOTITensorDictModule::AOTITensorDictModule(const std::string& package_path, DictCall call,
                                           std::size_t num_runners)
    : AOTITensorDictModule(package_path, num_runners) {
  read_specs(std::move(call.layout), std::move(call.in_keys), std::move(call.out_keys));
}

AOTITensorDictModule::AOTITensorDictModule(const std::string& package_path, PositionalCall call,
                                           std::size_t num_runners)
    : AOTITensorDictModule(package_path, num_runners) {
  read_specs(std::nullopt, std::move(call.in_keys), std::move(call.out_keys));
}

AOTITensorDictModule::~AOTITensorDictModule() = default;

void AOTITensorDictModule::read_specs(const std::optional<KeyLayout>& layout,
                                      std::vector<NestedKey> in_keys,
                                      std::vector<NestedKey> out_keys) {
  const auto call_spec = loader_->get_call_spec();
  if (call_spec.size() != 2) {
    throw FormatError(
        fmt::format("{}: the package has no call spec (in_spec, out_spec)", display_name()));
  }
  const auto in_spec = parse_spec(call_spec[0], "in_spec", path_);
  const auto out_spec = parse_spec(call_spec[1], "out_spec", path_);
  // The inputs are (args, kwargs).
  if (in_spec.type != "builtins.tuple" || in_spec.children.size() != 2 ||
      !in_spec.children[1].is_dict()) {
    throw FormatError(
        fmt::format("{}: the in_spec is not (args, kwargs): {}", display_name(), call_spec[0]));
  }
  const auto& args = in_spec.children[0];
  const auto& kwargs = in_spec.children[1];
  const auto flat = KeyLayout::nested();

  if (layout) {
    // One dict argument, or keyword arguments only: the keys are the spec's.
    const SpecNode* dict = nullptr;
    if (args.children.size() == 1 && args.children[0].is_dict() && kwargs.children.empty()) {
      dict = &args.children[0];
    } else if (args.children.empty()) {
      dict = &kwargs;
    } else {
      throw TypeError(
          fmt::format("{}: DictCall needs a model taking one dict (or keyword "
                      "arguments only); the package's in_spec is {}",
                      display_name(), call_spec[0]));
    }
    std::vector<NestedKey> spec_keys;
    collect_leaves(*dict, {}, *layout, path_, spec_keys);
    if (!in_keys.empty()) {
      auto given = in_keys, expected = spec_keys;
      std::sort(given.begin(), given.end());
      std::sort(expected.begin(), expected.end());
      if (given != expected) {
        throw ValueError(fmt::format("{}: in_keys ({}) are not the package's inputs ({})",
                                     display_name(), join_keys(in_keys), join_keys(spec_keys)));
      }
    }
    in_keys_ = std::move(spec_keys);

    if (!out_spec.is_dict()) {
      throw TypeError(
          fmt::format("{}: DictCall needs a model returning a dict; the package's "
                      "out_spec is {} (PositionalCall names its outputs)",
                      display_name(), call_spec[1]));
    }
    std::vector<NestedKey> leaves;
    collect_leaves(out_spec, {}, *layout, path_, leaves);
    if (!out_keys.empty()) {
      // Leaves under none of out_keys are not written.
      std::vector<bool> found(out_keys.size(), false);
      for (auto& leaf : leaves) {
        bool wanted = false;
        for (std::size_t k = 0; k < out_keys.size(); ++k) {
          const auto& parts = out_keys[k].parts();
          if (parts.size() <= leaf.size() &&
              std::equal(parts.begin(), parts.end(), leaf.parts().begin())) {
            wanted = true;
            found[k] = true;
          }
        }
        if (!wanted) leaf = NestedKey("_");
      }
      for (std::size_t k = 0; k < out_keys.size(); ++k) {
        if (!found[k]) {
          throw KeyError(fmt::format("{}: out_key {} is not among the package's outputs ({})",
                                     display_name(), out_keys[k].repr(), call_spec[1]));
        }
      }
    }
    out_keys_ = std::move(leaves);
  } else {
    std::vector<NestedKey> spec_inputs, spec_outputs;
    collect_leaves(args, {}, flat, path_, spec_inputs);
    if (!kwargs.children.empty() || spec_inputs.size() != in_keys.size()) {
      throw ValueError(fmt::format(
          "{}: PositionalCall with in_keys ({}); the package takes {} "
          "positional tensor(s) and {} keyword argument(s)",
          display_name(), join_keys(in_keys), spec_inputs.size(), kwargs.children.size()));
    }
    collect_leaves(out_spec, {}, flat, path_, spec_outputs);
    if (spec_outputs.size() != out_keys.size()) {
      throw ValueError(fmt::format("{}: the package returns {} tensor(s), out_keys has {} ({})",
                                   display_name(), spec_outputs.size(), out_keys.size(),
                                   join_keys(out_keys)));
    }
    in_keys_ = std::move(in_keys);
    out_keys_ = std::move(out_keys);
  }
  if (!input_specs_.empty() && input_specs_.size() != in_keys_.size()) {
    throw FormatError(
        fmt::format("{}: the metadata tensordict.inputs describes {} inputs, the "
                    "call spec has {}",
                    display_name(), input_specs_.size(), in_keys_.size()));
  }
}

at::Tensor AOTITensorDictModule::checked_input(const at::Tensor& tensor, std::size_t i) const {
  const auto& key = in_keys_[i];
  const auto device = tensor.device().type();
  if (!input_specs_.empty()) {
    const auto& spec = input_specs_[i];
    if (spec.dtype && tensor.scalar_type() != *spec.dtype) {
      throw TypeError(fmt::format("{}: input {} is {}, the package takes {}", display_name(),
                                  key.repr(), c10::toString(tensor.scalar_type()),
                                  c10::toString(*spec.dtype)));
    }
    bool fits = static_cast<std::size_t>(tensor.dim()) == spec.sizes.size();
    for (std::size_t d = 0; fits && d < spec.sizes.size(); ++d) {
      const auto size = tensor.size(static_cast<int64_t>(d));
      fits = size >= spec.min_sizes[d] && (!spec.max_sizes[d] || size <= *spec.max_sizes[d]);
    }
    if (!fits) {
      std::vector<std::string> dims;
      for (std::size_t d = 0; d < spec.sizes.size(); ++d) {
        dims.push_back(spec.sizes[d] >= 0
                           ? std::to_string(spec.sizes[d])
                           : fmt::format("{}..{}", spec.min_sizes[d],
                                         spec.max_sizes[d] ? std::to_string(*spec.max_sizes[d])
                                                           : std::string("inf")));
      }
      throw ShapeError(fmt::format("{}: input {} has shape {}, the package takes [{}]",
                                   display_name(), key.repr(), dims_text(tensor.sizes()),
                                   fmt::join(dims, ", ")));
    }
    if (spec.device && device != *spec.device) {
      throw DeviceError(fmt::format("{}: input {} is on {}, the package runs on {}", display_name(),
                                    key.repr(), c10::DeviceTypeName(device, true),
                                    c10::DeviceTypeName(*spec.device, true)));
    }
  } else if (package_device_ && device != *package_device_) {
    throw DeviceError(fmt::format("{}: input {} is on {}, the package runs on {}", display_name(),
                                  key.repr(), c10::DeviceTypeName(device, true),
                                  c10::DeviceTypeName(*package_device_, true)));
  }
  return tensor.is_contiguous() ? tensor : tensor.contiguous();
}

void AOTITensorDictModule::forward_into(const TensorDictBase& in, TensorDictBase& out) {
  auto inputs = read_inputs(in);
  for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i] = checked_input(inputs[i], i);
  std::vector<at::Tensor> outputs;
  try {
    outputs = loader_->boxed_run(std::move(inputs));
  } catch (const std::exception& e) {
    throw ModelError(fmt::format("{}: the package failed: {}", display_name(), runtime_message(e)));
  }
  write_outputs(out, std::move(outputs));
}

}  // namespace tensordict::nn
