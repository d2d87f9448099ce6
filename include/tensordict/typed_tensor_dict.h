#pragma once
/// @file typed_tensor_dict.h
/// TypedTensorDict: a tensordict with declared fields (Python's
/// tensordict.TypedTensorDict). It IS-A TensorDictBase: a handle to the
/// storage it wraps, so it goes wherever a tensordict goes, copying it is a
/// handle copy, and writes through it reach the storage.
///
/// @code
///   namespace td = tensordict;
///   struct Replay : td::TypedTensorDict<Replay> {
///     TENSORDICT_FIELDS(obs, action, reward);
///   };
///   // Inheritance adds fields.
///   struct ReplayWithInfo : td::TypedTensorDict<ReplayWithInfo, Replay> {
///     TENSORDICT_FIELDS(info);
///     TENSORDICT_OPTIONAL_FIELDS(mask);
///   };
///   // A nested level with fields of its own.
///   struct Step : td::TypedTensorDict<Step> {
///     TENSORDICT_FIELDS(obs);
///     TENSORDICT_NESTED_FIELDS((Replay, next));   // step.next().obs()
///   };
///
///   Replay r({{"obs", torch::zeros({4, 3})}, {"action", torch::zeros({4, 2})},
///             {"reward", torch::zeros({4})}}, /*batch_size=*/{4});
///   at::Tensor obs = r.obs();                     // get("obs")
///   r.set_reward(torch::ones({4}));               // set("reward", ...)
///   Replay first = r[0];                          // ops keep the type
///   Replay live = Replay::from_tensordict(store); // any storage, no copy
/// @endcode
///
/// Fields are declared with the macros of typed_fields.h. Only key presence is
/// checked (as in Python): by the constructor (missing and unexpected fields),
/// by from_tensordict (missing fields, unless check=false) and by the
/// accessors (a field declared but not set). Entries added later under other
/// keys are kept. Operations that return a new tensordict (index, clone, to,
/// shape ops, stack) return the derived type without checking again;
/// apply/select/exclude and arithmetic return plain tensordicts.
///
/// A derived class holds nothing but the handle: it may not add data members
/// (they would be lost when operations re-wrap results; checked at compile
/// time).
///
/// is<Replay>() / as<Replay>() on a TensorDictBase: a typed wrapper has no
/// storage type of its own, so is<Replay>() tests the schema (every required
/// field present) and as<Replay>() wraps like from_tensordict(td), throwing
/// TypeError instead of SchemaError.

#include <tensordict/errors.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/node.h>
#include <tensordict/schema.h>
#include <tensordict/stack.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>
#include <tensordict/typed_fields.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tensordict {

/// See the file comment. `Base` is TensorDictBase, or another TypedTensorDict
/// class whose fields this one inherits.
template <class Derived, class Base = TensorDictBase>
class TypedTensorDict : public Base {
  static_assert(std::is_same_v<Base, TensorDictBase> || detail::is_typed_wrapper<Base>::value,
                "TypedTensorDict<Derived, Base>: Base must be td::TensorDictBase or another "
                "TypedTensorDict class (whose fields Derived inherits)");

 public:
  // Names the field macros rely on (not for user code).
  using td_self_ = Derived;
  using td_wrapper_ = TypedTensorDict;
  using td_wrapper_tag_ = void;
  static constexpr bool td_allows_non_tensor_ = false;
  static constexpr detail::FieldGroup<void, 0> td_required_fields_() { return {}; }
  static constexpr detail::FieldGroup<void, 0> td_optional_fields_() { return {}; }
  static constexpr detail::FieldGroup<void, 0> td_nested_fields_() { return {}; }

  /// A null handle (defined() is false).
  TypedTensorDict() = default;
  /// A new in-memory TensorDict from (key, value) pairs, like TensorDict's
  /// constructor. SchemaError "missing required field(s): ..." or "got
  /// unexpected field(s): ..." (checked first, sorted names); a nested key
  /// counts as its first level.
  TypedTensorDict(std::initializer_list<TensorDict::Item> items, at::IntArrayRef batch_size = {},
                  std::optional<at::Device> device = std::nullopt)
      : Base(td_construct_(items, batch_size, device)) {}
  TypedTensorDict(const std::vector<TensorDict::Item>& items, at::IntArrayRef batch_size = {},
                  std::optional<at::Device> device = std::nullopt)
      : Base(td_construct_(items, batch_size, device)) {}
  /// Wraps a storage without any check (what as<Derived>() uses).
  explicit TypedTensorDict(std::shared_ptr<Node> node) : Base(std::move(node)) {}

