#pragma once
/// @file nn/calling_convention.h
/// How a model exported from Python is fed from a tensordict: PositionalCall
/// (tensors in order) or DictCall (one dict), given to ScriptTensorDictModule
/// and AOTITensorDictModule, which say what each field means for them
/// (docs/nn_export.md).

#include <tensordict/nested_key.h>
#include <tensordict/nn/ivalue.h>

#include <vector>

namespace tensordict::nn {

/// Tensors in, tensors out: forward(*[td[k] for k in in_keys]).
struct PositionalCall {
  std::vector<NestedKey> in_keys;
  std::vector<NestedKey> out_keys;
};

/// One dict in, one dict out: forward({k: td[k] for k in in_keys}).
struct DictCall {
  std::vector<NestedKey> in_keys;
  /// How nested keys are spelled in both dicts; no default on purpose.
  KeyLayout layout;
  /// Empty: write every entry of the returned dict.
  std::vector<NestedKey> out_keys = {};
};

}  // namespace tensordict::nn
