#pragma once
/// @file typed_fields.h
/// Field declarations of the typed wrappers (TypedTensorDict, TensorClass):
/// the compile-time field table and the macros that declare fields.
///
/// Inside a class deriving from td::TypedTensorDict<Self> or td::TensorClass<Self>:
/// @code
///   TENSORDICT_FIELDS(obs, action);                // required tensor fields
///   TENSORDICT_OPTIONAL_FIELDS(mask);              // tensor fields that may be absent
///   TENSORDICT_NON_TENSOR_FIELDS((float, gamma),   // TensorClass only: any type
///                                (std::string, env));  // nlohmann::json converts
///   TENSORDICT_NESTED_FIELDS((NextState, next));   // a TypedTensorDict class at
///                                                  // the key "next"
/// @endcode
/// Each field `x` of type T gets three members, all one-line forwards to the
/// untyped tensordict with the literal key "x":
///   - `T x() const`: reads it (SchemaError "declared but not set" when absent);
///   - `Self& set_x(T)`: stores it, replacing any entry (Python's `obj.x = v`);
///   - `Self& set_x_(T)` (tensor and nested fields): copies into the existing
///     tensor in place, as set_() does (a nested field: update_() of every
///     key of the value); the form that works on locked (memory-mapped or
///     shared) tensordicts.
/// A nested field's getter returns the typed class over the nested level
/// itself (no copy: writes through it reach this tensordict's storage).
///
/// Rules, checked at compile time where the compiler can:
///   - TENSORDICT_FIELDS appears once in every class, even with no field
///     (`TENSORDICT_FIELDS();`): it also brings in the constructors. The
///     declarations after a field macro are public.
///   - A field may not be named like a method of the wrapper (`index`,
///     `clone`, ...) or have a setter named like one (`non_tensor` ->
///     `set_non_tensor`): Python refuses these too ("shadows a TensorDictBase
///     attribute").
///   - A field is declared once across a class and its bases.
///   - Types containing a comma (std::map<K, V>) need an alias in
///     TENSORDICT_NON_TENSOR_FIELDS.

#include <ATen/core/Tensor.h>
#include <tensordict/errors.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace tensordict {

/// What a field holds.
enum class FieldKind : std::uint8_t {
  Tensor,     ///< a tensor (or, as Python allows, a nested tensordict)
  NonTensor,  ///< a NonTensorData value of a declared C++ type (TensorClass)
  Nested,     ///< a nested tensordict wrapped by a declared TypedTensorDict class
};

/// One declared field of a typed wrapper (see Derived::fields()).
struct FieldInfo {
  std::string_view name;
  /// Required fields must be given to the constructor and be present in what
  /// from_tensordict wraps (when checked).
  bool required = true;
  FieldKind kind = FieldKind::Tensor;
  /// Non-tensor and nested fields: the declared C++ type as written
  /// ("float", "NextState").
  std::string_view type = {};
  /// Non-tensor fields: "" when a JSON value converts to the declared type,
  /// otherwise why it does not.
  std::string (*check)(const nlohmann::json&) = nullptr;
};

namespace detail {

// ---- the field table --------------------------------------------------------

/// The fields one macro declared, tagged with the class that declared them so
/// that a derived class can tell its own declarations from inherited ones.
template <class Owner, std::size_t N>
struct FieldGroup {
  using owner = Owner;
  std::array<FieldInfo, N> fields;
};

/// First argument of make_field_group, so the macros can emit ", field" for
/// every field (an empty list stays valid).
struct FieldGroupStart {};

template <class Owner, class... F>
constexpr FieldGroup<Owner, sizeof...(F)> make_field_group(FieldGroupStart, F... fields) {
  return {{fields...}};
}

/// `group`'s fields when Owner declared them, none when they are inherited.
template <class Owner, class Group>
constexpr auto own_fields(const Group& group) {
  if constexpr (std::is_same_v<typename Group::owner, Owner>)
    return group.fields;
  else
    return std::array<FieldInfo, 0>{};
}

template <std::size_t... N>
constexpr auto concat_fields(const std::array<FieldInfo, N>&... parts) {
  std::array<FieldInfo, (N + ... + 0)> out{};
  std::size_t i = 0;
  ((std::copy(parts.begin(), parts.end(), out.begin() + i), i += parts.size()), ...);
  return out;
}

template <std::size_t N>
constexpr bool has_duplicate_fields(const std::array<FieldInfo, N>& fields) {
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = i + 1; j < N; ++j)
      if (fields[i].name == fields[j].name) return true;
  return false;
}