  // ---- the schema -------------------------------------------------------------
  /// Every field, the base classes' first, in declaration order
  /// (TENSORDICT_FIELDS, then TENSORDICT_OPTIONAL_FIELDS and
  /// TENSORDICT_NESTED_FIELDS).
  static std::span<const FieldInfo> fields() noexcept {
    static constexpr auto table = td_all_fields_();
    static_assert(!detail::has_duplicate_fields(table),
                  "a field is declared twice (in this class or in one of its bases)");
    return table;
  }
  /// Python's __expected_keys__, __required_keys__, __optional_keys__ (in
  /// declaration order).
  static std::vector<std::string> field_names() {
    return detail::field_names(fields(), true, true);
  }
  static std::vector<std::string> required_field_names() {
    return detail::field_names(fields(), true, false);
  }
  static std::vector<std::string> optional_field_names() {
    return detail::field_names(fields(), false, true);
  }

  /// True when `node` holds every required field (see the file comment).
  static bool is_node(const Node& node) {
    for (const FieldInfo& f : fields())
      if (f.required && !node.kind(f.name)) return false;
    return true;
  }
  /// The class name ("Replay").
  static const char* static_type_name() {
    static const std::string name = detail::unqualified_type_name<Derived>();
    return name.c_str();
  }

  // ---- wrapping ---------------------------------------------------------------
  /// Wraps `td` live: no copy, reads and writes go to its storage. With
  /// `check`, every required field must be present (SchemaError naming the
  /// missing ones); check=false wraps empty or partly filled storages (a
  /// pre-allocated buffer), whose missing fields fail when read.
  static Derived from_tensordict(const TensorDictBase& td, bool check = true) {
    if (!td.defined())
      throw ValueError(std::string(static_type_name()) +
                       ".from_tensordict(): null tensordict handle");
    if (check)
      detail::check_required_present(
          fields(), std::string(static_type_name()) + ".from_tensordict()",
          [&](std::string_view name) { return td.contains(NestedKey(name)); });
    return td_wrap_(td);
  }

