#pragma once
// Writes a state dict as Python's torch.save writes an OrderedDict of tensors
// (docs/state_dict.md, "The file"), so that torch.load reads it with
// weights_only=True, its default: only the globals its safe unpickler allows
// (collections.OrderedDict, torch._utils._rebuild_tensor_v2/_v3,
// torch.<Type>Storage, torch.storage.UntypedStorage, torch.Size,
// torch.device, torch.<dtype>). Not installed.

#include <tensordict/state_dict.h>

#include <cstddef>
#include <functional>

namespace tensordict::detail {

/// Writes the torch zip archive holding `state_dict`, passing its bytes in
/// order to `sink` as they are made (the tensors' bytes from where they are,
/// not copied): an OrderedDict of its items (nested StateDicts as nested
/// OrderedDicts), whose metadata is the `_metadata` attribute Python's
/// state_dict() carries, and one storage record per tensor. What `sink`
/// throws is thrown once the archive is finished.
void torch_save_to(const StateDict& state_dict,
                   const std::function<void(const char*, std::size_t)>& sink);

}  // namespace tensordict::detail