/// The wrapper-side helpers the field macros call (td_read_tensor_, ...) live
/// in the wrappers; the tag tells whether a class is a typed wrapper.
template <class T, class = void>
struct is_typed_wrapper : std::false_type {};
template <class T>
struct is_typed_wrapper<T, std::void_t<typename T::td_wrapper_tag_>> : std::true_type {};

/// True for TypedTensorDict classes (typed wrappers that are tensordicts
/// themselves, so they can be stored as a nested level).
template <class T>
constexpr bool is_typed_tensordict() {
  if constexpr (is_typed_wrapper<T>::value)
    return !T::td_allows_non_tensor_;
  else
    return false;
}

// ---- names a field may not take ---------------------------------------------

// Methods of TensorDictBase, TypedTensorDict and TensorClass: a field of the
// same name would hide them (or, for set_x, its setter would).
inline constexpr std::string_view kReservedFieldNames[] = {
    "abs",
    "add",
    "add_",
    "all",
    "allclose",
    "amax",
    "amin",
    "any",
    "apply",
    "apply_",
    "as",
    "at",
    "batch_dims",
    "batch_size",
    "cat",
    "chunk",
    "clamp",
    "clear_device_",
    "clone",
    "contains",
    "contiguous",
    "copy",
    "cpu",
    "create_nested",
    "defined",
    "del_",
    "detach",
    "detach_",
    "device",
    "dim",
    "div",
    "div_",
    "empty",
    "entry_kind",
    "eq",
    "equal",
    "exclude",
    "exclude_",
    "exp",
    "expand",
    "field_names",
    "fields",
    "fill_",
    "find",
    "flatten",
    "flatten_keys",
    "for_each",
    "from_schema",
    "from_tensordict",
    "gather",
    "ge",
    "get",
    "get_at",
    "get_item_shape",
    "get_non_tensor",
    "get_tensordict",
    "gt",
    "index",
    "index_put_",
    "is",
    "is_contiguous",
    "is_empty",
    "is_locked",
    "is_memmap",
    "is_node",
    "is_non_tensor",
    "is_same",
    "is_shared",
    "items",
    "keys",
    "lazy_stack",
    "le",
    "len",
    "load_memmap",
    "lock_",
    "log",
    "lt",
    "masked_fill",
    "masked_fill_",
    "masked_select",
    "max",
    "mean",
    "memmap",
    "memmap_",
    "memmap_like",
    "memmap_refresh_",
    "min",
    "mul",
    "mul_",
    "named_apply",
    "narrow",
    "ndim",
    "ne",
    "neg",
    "node",
    "node_ptr",
    "non_tensor_items",
    "non_tensor_values",
    "num_keys",
    "numel",
    "optional_field_names",
    "permute",
    "pop",
    "pow",
    "python_type",
    "rename_key_",
    "repr",
    "required_field_names",
    "requires_grad_",
    "reshape",
    "save",
    "saved_path",
    "select",
    "select_",
    "set",
    "set_",
    "set_at_",
    "set_batch_size",
    "set_non_tensor",
    "shape",
    "share_memory_",
    "shared_name",
    "sigmoid",
    "size",
    "split",
    "sqrt",
    "squeeze",
    "stack",
    "static_type_name",
    "sub",
    "sub_",
    "sum",
    "tensordict",
    "to",
    "to_string",
    "to_tensordict",
    "transpose",
    "type_name",
    "unbind",
    "unflatten",
    "unflatten_keys",
    "unlock_",
    "unsqueeze",
    "update",
    "update_",
    "update_at_",
    "values",
    "view",
    "where",
    "zero_",
};