  /// from_tensordict(td::from_schema(schema, batch_size, storage), check).
  /// With `check`, the schema must hold every required field (SchemaError,
  /// before anything is allocated).
  template <class Storage = storage::Memory>
  requires(!std::is_convertible_v<const Storage&, std::string>) static Derived
      from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                  const Storage& storage = {}, bool check = true) {
    if (check) td_check_schema_(schema);
    return from_tensordict(tensordict::from_schema(schema, batch_size, storage), check);
  }
  /// The same with a storage named by a string ("memmap", "h5", ...).
  static Derived from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                             const std::string& storage, const StorageOptions& options = {},
                             bool check = true) {
    if (check) td_check_schema_(schema);
    return from_tensordict(tensordict::from_schema(schema, batch_size, storage, options), check);
  }

  /// from_tensordict(td::load_memmap(prefix), check).
  static Derived load_memmap(const std::string& prefix, bool check = true) {
    return from_tensordict(tensordict::load_memmap(prefix), check);
  }

  // ---- stacking ---------------------------------------------------------------
  /// Dense stack (td::stack) as a Derived.
  static Derived stack(const std::vector<Derived>& items, int64_t dim = 0) {
    return td_wrap_(tensordict::stack(td_handles_(items), dim));
  }
  static Derived cat(const std::vector<Derived>& items, int64_t dim = 0) {
    return td_wrap_(tensordict::cat(td_handles_(items), dim));
  }
  /// Lazy stack (td::lazy_stack) of the items, live, as a Derived: indexing
  /// one member gives that member back as a Derived.
  static Derived lazy_stack(const std::vector<Derived>& items, int64_t dim = 0) {
    return td_wrap_(tensordict::lazy_stack(td_handles_(items), dim));
  }

  // ---- operations that keep the type ---------------------------------------------
  // Each hides the TensorDictBase method of the same name and wraps its result.
  Derived index(IndexList index) const { return td_wrap_(TensorDictBase::index(index)); }
  Derived operator[](int64_t i) const { return td_wrap_(TensorDictBase::operator[](i)); }
  Derived clone(bool recurse = true) const { return td_wrap_(TensorDictBase::clone(recurse)); }
  Derived copy() const { return td_wrap_(TensorDictBase::copy()); }
  Derived to(at::Device device, bool non_blocking = false) const {
    return td_wrap_(TensorDictBase::to(device, non_blocking));
  }
  Derived to(at::ScalarType dtype) const { return td_wrap_(TensorDictBase::to(dtype)); }
  Derived cpu() const { return td_wrap_(TensorDictBase::cpu()); }
  Derived contiguous() const { return td_wrap_(TensorDictBase::contiguous()); }
  Derived detach() const { return td_wrap_(TensorDictBase::detach()); }
  Derived view(at::IntArrayRef shape) const { return td_wrap_(TensorDictBase::view(shape)); }
  Derived reshape(at::IntArrayRef shape) const { return td_wrap_(TensorDictBase::reshape(shape)); }
  Derived flatten(int64_t start_dim = 0, int64_t end_dim = -1) const {
    return td_wrap_(TensorDictBase::flatten(start_dim, end_dim));
  }
  Derived unflatten(int64_t dim, at::IntArrayRef sizes) const {
    return td_wrap_(TensorDictBase::unflatten(dim, sizes));
  }
  Derived squeeze(int64_t dim) const { return td_wrap_(TensorDictBase::squeeze(dim)); }
  Derived squeeze() const { return td_wrap_(TensorDictBase::squeeze()); }
  Derived unsqueeze(int64_t dim) const { return td_wrap_(TensorDictBase::unsqueeze(dim)); }
  Derived permute(at::IntArrayRef dims) const { return td_wrap_(TensorDictBase::permute(dims)); }
  Derived transpose(int64_t dim0, int64_t dim1) const {
    return td_wrap_(TensorDictBase::transpose(dim0, dim1));
  }
  Derived expand(at::IntArrayRef shape) const { return td_wrap_(TensorDictBase::expand(shape)); }
  Derived narrow(int64_t dim, int64_t start, int64_t length) const {
    return td_wrap_(TensorDictBase::narrow(dim, start, length));
  }
  Derived masked_select(const at::Tensor& mask) const {
    return td_wrap_(TensorDictBase::masked_select(mask));
  }
  Derived masked_fill(const at::Tensor& mask, const at::Scalar& value) const {
    return td_wrap_(TensorDictBase::masked_fill(mask, value));
  }
  std::vector<Derived> unbind(int64_t dim = 0) const {
    return td_wrap_all_(TensorDictBase::unbind(dim));
  }
  std::vector<Derived> split(int64_t split_size, int64_t dim = 0) const {
    return td_wrap_all_(TensorDictBase::split(split_size, dim));
  }
  std::vector<Derived> split(at::IntArrayRef split_sizes, int64_t dim = 0) const {
    return td_wrap_all_(TensorDictBase::split(split_sizes, dim));
  }
  std::vector<Derived> chunk(int64_t chunks, int64_t dim = 0) const {
    return td_wrap_all_(TensorDictBase::chunk(chunks, dim));
  }
  Derived memmap(const std::string& prefix, const MemmapOptions& options = {}) const {
    return td_wrap_(TensorDictBase::memmap(prefix, options));
  }
  Derived memmap_like(const std::string& prefix, const MemmapOptions& options = {}) const {
    return td_wrap_(TensorDictBase::memmap_like(prefix, options));
  }
  // In-place operations return the derived type too, so they chain into a
  // Derived variable: `Replay shared = r.clone().share_memory_();`.
  Derived& memmap_(const std::string& prefix, const MemmapOptions& options = {}) {
    TensorDictBase::memmap_(prefix, options);
    return td_derived_();
  }
  Derived& share_memory_() {
    TensorDictBase::share_memory_();
    return td_derived_();
  }
  Derived& lock_() {
    TensorDictBase::lock_();
    return td_derived_();
  }
  Derived& unlock_() {
    TensorDictBase::unlock_();
    return td_derived_();
  }

  // ---- used by the field macros and by derived wrappers ----------------------------
  static constexpr auto td_all_fields_() {
    static_assert(std::is_base_of_v<TypedTensorDict, Derived>,
                  "TypedTensorDict<Derived, ...>: Derived must be the class deriving from it "
                  "(struct Replay : td::TypedTensorDict<Replay>)");
    static_assert(std::is_same_v<typename decltype(Derived::td_required_fields_())::owner, Derived>,
                  "declare the fields of every TypedTensorDict class with TENSORDICT_FIELDS(...) "
                  "(TENSORDICT_FIELDS() when it adds none): it also brings in the constructors");
    return detail::concat_fields(td_parent_fields_(),
                                 detail::own_fields<Derived>(Derived::td_required_fields_()),
                                 detail::own_fields<Derived>(Derived::td_optional_fields_()),
                                 detail::own_fields<Derived>(Derived::td_nested_fields_()));
  }

 protected:
  at::Tensor td_read_tensor_(std::string_view name) const {
    try {
      return TensorDictBase::get({name});
    } catch (const KeyError&) {
      if (!TensorDictBase::contains(NestedKey(name))) td_throw_not_set_(name);
      throw;
    }
  }
  void td_write_tensor_(std::string_view name, const at::Tensor& value) {
    TensorDictBase::set(NestedKey(name), value);
  }
  void td_write_tensor_inplace_(std::string_view name, const at::Tensor& value) {
    TensorDictBase::set_(NestedKey(name), value);
  }
  TensorDictBase td_read_nested_(std::string_view name) const {
    try {
      return TensorDictBase::get_tensordict(NestedKey(name));
    } catch (const KeyError&) {
      if (!TensorDictBase::contains(NestedKey(name))) td_throw_not_set_(name);
      throw;
    }
  }
  void td_write_nested_(std::string_view name, const TensorDictBase& value) {
    TensorDictBase::set(NestedKey(name), value);
  }
  void td_write_nested_inplace_(std::string_view name, const TensorDictBase& value) {
    td_read_nested_(name).update_(value);
  }

 private:
  static constexpr auto td_parent_fields_() {
    if constexpr (std::is_same_v<Base, TensorDictBase>)
      return std::array<FieldInfo, 0>{};
    else
      return Base::td_all_fields_();
  }

  [[noreturn]] static void td_throw_not_set_(std::string_view name) {
    detail::throw_field_not_set(static_type_name(), name);
  }

  template <class Items>
  static std::shared_ptr<Node> td_construct_(const Items& items, at::IntArrayRef batch_size,
                                             std::optional<at::Device> device) {
    detail::check_constructor_items(fields(), std::string(static_type_name()) + "()", items,
                                    [](const FieldInfo&, const TensorDict::Item&) {});
    return TensorDict(items, batch_size, device).node_ptr();
  }

  static void td_check_schema_(const Schema& schema) {
    detail::check_required_present(
        fields(), std::string(static_type_name()) + ".from_schema()",
        [&](std::string_view name) { return detail::items_name_field(schema.entries(), name); });
  }

  static Derived td_wrap_(const TensorDictBase& td) {
    static_assert(sizeof(Derived) == sizeof(TensorDictBase),
                  "a TypedTensorDict class may not add data members (operations re-wrap "
                  "results and would lose them): store them as fields");
    (void)fields();  // instantiates the compile-time checks of the field table
    Derived out;
    static_cast<TensorDictBase&>(out) = td;
    return out;
  }
  static std::vector<Derived> td_wrap_all_(const std::vector<TensorDictBase>& tds) {
    std::vector<Derived> out;
    out.reserve(tds.size());
    for (const auto& t : tds) out.push_back(td_wrap_(t));
    return out;
  }
  static std::vector<TensorDictBase> td_handles_(const std::vector<Derived>& items) {
    return std::vector<TensorDictBase>(items.begin(), items.end());
  }
  Derived& td_derived_() { return static_cast<Derived&>(*this); }
};

}  // namespace tensordict
