#pragma once
/// @file nn/aoti_module.h
/// AOTITensorDictModule: an AOTInductor package (`.pt2`, written by Python's
/// torch._inductor.aoti_compile_and_package on CPU) read and written through
/// tensordicts (docs/nn_export.md). Only where the LibTorch has the package
/// loader (TENSORDICT_HAVE_AOTI, LibTorch 2.6 and later).
///
/// A package runs on a flat list of tensors. Python's torch.export flattened
/// the model's `(args, kwargs)` with torch.utils._pytree and stored the tree
/// (the package's call spec, pytree JSON of serialization protocol 1); this
/// module reads it and flattens a tensordict in exactly that order -- the
/// order of the keys each dict node of the spec lists (Python's insertion
/// order), never the tensordict's own order. Outputs go back under the keys of
/// the output spec: nested dicts are nested keys (no joined names).
///
///   - DictCall{in_keys, layout, out_keys}: the model takes one dict (or only
///     keyword arguments). The keys are the spec's: leave in_keys empty, or
///     give the same keys as a check. A tuple or list inside a dict is the
///     keys "0", "1", ...; with KeyLayout::flattened(sep) a dict key holding
///     `sep` is a nested key. The output spec must be a dict; out_keys, when
///     given, filter what is written.
///   - PositionalCall{in_keys, out_keys}: the model takes tensors; the
///     outputs, flattened in the spec's order, go to out_keys ("_" skips).
///
/// Inputs are checked before the loader runs them, because the package's code
/// trusts them (it checks only their number unless the process sets
/// AOTI_RUNTIME_CHECK_INPUTS=1): with the metadata "tensordict.inputs" that
/// examples/policy/export_policy.py writes into the package, each input's
/// dtype (TypeError), rank and static / bounded dims (ShapeError) and device
/// (DeviceError), all naming the key; without it, the package's device. A
/// non-contiguous input is made contiguous (the package assumes the strides
/// of its example inputs, which were contiguous).
///
/// The package's weights are compiled in: the module has no parameters().

#ifdef TENSORDICT_HAVE_AOTI

#include <tensordict/nn/calling_convention.h>
#include <tensordict/nn/model_error.h>
#include <tensordict/nn/tensor_dict_module_base.h>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch::inductor {
class AOTIModelPackageLoader;
}

namespace tensordict::nn {

/// What the package says about one flat input (metadata "tensordict.inputs").
struct AOTIInputSpec {
  std::optional<c10::ScalarType> dtype;
  /// One per dim: the size, or -1 for a dynamic dim bounded by min / max.
  std::vector<int64_t> sizes;
  std::vector<int64_t> min_sizes;
  std::vector<std::optional<int64_t>> max_sizes;
  std::optional<c10::DeviceType> device;
};

class AOTITensorDictModule : public TensorDictModuleBase {
 public:
  /// Loads the package (FormatError naming the file when it cannot), reads
  /// its call spec and checks it fits the call (TypeError / ValueError).
  /// `num_runners` models may run at the same time (threads beyond wait).
  AOTITensorDictModule(const std::string& package_path, DictCall call, std::size_t num_runners = 1);
  AOTITensorDictModule(const std::string& package_path, PositionalCall call,
                       std::size_t num_runners = 1);
  ~AOTITensorDictModule() override;

  void forward_into(const TensorDictBase& in, TensorDictBase& out) override;

  // in_keys(): the flat inputs' keys in the package's order. out_keys(): the
  // flat outputs' keys in the package's order, "_" for one out_keys left out.
  /// The checks made on each flat input (empty without the metadata).
  const std::vector<AOTIInputSpec>& input_specs() const noexcept { return input_specs_; }
  /// The loader, for what this module does not wrap (constants, metadata).
  torch::inductor::AOTIModelPackageLoader& loader() noexcept { return *loader_; }

 private:
  AOTITensorDictModule(const std::string& package_path, std::size_t num_runners);
  void read_specs(const std::optional<KeyLayout>& layout, std::vector<NestedKey> in_keys,
                  std::vector<NestedKey> out_keys);
  at::Tensor checked_input(const at::Tensor& tensor, std::size_t i) const;

  std::string path_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  std::vector<AOTIInputSpec> input_specs_;
  std::optional<c10::DeviceType> package_device_;
};

}  // namespace tensordict::nn

#endif  // TENSORDICT_HAVE_AOTI