/// True when a field `name` (with setters `set_name`, `set_name_`) hides
/// nothing. Names starting with "td_" are the wrappers' internals.
constexpr bool field_name_ok(std::string_view name, std::string_view setter,
                             std::string_view inplace_setter) {
  if (name.substr(0, 3) == "td_") return false;
  for (std::string_view r : kReservedFieldNames)
    if (r == name || r == setter || r == inplace_setter) return false;
  return true;
}

// ---- non-tensor values ------------------------------------------------------

template <class T>
struct is_std_optional : std::false_type {};
template <class T>
struct is_std_optional<std::optional<T>> : std::true_type {};

/// True when nlohmann::json converts T both ways (std::optional<U>: U does;
/// nlohmann 3.11 has no std::optional support of its own).
template <class T>
constexpr bool json_convertible() {
  if constexpr (is_std_optional<T>::value) {
    return json_convertible<typename T::value_type>();
  } else {
    return requires(const nlohmann::json& j, const T& v) {
      j.template get<T>();
      nlohmann::json(v);
    };
  }
}

/// The JSON form of a non-tensor value (nullopt -> null).
template <class T>
nlohmann::json to_json_value(const T& value) {
  if constexpr (is_std_optional<T>::value)
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  else
    return nlohmann::json(value);
}

/// A JSON value as T; nlohmann::json::exception when it does not convert.
template <class T>
T from_json_value(const nlohmann::json& j) {
  if constexpr (is_std_optional<T>::value) {
    if (j.is_null()) return std::nullopt;
    return j.template get<typename T::value_type>();
  } else {
    return j.template get<T>();
  }
}

template <class T>
std::string check_json_value(const nlohmann::json& j) {
  try {
    (void)from_json_value<T>(j);
    return {};
  } catch (const nlohmann::json::exception& e) {
    return e.what();
  }
}

template <class T>
constexpr FieldInfo non_tensor_field(std::string_view name, std::string_view type) {
  return FieldInfo{name, false, FieldKind::NonTensor, type, &check_json_value<T>};
}

// ---- error texts --------------------------------------------------------------

/// "a, b, c".
inline std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
/// "a, b, c" sorted (Python's error texts list fields sorted).
inline std::string join_sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return join_names(names);
}

// ---- lookups and checks shared by TypedTensorDict and TensorClass ------------

