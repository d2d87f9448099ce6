#pragma once
/// @file nn/sequential.h
/// TensorDictSequential (component `nn`, docs/nn.md): modules run one after
/// the other on the same tensordict, each reading what the earlier ones wrote
/// (Python's tensordict.nn.TensorDictSequential).
///
///     auto actor = std::make_shared<TensorDictSequential>(
///         std::vector<std::shared_ptr<TensorDictModuleBase>>{encoder, head});
///     data = (*actor)(data);
///
/// in_keys() are the keys read that no earlier module writes, in the order
/// they are first read; out_keys() are every module's out_keys with each key
/// kept at its last occurrence (Python's rules, so that a nested sequential
/// or select_subsequence sees the same keys as in Python).

#include <tensordict/nn/tensor_dict_module_base.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace tensordict::nn {

class TensorDictSequential : public TensorDictModuleBase {
 public:
  using ModuleList = std::vector<std::shared_ptr<TensorDictModuleBase>>;

  /// The modules, registered as the submodules "0", "1", ... (parameters(),
  /// to(), from_module() reach them). A null module is a ValueError.
  explicit TensorDictSequential(ModuleList modules);
  /// With Python's selected_out_keys: only those out_keys (and the keys the
  /// input had) are written into the result; the intermediate keys are not.
  TensorDictSequential(ModuleList modules, std::vector<NestedKey> selected_out_keys);

  /// Runs the modules in order. In place (`in` and `out` the same
  /// tensordict) every module writes into it; otherwise the modules run on a
  /// shallow copy of `in` and out_keys() are then copied into `out` (Python's
  /// tensordict_out=). An error inside module i is rethrown with the same
  /// type and a note naming i.
  void forward_into(const TensorDictBase& in, TensorDictBase& out) override;

  /// Python's select_out_keys: keep only these out_keys in the result.
  /// ValueError when one is not an out_key. Returns this module.
  TensorDictSequential& select_out_keys(std::vector<NestedKey> keys);
  /// Python's reset_out_keys: every out_key again.
  TensorDictSequential& reset_out_keys();

  /// A new sequential of the modules needed to go from `in_keys` (default:
  /// in_keys()) to `out_keys` (default: out_keys()), sharing them (Python's
  /// select_subsequence, nested sequentials included): forward, a module is
  /// kept when everything it reads is available; backward, when it writes a
  /// key still needed. ValueError when no module is left.
  std::shared_ptr<TensorDictSequential> select_subsequence(
      std::optional<std::vector<NestedKey>> in_keys = std::nullopt,
      std::optional<std::vector<NestedKey>> out_keys = std::nullopt) const;

  std::size_t size() const noexcept { return modules_.size(); }
  /// Module i; IndexError out of range.
  const std::shared_ptr<TensorDictModuleBase>& at(std::size_t i) const;
  const ModuleList& modules() const noexcept { return modules_; }

  using TensorDictModuleBase::forward;

 private:
  ModuleList modules_;
  std::vector<NestedKey> complete_out_keys_;
  bool select_before_return_ = false;

  void run_modules(TensorDictBase& td) const;
};

}  // namespace tensordict::nn
