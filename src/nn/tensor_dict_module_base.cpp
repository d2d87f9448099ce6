// TensorDictModuleBase: the key handling shared by every module of
// tensordict::nn (docs/nn.md).
#include <tensordict/errors.h>
#include <tensordict/nn/tensor_dict_module_base.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "nn/messages.h"

namespace tensordict::nn {

using detail::join_keys;

namespace {
bool is_skipped(const NestedKey& key) { return key.size() == 1 && key.front() == "_"; }

}  // namespace

TensorDictModuleBase::TensorDictModuleBase(std::string name, std::vector<NestedKey> in_keys,
                                           std::vector<NestedKey> out_keys)
    : torch::nn::Module(name),
      in_keys_(std::move(in_keys)),
      out_keys_(std::move(out_keys)),
      display_name_(std::move(name)) {
  for (const auto* keys : {&in_keys_, &out_keys_}) {
    for (const auto& key : *keys) {
      if (key.empty()) {
        throw ValueError(fmt::format("{}: an empty key in {}", display_name_,
                                     keys == &in_keys_ ? "in_keys" : "out_keys"));
      }
    }
  }
}

std::vector<at::Tensor> TensorDictModuleBase::read_inputs(const TensorDictBase& td) const {
  std::vector<at::Tensor> inputs;
  inputs.reserve(in_keys_.size());
  for (const auto& key : in_keys_) {
    auto kind = td.entry_kind(key);
    if (!kind) {
      throw KeyError(fmt::format("{}: input key {} is not in the tensordict (in_keys: {})",
                                 display_name_, key.repr(), join_keys(in_keys_)));
    }
    if (*kind != EntryKind::Tensor) {
      throw KeyError(fmt::format("{}: input key {} holds a {}, not a tensor", display_name_,
                                 key.repr(), to_string(*kind)));
    }
    inputs.push_back(td.get(key));
  }
  return inputs;
}

void TensorDictModuleBase::write_outputs(TensorDictBase& out,
                                         std::vector<at::Tensor> outputs) const {
  if (outputs.size() != out_keys_.size()) {
    throw ValueError(fmt::format("{}: the module returned {} output(s) for {} out_keys ({})",
                                 display_name_, outputs.size(), out_keys_.size(),
                                 join_keys(out_keys_)));
  }
  // Every output checked against the batch size before any is set, so that
  // a module returning a wrong shape leaves `out` as it was.
  const auto batch = out.batch_size();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (is_skipped(out_keys_[i])) continue;
    const at::Tensor& t = outputs[i];
    if (!t.defined())
      throw ValueError(fmt::format("{}: output {} for key {} is an undefined tensor", display_name_,
                                   i, out_keys_[i].repr()));
    auto sizes = t.sizes();
    if (sizes.size() < batch.size() || !std::equal(batch.begin(), batch.end(), sizes.begin()))
      throw ShapeError(fmt::format(
          "{}: output {} for key {} has shape [{}], which does not start with the batch size [{}]",
          display_name_, i, out_keys_[i].repr(), fmt::join(sizes, ", "), fmt::join(batch, ", ")));
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!is_skipped(out_keys_[i])) out.set(out_keys_[i], std::move(outputs[i]));
  }
}

}  // namespace tensordict::nn
