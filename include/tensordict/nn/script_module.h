#pragma once
/// @file nn/script_module.h
/// ScriptTensorDictModule: a TorchScript model (a torch::jit::Module that
/// Python's torch.jit.script or torch.jit.trace saved, or one built in C++)
/// read and written through tensordicts (docs/nn_export.md).
///
/// The calling convention is chosen by the constructor's second argument:
///   - PositionalCall{in_keys, out_keys}: `forward(t0, t1, ...)` gets the
///     tensors under in_keys in order; its Tensor, or its tuple / list of
///     tensors, is written under out_keys ("_" skips one).
///   - DictCall{in_keys, layout, out_keys}: `forward(d)` gets one
///     `Dict[str, ...]` holding in_keys, nested keys spelled as `layout` says
///     (nested dicts, or flat names with a separator); the dict it returns is
///     written back under its keys read with the same layout -- all of them,
///     or only out_keys when given.
///
/// The model's parameters and buffers are this module's, under the names
/// Python gives them ("linear.weight"): the very tensors the TorchScript
/// module holds, so parameters(), an optimizer, to(dtype / device) and
/// gradients act on the model itself; train() / eval() are forwarded to it.
///
/// Errors: a missing input key is a KeyError naming the key and the module; a
/// signature that does not fit the convention is a TypeError / ValueError
/// when the module is made; an argument of the wrong TorchScript type a
/// TypeError naming both types; the model raising while it runs a ModelError
/// carrying the interpreter's message. No c10::Error leaks out.

#include <tensordict/nn/calling_convention.h>
#include <tensordict/nn/ivalue.h>
#include <tensordict/nn/model_error.h>
#include <tensordict/nn/tensor_dict_module_base.h>

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tensordict::nn {

/// torch::jit::load(path), with a FormatError naming the file when it is not
/// a TorchScript archive (a missing file, a torch.save file, a .pt2 package).
torch::jit::Module load_script_module(const std::string& path);

class ScriptTensorDictModule : public TensorDictModuleBase {
 public:
  ScriptTensorDictModule(torch::jit::Module module, PositionalCall call);
  ScriptTensorDictModule(torch::jit::Module module, DictCall call);

  /// The model loaded with load_script_module(path).
  static std::shared_ptr<ScriptTensorDictModule> load(const std::string& path, PositionalCall call);
  static std::shared_ptr<ScriptTensorDictModule> load(const std::string& path, DictCall call);

  void forward_into(const TensorDictBase& in, TensorDictBase& out) override;

  /// Also switches the TorchScript module (and its submodules).
  void train(bool on = true) override;

  /// The TorchScript module itself.
  torch::jit::Module& script_module() noexcept { return module_; }
  /// The layout of the dict convention; nullopt for the positional one.
  const std::optional<KeyLayout>& dict_layout() const noexcept { return layout_; }

 private:
  ScriptTensorDictModule(torch::jit::Module module, std::vector<NestedKey> in_keys,
                         std::vector<NestedKey> out_keys, std::optional<KeyLayout> layout);
  void check_positional_signature() const;
  void check_dict_signature() const;
  c10::IValue run(std::vector<c10::IValue> stack);
  void write_positional(TensorDictBase& out, const c10::IValue& result) const;
  void write_dict(TensorDictBase& out, const c10::IValue& result) const;

  torch::jit::Module module_;
  torch::jit::Method forward_;
  std::optional<KeyLayout> layout_;
};

}  // namespace tensordict::nn
