#pragma once
/// @file module.h
/// Module interop: the parameters and buffers of a torch::nn::Module as a
/// nested tensordict (from_module), and a tensordict written back into a
/// module (to_module, load_submodule). With memmap() and load_memmap() this
/// is a module checkpoint: see docs/checkpoint.md.
///
/// This header needs LibTorch's C++ frontend (torch/nn). It is deliberately
/// not part of the umbrella header tensordict/tensordict.h, which stays free of
/// torch::nn (and is the tests' precompiled header): include it yourself.

#include <tensordict/nested_key.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <torch/nn/module.h>

#include <memory>

namespace tensordict {

/// Options of from_module().
struct FromModuleOptions {
  /// Lock the result (Python: lock=). Python's TensorDict.from_module does not
  /// lock by default (the free function tensordict.from_module does).
  bool lock = false;
  /// Leave out submodules that hold no parameter or buffer, recursively
  /// (activations, dropout, ...), as Python's default filter_empty=True.
  bool filter_empty = true;
};

/// The parameters and buffers of `module` as a nested TensorDict of batch size
/// [] (Python's TensorDict.from_module / tensordict.from_module). Each level
/// holds the module's own parameters, then its buffers, then one nested
/// tensordict per child module, in registration order: "layers.0.weight" is
/// the key {"layers", "0", "weight"}. Undefined (unset) parameters and buffers
/// are skipped.
///
/// The leaves *are* the module's tensors, not copies: they share storage (and
/// autograd identity) with the module, so an in-place change to a leaf changes
/// the module, and memmap() of the result saves the module's current values.
/// Use clone() for independent tensors.
TensorDict from_module(const torch::nn::Module& module, const FromModuleOptions& options = {});

/// Options of to_module() and load_submodule().
struct ToModuleOptions {
  /// Also require every parameter and buffer of the module (recursively) to be
  /// present in the tensordict; a missing one is a KeyError listing them all.
  /// Python's to_module has no such check (default false: a partial
  /// tensordict updates only its own keys).
  bool strict = false;
  /// Instead of copying, make each parameter and buffer use the tensordict's
  /// storage (at::Tensor::set_ on the module's own tensor, as torch::load
  /// does): nothing is copied, the module's tensors keep their identity and
  /// requires_grad, and afterwards share memory with the tensordict. With a
  /// tensordict from load_memmap(prefix, {.writable = false}) the module is
  /// mapped copy-on-write from the checkpoint: loading reads no data, pages
  /// are read from the files on first use, and updates stay in memory. With a
  /// writable mapping (load_memmap's default), in-place updates of the module
  /// (optimizer steps) write into the files. The tensordict's tensors must be
  /// on the module's devices (DeviceError otherwise).
  bool share_storage = false;
};

/// Writes `params` into the parameters and buffers of `module` (Python's
/// params.to_module(module, inplace=True)): the key {"layers", "0", "weight"}
/// is written into module.layers[0].weight. A leaf that is a whole file mapped
/// by load_memmap() (writable) is read from its file with pread() straight
/// into the parameter, rather than copied through the mapping.
///
/// Deliberate difference from Python, which by default swaps the module's
/// attributes for the tensordict's tensors: in LibTorch a layer keeps its own
/// handle to each parameter (LinearImpl::weight, ...), so re-registering a
/// parameter would not reach the layer's forward(). The values are therefore
/// copied into the existing parameters and buffers (copy_ under NoGradGuard):
/// they keep their identity, their requires_grad and any optimizer state that
/// refers to them, and the tensordict keeps its own storage. Sources may be on
/// another device (copy_ moves them). options.share_storage is the zero-copy
/// alternative, closer to Python's default (the module then uses the
/// tensordict's memory).
///
/// Everything is checked before anything is written, so on error the module is
/// unchanged:
///  - KeyError: a key names no parameter, buffer or submodule of its level (the
///    message lists what the module has there); with options.strict, a
///    parameter or buffer of the module missing from `params`;
///  - ShapeError: a tensor's shape differs from the module's (expected shape in
///    the message);
///  - TypeError: a dtype differs (no implicit cast), a tensor is given for a
///    submodule or a tensordict for a parameter, or an entry is a non-tensor;
///  - DeviceError: with options.share_storage, a tensor on another device.
/// Every message names the full key path. (An I/O error while reading a
/// mapped file, StorageError, can only happen during the copy.)
void to_module(const TensorDictBase& params, torch::nn::Module& module,
               const ToModuleOptions& options = {});

/// The submodule of `root` at `path` ({"layers", "0"}), found through
/// named_children() level by level; an empty path is `root` itself (shared
/// with its owner, or a non-owning pointer for a root that no shared_ptr
/// owns). KeyError names the path and the children present where the lookup
/// failed.
std::shared_ptr<torch::nn::Module> submodule(const torch::nn::Module& root, const NestedKey& path);

/// Loads one submodule: writes `params`, the tensordict of the submodule at
/// `path` (e.g. load_memmap(prefix + "/layers/0"), or from_module(root)
/// .get_tensordict({"layers", "0"})), into submodule(root, path), as
/// to_module() does. Error messages name the keys from the root
/// ({"layers", "0", "weight"}).
void load_submodule(const TensorDictBase& params, torch::nn::Module& root, const NestedKey& path,
                    const ToModuleOptions& options = {});

}  // namespace tensordict
