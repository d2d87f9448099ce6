#pragma once
/// @file nn/ivalue.h
/// Conversions between a tensordict and TorchScript values (c10::IValue), the
/// form TorchScript models take and return (docs/nn_export.md).
///
/// A nested key is either a nested dict ({"obs": {"pos": t}}) or one flat name
/// made with a separator ({"obs.pos": t}). Which one is an explicit KeyLayout
/// argument of every conversion: TorchScript dicts have a single value type, so
/// a model takes one or the other, and guessing would silently pick the wrong
/// one.
///
/// tensordict -> IValue: a tensor is itself; a nested tensordict is a nested
/// dict (KeyLayout::nested) or is spread into flat names; a NonTensorData whose
/// value is a string, a number, a bool or null becomes that str / int / float /
/// bool / None. Dicts are typed as TorchScript expects: Dict[str, Tensor] when
/// every value is a tensor, Dict[str, Dict[str, Tensor]] when every value is
/// such a dict, and so on; Dict[str, Any] when values differ. Other
/// non-tensors (a NonTensorStack, a JSON list or object) are a TypeError
/// naming the key.
///
/// IValue -> TensorDict (from_ivalue): a dict with string keys gives keys; a
/// tuple or a list gives the keys "0", "1", ... (Python's TensorDict.from_dict
/// and from_pytree do the same for tuples; Python keeps a list as a
/// NonTensorStack, but a TorchScript list of tensors is a sequence of outputs,
/// so it is treated as a tuple here). A str, int, float, bool or None leaf is
/// a NonTensorData (Python's from_dict makes numbers 0-dim tensors, which a
/// tensordict with a batch size cannot hold). With KeyLayout::flattened(sep),
/// names holding `sep` are split into nested keys. Anything else (an object,
/// a device, a future) is a TypeError naming the key path; a tensor that does
/// not start with the batch size is a ShapeError naming it.

#include <tensordict/nested_key.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tensordict::nn {

/// How nested keys are spelled in a dict of IValues.
class KeyLayout {
 public:
  /// Nested keys are nested dicts: ("obs", "pos") is d["obs"]["pos"].
  static KeyLayout nested() { return KeyLayout(false, {}); }
  /// Nested keys are single names joined with `separator`: ("obs", "pos") is
  /// d["obs.pos"] for ".". An empty separator is a ValueError.
  static KeyLayout flattened(std::string separator = ".");

  bool is_flattened() const noexcept { return flattened_; }
  const std::string& separator() const noexcept { return separator_; }
  /// The key that the dict entry `name` under `parent` stands for: one more
  /// part, or, flattened, the parts of `name` split at the separator.
  NestedKey child(const NestedKey& parent, const std::string& name) const;

 private:
  KeyLayout(bool flattened, std::string separator)
      : flattened_(flattened), separator_(std::move(separator)) {}
  bool flattened_;
  std::string separator_;
};

/// The whole tensordict as a dict (see the file comment for types). A
/// GenericDict (c10::Dict<IValue, IValue>) with string keys, because it
/// carries its value type at run time (Dict[str, Tensor], ...), which a
/// c10::Dict<std::string, IValue> cannot: that one is always Dict[str, Any],
/// and a scripted `Dict[str, Tensor]` argument refuses it.
c10::impl::GenericDict to_ivalue_dict(const TensorDictBase& td, const KeyLayout& layout);
/// Only `keys` (a key naming a nested tensordict takes all of it; with
/// KeyLayout::nested, nested keys that share a parent share its dict). A
/// missing key is a KeyError naming it.
c10::impl::GenericDict to_ivalue_dict(const TensorDictBase& td, const std::vector<NestedKey>& keys,
                                      const KeyLayout& layout);
/// to_ivalue_dict() as an IValue (what a `Dict[str, ...]` argument takes).
c10::IValue to_ivalue(const TensorDictBase& td, const KeyLayout& layout);

/// A TensorDict with `batch_size` from a dict, tuple or list IValue (see the
/// file comment). A tensor or a scalar at the top is a TypeError: it has no key.
TensorDict from_ivalue(const c10::IValue& value, at::IntArrayRef batch_size,
                       const KeyLayout& layout);

/// Sets `value` (a tensor, a dict / tuple / list, or a scalar leaf, as
/// from_ivalue) at `key` of `out`.
void set_from_ivalue(TensorDictBase& out, const NestedKey& key, const c10::IValue& value,
                     const KeyLayout& layout);

/// Writes the entries of `value` (a dict, tuple or list, as from_ivalue) into
/// `out` under `prefix` (empty: at the top), keeping what `out` already holds.
/// Errors name the key path below `prefix`.
void update_from_ivalue(TensorDictBase& out, const c10::IValue& value, const KeyLayout& layout,
                        const NestedKey& prefix = {});

}  // namespace tensordict::nn
