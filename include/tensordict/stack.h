#pragma once
/// @file stack.h
/// Dense stacking and concatenation of tensordicts.

#include <tensordict/tensor_dict.h>

#include <vector>

namespace tensordict {

/// Stacks tensordicts along a new batch dim `dim` (in [-B-1, B]) into a new
/// TensorDict. Every input must have the same batch size (ShapeError), the same
/// keys (KeyError listing the differing keys) and leaves of equal shapes
/// (ShapeError naming the key). Non-tensor entries that hold the same value in
/// every input stay one NonTensorData (with the stacked batch size); different
/// values, or NonTensorStack entries, give a NonTensorStack with one value per
/// element. The device is the first input's.
TensorDict stack(const std::vector<TensorDictBase>& tds, int64_t dim = 0);

/// Concatenates tensordicts along the existing batch dim `dim`. Keys must
/// match exactly; batch sizes must agree except along `dim`. Non-tensor
/// entries follow stack()'s rule (equal values stay one NonTensorData).
TensorDict cat(const std::vector<TensorDictBase>& tds, int64_t dim = 0);

}  // namespace tensordict