/// The field of `fields` named `name`, or nullptr.
inline const FieldInfo* find_field(std::span<const FieldInfo> fields, std::string_view name) {
  for (const FieldInfo& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

/// The names of `fields` (required ones when `required`, optional ones when
/// `optional`), in declaration order.
inline std::vector<std::string> field_names(std::span<const FieldInfo> fields, bool required,
                                            bool optional) {
  std::vector<std::string> out;
  for (const FieldInfo& f : fields)
    if (f.required ? required : optional) out.emplace_back(f.name);
  return out;
}

/// SchemaError "`what` missing required field(s): a, b" when a required field
/// of `fields` is not `present(name)`.
template <class Present>
void check_required_present(std::span<const FieldInfo> fields, const std::string& what,
                            Present present) {
  std::vector<std::string> missing;
  for (const FieldInfo& f : fields)
    if (f.required && !present(f.name)) missing.emplace_back(f.name);
  if (!missing.empty())
    throw SchemaError(what + " missing required field(s): " + join_sorted(std::move(missing)));
}

/// True when a constructor's items hold an entry under the field `name`.
template <class Items>
bool items_name_field(const Items& items, std::string_view name) {
  return std::any_of(items.begin(), items.end(),
                     [&](const auto& it) { return !it.first.empty() && it.first.front() == name; });
}

/// The checks of a typed wrapper's constructor over its (key, value) items,
/// before anything is built: every required field present, then no item
/// outside `fields` (SchemaError "`what` got unexpected field(s): ..."), and
/// `on_field(field, item)` on each declared one (a wrapper's own checks).
template <class Items, class OnField>
void check_constructor_items(std::span<const FieldInfo> fields, const std::string& what,
                             const Items& items, OnField on_field) {
  check_required_present(fields, what,
                         [&](std::string_view name) { return items_name_field(items, name); });
  std::vector<std::string> unexpected;
  for (const auto& it : items) {
    if (it.first.empty()) continue;
    const FieldInfo* f = find_field(fields, it.first.front());
    if (!f) {
      unexpected.push_back(it.first.front());
      continue;
    }
    on_field(*f, it);
  }
  if (!unexpected.empty())
    throw SchemaError(what + " got unexpected field(s): " + join_sorted(std::move(unexpected)));
}

/// SchemaError "'Cls' has field 'x' declared but not set".
[[noreturn]] inline void throw_field_not_set(std::string_view cls, std::string_view name) {
  throw SchemaError("'" + std::string(cls) + "' has field '" + std::string(name) +
                    "' declared but not set");
}

// ---- class names --------------------------------------------------------------

/// The name of T as the compiler spells it ("ns::Replay").
template <class T>
std::string_view spelled_type_name() {
#if defined(__clang__) || defined(__GNUC__)
  // "... [with T = ns::Replay; ...]" (GCC) or "... [T = ns::Replay]" (Clang)
  std::string_view p = __PRETTY_FUNCTION__;
  std::size_t start = p.find("T = ");
  if (start != std::string_view::npos) {
    start += 4;
    std::size_t end = p.find_first_of(";]", start);
    return p.substr(start, end - start);
  }
#endif
  return typeid(T).name();
}

/// The class name without namespaces or enclosing classes, as Python's
/// `__name__` ("Replay").
template <class T>
std::string unqualified_type_name() {
  std::string_view n = spelled_type_name<T>();
  std::size_t end = n.find('<');
  std::size_t colon = n.substr(0, end).rfind("::");
  return std::string(colon == std::string_view::npos ? n : n.substr(colon + 2));
}

}  // namespace detail
}  // namespace tensordict

// ---- macro plumbing: apply a macro to each argument (C++20 __VA_OPT__) -----------

#define TENSORDICT_DETAIL_PARENS ()
#define TENSORDICT_DETAIL_EXPAND(...)                  \
  TENSORDICT_DETAIL_EXPAND3(TENSORDICT_DETAIL_EXPAND3( \
      TENSORDICT_DETAIL_EXPAND3(TENSORDICT_DETAIL_EXPAND3(__VA_ARGS__))))
#define TENSORDICT_DETAIL_EXPAND3(...)                 \
  TENSORDICT_DETAIL_EXPAND2(TENSORDICT_DETAIL_EXPAND2( \
      TENSORDICT_DETAIL_EXPAND2(TENSORDICT_DETAIL_EXPAND2(__VA_ARGS__))))
#define TENSORDICT_DETAIL_EXPAND2(...)                 \
  TENSORDICT_DETAIL_EXPAND1(TENSORDICT_DETAIL_EXPAND1( \
      TENSORDICT_DETAIL_EXPAND1(TENSORDICT_DETAIL_EXPAND1(__VA_ARGS__))))
#define TENSORDICT_DETAIL_EXPAND1(...) __VA_ARGS__
// 4^3 = 64 rescans, one per field: at most 64 fields per macro call.
#define TENSORDICT_DETAIL_FOR_EACH(macro, ...) \
  __VA_OPT__(TENSORDICT_DETAIL_EXPAND(TENSORDICT_DETAIL_FOR_EACH_STEP(macro, __VA_ARGS__)))
#define TENSORDICT_DETAIL_FOR_EACH_STEP(macro, first, ...) \
  macro(first)                                             \
      __VA_OPT__(TENSORDICT_DETAIL_FOR_EACH_AGAIN TENSORDICT_DETAIL_PARENS(macro, __VA_ARGS__))
#define TENSORDICT_DETAIL_FOR_EACH_AGAIN() TENSORDICT_DETAIL_FOR_EACH_STEP
#define TENSORDICT_DETAIL_UNPAREN(...) __VA_ARGS__
#define TENSORDICT_DETAIL_CALL(macro, ...) macro(__VA_ARGS__)

