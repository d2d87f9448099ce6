#pragma once
// A bounded reader of the archives torch.save and torch::pickle_save write
// for a dict of tensors (a zip of stored records: <name>/data.pkl, the
// pickle, and <name>/data/<key>, the storages). Untrusted files never reach
// LibTorch's unpickler (issue #19). Not installed.

#include <ATen/core/ivalue.h>

#include <string>

namespace tensordict::detail {

/// The object pickled in `bytes` (a torch zip archive), as an IValue: dicts
/// (OrderedDict too, its `_metadata` attribute as a "_metadata" item),
/// lists, tuples (torch.Size as a tuple), str, int, float, bool, None,
/// torch.device and tensors over the archive's storages: views of `bytes`
/// (a uint8 tensor holding the file) where a record is aligned for its
/// dtype, as torch.save writes them, copies otherwise.
/// Only the pickle opcodes and globals that torch.save writes for such
/// objects are accepted; anything else, a truncated or inconsistent archive,
/// nesting deeper than kMaxNestingDepth or a tensor outside its storage is a
/// FormatError naming `what` (the file).
c10::IValue read_torch_archive(const at::Tensor& bytes, const std::string& what);

}  // namespace tensordict::detail
