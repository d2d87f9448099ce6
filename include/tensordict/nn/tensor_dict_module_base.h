#pragma once
/// @file nn/tensor_dict_module_base.h
/// The base of every module of tensordict::nn (component `nn`, docs/nn.md):
/// a torch::nn::Module that reads its inputs from a tensordict and writes its
/// outputs into one, so that a training loop reads `data = model(data)`
/// (Python's tensordict.nn.TensorDictModuleBase).
///
/// A subclass implements forward_into(); the key handling every module shares
/// (a missing input key, the number of outputs, `"_"` outputs) is done once
/// here by read_inputs() and write_outputs(), with Python's errors.

#include <tensordict/nested_key.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace tensordict::nn {

class TensorDictModuleBase : public torch::nn::Module {
 public:
  /// The keys read, in the order the module takes them.
  const std::vector<NestedKey>& in_keys() const noexcept { return in_keys_; }
  /// The keys written, in the order the module returns them; `"_"` marks an
  /// output that is not written.
  const std::vector<NestedKey>& out_keys() const noexcept { return out_keys_; }

  /// `data = module(data)`: reads in_keys() from `td`, writes out_keys() into
  /// it and returns it (the same handle).
  TensorDictBase forward(TensorDictBase td) {
    forward_into(td, td);
    return td;
  }
  /// Reads from `td` and writes into `out` (Python's tensordict_out=); returns
  /// `out`.
  TensorDictBase forward(const TensorDictBase& td, TensorDictBase out) {
    forward_into(td, out);
    return out;
  }
  TensorDictBase operator()(TensorDictBase td) { return forward(std::move(td)); }

  /// The one thing a module does: read `in`, write `out` (possibly the same).
  virtual void forward_into(const TensorDictBase& in, TensorDictBase& out) = 0;

 protected:
  TensorDictModuleBase(std::string name, std::vector<NestedKey> in_keys,
                       std::vector<NestedKey> out_keys);

  /// The tensors under in_keys(), in order. A missing key, or a key that holds
  /// a tensordict or a non-tensor, is a KeyError naming the key and the module.
  std::vector<at::Tensor> read_inputs(const TensorDictBase& td) const;
  /// Sets outputs[i] under out_keys()[i] in `out`, skipping `"_"` keys. A count
  /// other than out_keys().size() is a ValueError naming the module; the
  /// tensordict's own checks (batch size, locks) apply to each set.
  void write_outputs(TensorDictBase& out, std::vector<at::Tensor> outputs) const;

  /// The module's name in errors ("TensorDictModule(MLP)").
  const std::string& display_name() const noexcept { return display_name_; }

  std::vector<NestedKey> in_keys_;
  std::vector<NestedKey> out_keys_;

 private:
  std::string display_name_;
};

}  // namespace tensordict::nn
