// Conversions between tensordicts and TorchScript values (docs/nn_export.md).
#include <tensordict/errors.h>
#include <tensordict/nn/ivalue.h>

#include <ATen/core/jit_type.h>
#include <fmt/format.h>

#include <utility>

namespace tensordict::nn {

KeyLayout KeyLayout::flattened(std::string separator) {
  if (separator.empty()) throw ValueError("KeyLayout::flattened: the separator is empty");
  return KeyLayout(true, std::move(separator));
}

NestedKey KeyLayout::child(const NestedKey& parent, const std::string& name) const {
  if (!flattened_ || name.find(separator_) == std::string::npos) return parent + NestedKey(name);
  NestedKey key = parent;
  std::size_t start = 0;
  while (true) {
    const auto at = name.find(separator_, start);
    key = key + NestedKey(name.substr(start, at == std::string::npos ? at : at - start));
    if (at == std::string::npos) return key;
    start = at + separator_.size();
  }
}

namespace {

// The TorchScript type a converted value is seen as in its dict, as a
// scripted signature spells it (a tensor is `Tensor`, not its refined type).
c10::TypePtr static_type(const c10::IValue& v) {
  if (v.isTensor()) return c10::TensorType::get();
  if (v.isGenericDict()) {
    const auto dict = v.toGenericDict();
    return c10::DictType::create(dict.keyType(), dict.valueType());
  }
  return v.type();
}

// A dict typed by the common type of its values (Any when they differ), so
// that a `Dict[str, Tensor]` argument accepts it.
class TypedDictBuilder {
 public:
  void insert(std::string name, c10::IValue value, const NestedKey& key) {
    auto type = static_type(value);
    if (!value_type_) {
      value_type_ = type;
    } else if (*value_type_ != *type) {
      mixed_ = true;
    }
    // Names of one level are distinct; flat names made by joining may not be.
    for (const auto& entry : entries_) {
      if (entry.first == name) {
        throw ValueError(
            fmt::format("to_ivalue_dict: key {} and another key have the same flattened name '{}'",
                        key.repr(), name));
      }
    }
    entries_.emplace_back(std::move(name), std::move(value));
  }
  // An empty dict is a Dict[str, Tensor], the type models take most.
  c10::impl::GenericDict finish() && {
    c10::TypePtr type = !value_type_ ? c10::TypePtr(c10::TensorType::get())
                        : mixed_     ? c10::TypePtr(c10::AnyType::get())
                                     : value_type_;
    c10::impl::GenericDict dict(c10::StringType::get(), std::move(type));
    dict.reserve(entries_.size());
    for (auto& [name, value] : entries_) dict.insert(std::move(name), std::move(value));
    return dict;
  }