// ---- per-field pieces ------------------------------------------------------------

#define TENSORDICT_DETAIL_REQUIRED_INFO(name) \
  , ::tensordict::FieldInfo { #name, true, ::tensordict::FieldKind::Tensor }
#define TENSORDICT_DETAIL_OPTIONAL_INFO(name) \
  , ::tensordict::FieldInfo { #name, false, ::tensordict::FieldKind::Tensor }

#define TENSORDICT_DETAIL_CHECK_NAME(name)                                                  \
  static_assert(::tensordict::detail::field_name_ok(#name, "set_" #name, "set_" #name "_"), \
                "field '" #name                                                             \
                "' would hide a method of the typed wrapper (or its "                       \
                "setter set_" #name " would): rename the field");

#define TENSORDICT_DETAIL_TENSOR_ACCESSORS(name)                     \
  TENSORDICT_DETAIL_CHECK_NAME(name)                                 \
  ::at::Tensor name() const { return this->td_read_tensor_(#name); } \
  td_self_& set_##name(const ::at::Tensor& value) {                  \
    this->td_write_tensor_(#name, value);                            \
    return *this;                                                    \
  }                                                                  \
  td_self_& set_##name##_(const ::at::Tensor& value) {               \
    this->td_write_tensor_inplace_(#name, value);                    \
    return *this;                                                    \
  }

#define TENSORDICT_DETAIL_NON_TENSOR_INFO_(type, name) \
  , ::tensordict::detail::non_tensor_field<type>(#name, #type)
#define TENSORDICT_DETAIL_NON_TENSOR_INFO(pair) \
  TENSORDICT_DETAIL_CALL(TENSORDICT_DETAIL_NON_TENSOR_INFO_, TENSORDICT_DETAIL_UNPAREN pair)

#define TENSORDICT_DETAIL_NON_TENSOR_ACCESSORS_(type, name)                                \
  TENSORDICT_DETAIL_CHECK_NAME(name)                                                       \
  static_assert(::tensordict::detail::json_convertible<type>(),                            \
                "non-tensor field '" #name "': nlohmann::json cannot convert " #type       \
                "; give the type to_json/from_json (NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE)"); \
  type name() const { return this->template td_read_non_tensor_<type>(#name); }            \
  td_self_& set_##name(const type& value) {                                                \
    this->td_write_non_tensor_(#name, ::tensordict::detail::to_json_value(value));         \
    return *this;                                                                          \
  }
#define TENSORDICT_DETAIL_NON_TENSOR_ACCESSORS(pair) \
  TENSORDICT_DETAIL_CALL(TENSORDICT_DETAIL_NON_TENSOR_ACCESSORS_, TENSORDICT_DETAIL_UNPAREN pair)

#define TENSORDICT_DETAIL_NESTED_INFO_(type, name) \
  , ::tensordict::FieldInfo { #name, true, ::tensordict::FieldKind::Nested, #type }
#define TENSORDICT_DETAIL_NESTED_INFO(pair) \
  TENSORDICT_DETAIL_CALL(TENSORDICT_DETAIL_NESTED_INFO_, TENSORDICT_DETAIL_UNPAREN pair)

#define TENSORDICT_DETAIL_NESTED_ACCESSORS_(type, name)                                     \
  TENSORDICT_DETAIL_CHECK_NAME(name)                                                        \
  static_assert(::tensordict::detail::is_typed_tensordict<type>(),                          \
                "nested field '" #name "': " #type " must be a td::TypedTensorDict class"); \
  type name() const {                                                                       \
    return type::from_tensordict(this->td_read_nested_(#name), /*check=*/false);            \
  }                                                                                         \
  td_self_& set_##name(const type& value) {                                                 \
    this->td_write_nested_(#name, value);                                                   \
    return *this;                                                                           \
  }                                                                                         \
  td_self_& set_##name##_(const type& value) {                                              \
    this->td_write_nested_inplace_(#name, value);                                           \
    return *this;                                                                           \
  }
#define TENSORDICT_DETAIL_NESTED_ACCESSORS(pair) \
  TENSORDICT_DETAIL_CALL(TENSORDICT_DETAIL_NESTED_ACCESSORS_, TENSORDICT_DETAIL_UNPAREN pair)

// ---- the public macros -------------------------------------------------------------

/// Declares required tensor fields (and brings in the wrapper's constructors).
/// Use exactly once per class, with no argument when the class adds none.
#define TENSORDICT_FIELDS(...)                                                \
 public:                                                                      \
  using td_wrapper_::td_wrapper_;                                             \
  static constexpr auto td_required_fields_() {                               \
    return ::tensordict::detail::make_field_group<td_self_>(                  \
        ::tensordict::detail::FieldGroupStart {} TENSORDICT_DETAIL_FOR_EACH(  \
            TENSORDICT_DETAIL_REQUIRED_INFO, __VA_ARGS__));                   \
  }                                                                           \
  TENSORDICT_DETAIL_FOR_EACH(TENSORDICT_DETAIL_TENSOR_ACCESSORS, __VA_ARGS__) \
  static_assert(true, "")

/// Declares tensor fields that may be absent (Python's NotRequired[Tensor]).
#define TENSORDICT_OPTIONAL_FIELDS(...)                                       \
 public:                                                                      \
  static constexpr auto td_optional_fields_() {                               \
    return ::tensordict::detail::make_field_group<td_self_>(                  \
        ::tensordict::detail::FieldGroupStart {} TENSORDICT_DETAIL_FOR_EACH(  \
            TENSORDICT_DETAIL_OPTIONAL_INFO, __VA_ARGS__));                   \
  }                                                                           \
  TENSORDICT_DETAIL_FOR_EACH(TENSORDICT_DETAIL_TENSOR_ACCESSORS, __VA_ARGS__) \
  static_assert(true, "")

/// Declares non-tensor fields as (type, name) pairs, stored as NonTensorData
/// (JSON) leaves. TensorClass only. A std::optional<T> field reads nullopt
/// when absent; other types throw SchemaError "declared but not set".
#define TENSORDICT_NON_TENSOR_FIELDS(...)                                          \
 public:                                                                           \
  static_assert(td_allows_non_tensor_,                                             \
                "TypedTensorDict fields are tensors only (as in Python): declare " \
                "non-tensor fields in a td::TensorClass");                         \
  static constexpr auto td_non_tensor_fields_() {                                  \
    return ::tensordict::detail::make_field_group<td_self_>(                       \
        ::tensordict::detail::FieldGroupStart {} TENSORDICT_DETAIL_FOR_EACH(       \
            TENSORDICT_DETAIL_NON_TENSOR_INFO, __VA_ARGS__));                      \
  }                                                                                \
  TENSORDICT_DETAIL_FOR_EACH(TENSORDICT_DETAIL_NON_TENSOR_ACCESSORS, __VA_ARGS__)  \
  static_assert(true, "")

/// Declares required nested fields as (Type, name) pairs: the entry `name` is
/// a nested tensordict whose fields Type (a TypedTensorDict class) declares,
/// as Python's `next: NextState` annotation. `x()` wraps the nested level live
/// (its own fields are checked when read), `set_x(v)` stores v there,
/// `set_x_(v)` copies v's entries into the existing ones (update_).
#define TENSORDICT_NESTED_FIELDS(...)                                         \
 public:                                                                      \
  static constexpr auto td_nested_fields_() {                                 \
    return ::tensordict::detail::make_field_group<td_self_>(                  \
        ::tensordict::detail::FieldGroupStart {} TENSORDICT_DETAIL_FOR_EACH(  \
            TENSORDICT_DETAIL_NESTED_INFO, __VA_ARGS__));                     \
  }                                                                           \
  TENSORDICT_DETAIL_FOR_EACH(TENSORDICT_DETAIL_NESTED_ACCESSORS, __VA_ARGS__) \
  static_assert(true, "")