 private:
  // Gathered first: the dict's value type is known once every value is.
  std::vector<std::pair<std::string, c10::IValue>> entries_;
  c10::TypePtr value_type_;
  bool mixed_ = false;
};

c10::IValue non_tensor_to_ivalue(const nlohmann::json& data, const NestedKey& key) {
  switch (data.type()) {
    case nlohmann::json::value_t::null:
      return c10::IValue();
    case nlohmann::json::value_t::boolean:
      return c10::IValue(data.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return c10::IValue(data.get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return c10::IValue(data.get<double>());
    case nlohmann::json::value_t::string:
      return c10::IValue(data.get<std::string>());
    default:
      throw TypeError(fmt::format(
          "to_ivalue: the non-tensor at key {} holds a JSON {}; only a string, a number, a "
          "bool or null has a TorchScript value",
          key.repr(), data.type_name()));
  }
}

void add_entry(TypedDictBuilder& out, const NestedKey& key, const Value& value,
               const KeyLayout& layout, const std::string& name);

// The entries of `td` (at `prefix`) into `out`: as one nested dict per level,
// or spread as flat names into the one top-level dict.
void add_level(TypedDictBuilder& out, const TensorDictBase& td, const NestedKey& prefix,
               const KeyLayout& layout, const std::string& name_prefix) {
  for (auto [name, value] : td.items_view()) {
    const std::string part(name);
    add_entry(out, prefix + NestedKey(part), value, layout,
              name_prefix.empty() ? part : name_prefix + layout.separator() + part);
  }
}

void add_entry(TypedDictBuilder& out, const NestedKey& key, const Value& value,
               const KeyLayout& layout, const std::string& name) {
  switch (value.kind()) {
    case EntryKind::Tensor:
      out.insert(name, value.tensor(), key);
      return;
    case EntryKind::NonTensor:
      out.insert(name, non_tensor_to_ivalue(value.non_tensor().data(), key), key);
      return;
    case EntryKind::NonTensorStack:
      throw TypeError(fmt::format(
          "to_ivalue: key {} holds a NonTensorStack (one value per batch element), which has "
          "no TorchScript value",
          key.repr()));
    case EntryKind::TensorDict:
      if (layout.is_flattened()) {
        add_level(out, value.tensordict(), key, layout, name);
      } else {
        TypedDictBuilder nested;
        add_level(nested, value.tensordict(), key, layout, {});
        out.insert(name, std::move(nested).finish(), key);
      }
      return;
  }
}

std::string describe_ivalue(const c10::IValue& v) { return v.tagKind(); }

void write_value(TensorDictBase& out, const NestedKey& key, const c10::IValue& value,
                 const KeyLayout& layout);

void write_children(TensorDictBase& out, const NestedKey& prefix, const c10::IValue& value,
                    const KeyLayout& layout) {
  if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (!entry.key().isString()) {
        throw TypeError(fmt::format(
            "from_ivalue: the dict at {} has a key of type {}; only string keys name entries",
            prefix.empty() ? std::string("the top") : prefix.repr(), describe_ivalue(entry.key())));
      }
      write_value(out, layout.child(prefix, entry.key().toStringRef()), entry.value(), layout);
    }
    return;
  }
  const auto write_sequence = [&](c10::ArrayRef<c10::IValue> elements) {
    for (std::size_t i = 0; i < elements.size(); ++i) {
      write_value(out, prefix + NestedKey(std::to_string(i)), elements[i], layout);
    }
  };
  if (value.isTuple()) return write_sequence(value.toTupleRef().elements());
  if (value.isList()) return write_sequence(value.toListRef());
  throw TypeError(fmt::format("from_ivalue: {} is a {}, not a dict, a tuple or a list",
                              prefix.empty() ? std::string("the value") : prefix.repr(),
                              describe_ivalue(value)));
}

void write_value(TensorDictBase& out, const NestedKey& key, const c10::IValue& value,
                 const KeyLayout& layout) {
  if (value.isTensor()) {
    out.set(key, value.toTensor());
  } else if (value.isGenericDict() || value.isTuple() || value.isList()) {
    if (!out.entry_kind(key)) out.set(key, TensorDict(out.batch_size(), out.device()));
    write_children(out, key, value, layout);
  } else if (value.isString()) {
    out.set_non_tensor(key, value.toStringRef());
  } else if (value.isBool()) {
    out.set_non_tensor(key, value.toBool());
  } else if (value.isInt()) {
    out.set_non_tensor(key, value.toInt());
  } else if (value.isDouble()) {
    out.set_non_tensor(key, value.toDouble());
  } else if (value.isNone()) {
    out.set_non_tensor(key, nullptr);
  } else {
    throw TypeError(fmt::format(
        "from_ivalue: key {} holds a {}; a tensordict holds tensors, dicts, tuples, lists, "
        "strings, numbers, bools and None",
        key.repr(), describe_ivalue(value)));
  }
}

}  // namespace

c10::impl::GenericDict to_ivalue_dict(const TensorDictBase& td, const KeyLayout& layout) {
  TypedDictBuilder out;
  add_level(out, td, {}, layout, {});
  return std::move(out).finish();
}

c10::impl::GenericDict to_ivalue_dict(const TensorDictBase& td, const std::vector<NestedKey>& keys,
                                      const KeyLayout& layout) {
  TypedDictBuilder out;
  for (const auto& key : keys) {
    if (key.empty()) throw ValueError("to_ivalue_dict: an empty key");
    if (!td.entry_kind(key)) {
      throw KeyError(fmt::format("to_ivalue_dict: key {} is not in the tensordict", key.repr()));
    }
    if (key.is_nested() && !layout.is_flattened()) {
      // Nested dicts holding only what the keys ask for, merged where keys
      // share a parent: the selection of the keys, converted whole.
      return to_ivalue_dict(td.select(keys), layout);
    }
    const Value value = td.at(key);
    add_entry(out, key, value, layout,
              layout.is_flattened() ? key.join(layout.separator()) : key.front());
  }
  return std::move(out).finish();
}

c10::IValue to_ivalue(const TensorDictBase& td, const KeyLayout& layout) {
  return c10::IValue(to_ivalue_dict(td, layout));
}

TensorDict from_ivalue(const c10::IValue& value, at::IntArrayRef batch_size,
                       const KeyLayout& layout) {
  TensorDict out(batch_size);
  update_from_ivalue(out, value, layout);
  return out;
}

void set_from_ivalue(TensorDictBase& out, const NestedKey& key, const c10::IValue& value,
                     const KeyLayout& layout) {
  if (key.empty()) throw ValueError("set_from_ivalue: an empty key");
  write_value(out, key, value, layout);
}

void update_from_ivalue(TensorDictBase& out, const c10::IValue& value, const KeyLayout& layout,
                        const NestedKey& prefix) {
  if (!prefix.empty() && !out.entry_kind(prefix)) {
    out.set(prefix, TensorDict(out.batch_size(), out.device()));
  }
  write_children(out, prefix, value, layout);
}

}  // namespace tensordict::nn
