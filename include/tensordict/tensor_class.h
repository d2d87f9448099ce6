#pragma once
/// @file tensor_class.h
/// TensorClass: a typed record of tensors and non-tensor values over a
/// tensordict (Python's tensordict.TensorClass / @tensorclass). It HAS-A
/// TensorDictBase (tensordict()) of any storage, wrapped live.
///
/// @code
///   namespace td = tensordict;
///   struct Transition : td::TensorClass<Transition> {
///     TENSORDICT_FIELDS(obs, action);
///     TENSORDICT_NON_TENSOR_FIELDS((std::string, env), (float, gamma));
///   };
///   Transition t({{"obs", torch::zeros({4, 3})}, {"action", torch::zeros({4, 2})},
///                 {"env", "CartPole"}, {"gamma", td::NonTensorData(0.99f)}},
///                /*batch_size=*/{4});
///   float g = t.gamma();                      // read back as the declared type
///   t.set_env("Pong");                        // any value nlohmann::json converts
///   Transition row = t[0];                    // ops keep the type and the values
///   t.memmap(dir);                            // Python's tensorclass layout
///   auto back = Transition::load_memmap(dir);
/// @endcode
///
/// Where the values live (as in Python):
///   - tensor fields are entries of the tensordict;
///   - non-tensor fields are NonTensorData entries of the tensordict (one value
///     for the whole batch, kept by indexing), or values held beside it: those
///     given to from_tensordict(td, non_tensor) and those of a memory-mapped
///     tensorclass (Python's `_non_tensordict`). A write through set_x()
///     always goes to the tensordict and drops the value held beside it.
///
/// Checks: the constructor requires the tensor fields of TENSORDICT_FIELDS and
/// refuses undeclared ones; from_tensordict refuses undeclared keys but, as
/// Python, accepts missing fields, which fail when read ("declared but not
/// set"). Every non-tensor value must convert to its declared type.
///
/// Copying a TensorClass is a handle copy (the tensordict and the values
/// beside it are shared); operations returning a new tensorclass (index,
/// clone, stack, ...) copy the values beside the tensordict.
///
/// Python class name: memmap() writes `_type` as "<class '__main__.Name'>";
/// a class may name its Python counterpart with
/// `static constexpr std::string_view python_qualname = "pkg.mod.Name";`.

#include <tensordict/errors.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/stack.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>
#include <tensordict/typed_fields.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tensordict {

/// See the file comment.
template <class Derived>
class TensorClass {
 public:
  // Names the field macros rely on (not for user code).
  using td_self_ = Derived;
  using td_wrapper_ = TensorClass;
  using td_wrapper_tag_ = void;
  static constexpr bool td_allows_non_tensor_ = true;
  static constexpr detail::FieldGroup<void, 0> td_required_fields_() { return {}; }
  static constexpr detail::FieldGroup<void, 0> td_optional_fields_() { return {}; }
  static constexpr detail::FieldGroup<void, 0> td_non_tensor_fields_() { return {}; }
  static constexpr detail::FieldGroup<void, 0> td_nested_fields_() { return {}; }

  /// A null tensorclass (defined() is false).
  TensorClass() = default;
  /// A new in-memory TensorDict from (key, value) pairs, as TensorDict's
  /// constructor; non-tensor fields are given as NonTensorData (or a string).
  /// SchemaError for a missing required field, an undeclared one, a tensor
  /// field given a non-tensor or the reverse, or a value of the wrong type.
  TensorClass(std::initializer_list<TensorDict::Item> items, at::IntArrayRef batch_size = {},
              std::optional<at::Device> device = std::nullopt)
      : td_(td_construct_(items, batch_size, device)) {}
  TensorClass(const std::vector<TensorDict::Item>& items, at::IntArrayRef batch_size = {},
              std::optional<at::Device> device = std::nullopt)
      : td_(td_construct_(items, batch_size, device)) {}

  // ---- the schema -------------------------------------------------------------
  /// Every field in declaration order: TENSORDICT_FIELDS, then
  /// TENSORDICT_OPTIONAL_FIELDS, TENSORDICT_NON_TENSOR_FIELDS and
  /// TENSORDICT_NESTED_FIELDS.
  static std::span<const FieldInfo> fields() noexcept {
    static constexpr auto table = td_all_fields_();
    static_assert(!detail::has_duplicate_fields(table), "a field is declared twice");
    return table;
  }
  static std::vector<std::string> field_names() {
    return detail::field_names(fields(), true, true);
  }
  static std::vector<std::string> required_field_names() {
    return detail::field_names(fields(), true, false);
  }
  static std::vector<std::string> optional_field_names() {
    return detail::field_names(fields(), false, true);
  }
  /// The class name ("Transition").
  static const char* static_type_name() {
    static const std::string name = detail::unqualified_type_name<Derived>();
    return name.c_str();
  }
  /// The `_type` memmap() writes: "<class '__main__.Transition'>", or
  /// "<class '" + Derived::python_qualname + "'>" when the class declares one.
  static std::string python_type() {
    if constexpr (requires { std::string_view(Derived::python_qualname); })
      return "<class '" + std::string(std::string_view(Derived::python_qualname)) + "'>";
    else
      return "<class '__main__." + std::string(static_type_name()) + "'>";
  }

  // ---- wrapping ---------------------------------------------------------------
  /// Wraps `td` live (no copy). `non_tensor` (a JSON object, field -> value)
  /// holds non-tensor fields beside the tensordict; null values count as
  /// absent. SchemaError when a key of either is not a field, a field is
  /// given in both, a kind or a value does not match its declaration.
  static Derived from_tensordict(const TensorDictBase& td,
                                 const nlohmann::json& non_tensor = nlohmann::json::object()) {
    const std::string ctx = std::string(static_type_name()) + ".from_tensordict()";
    if (!td.defined()) throw ValueError(ctx + ": null tensordict handle");
    if (!non_tensor.is_object() && !non_tensor.is_null())
      throw ValueError(ctx + ": non_tensor must be a JSON object (field -> value), got " +
                       non_tensor.dump());
    std::vector<std::string> unexpected;
    for (const auto& k : td.keys()) {
      const std::string& name = k.front();
      const FieldInfo* f = td_field_(name);
      if (!f) {
        unexpected.push_back(name);
        continue;
      }
      auto kind = td.entry_kind(k);
      std::optional<nlohmann::json> value;
      if (kind == EntryKind::NonTensor) value = td.get_non_tensor(k);
      td_check_entry_(ctx, *f, *kind, value ? &*value : nullptr);
    }
    auto side = std::make_shared<nlohmann::json>(nlohmann::json::object());
    if (non_tensor.is_object()) {
      for (auto it = non_tensor.begin(); it != non_tensor.end(); ++it) {
        const FieldInfo* f = td_field_(it.key());
        if (!f) {
          unexpected.push_back(it.key());
          continue;
        }
        if (it.value().is_null()) continue;
        if (f->kind != FieldKind::NonTensor)
          throw SchemaError(ctx + ": field '" + it.key() +
                            "' is a tensor field: pass it in the tensordict");
        if (td.contains(NestedKey(it.key())))
          throw SchemaError(ctx + ": field '" + it.key() +
                            "' is given twice, in the tensordict and in non_tensor");
        td_check_entry_(ctx, *f, EntryKind::NonTensor, &it.value());
        (*side)[it.key()] = it.value();
      }
    }
    if (!unexpected.empty())
      throw SchemaError(ctx + " got unexpected field(s): " + detail::join_sorted(unexpected) +
                        " (fields: " + detail::join_names(field_names()) + ")");
    Derived out = td_wrap_(td, nullptr);
    if (!side->empty()) out.non_tensor_ = std::move(side);
    return out;
  }

  bool defined() const noexcept { return td_.defined(); }
  /// The wrapped tensordict (live): untyped access, locking, any other op.
  const TensorDictBase& tensordict() const noexcept { return td_; }
  /// The non-tensor values held beside the tensordict (an object, maybe empty).
  const nlohmann::json& non_tensor_values() const {
    static const nlohmann::json empty = nlohmann::json::object();
    return non_tensor_ ? *non_tensor_ : empty;
  }

  // ---- shape, device, state ------------------------------------------------------
  at::IntArrayRef batch_size() const { return td_.batch_size(); }
  at::IntArrayRef shape() const { return td_.batch_size(); }
  int64_t batch_dims() const { return td_.batch_dims(); }
  int64_t numel() const { return td_.numel(); }
  int64_t len() const { return td_.len(); }
  std::optional<at::Device> device() const { return td_.device(); }
  bool is_locked() const { return td_.is_locked(); }
  bool is_shared() const { return td_.is_shared(); }
  bool is_memmap() const { return td_.is_memmap(); }

  // ---- operations that keep the type ---------------------------------------------
  Derived index(IndexList index) const { return td_result_(td_.index(index)); }
  Derived operator[](int64_t i) const { return td_result_(td_[i]); }
  Derived clone(bool recurse = true) const { return td_result_(td_.clone(recurse)); }
  Derived to(at::Device device, bool non_blocking = false) const {
    return td_result_(td_.to(device, non_blocking));
  }
  Derived to(at::ScalarType dtype) const { return td_result_(td_.to(dtype)); }
  Derived cpu() const { return td_result_(td_.cpu()); }
  Derived contiguous() const { return td_result_(td_.contiguous()); }
  Derived detach() const { return td_result_(td_.detach()); }
  Derived view(at::IntArrayRef shape) const { return td_result_(td_.view(shape)); }
  Derived reshape(at::IntArrayRef shape) const { return td_result_(td_.reshape(shape)); }
  Derived squeeze(int64_t dim) const { return td_result_(td_.squeeze(dim)); }
  Derived squeeze() const { return td_result_(td_.squeeze()); }
  Derived unsqueeze(int64_t dim) const { return td_result_(td_.unsqueeze(dim)); }
  Derived permute(at::IntArrayRef dims) const { return td_result_(td_.permute(dims)); }
  Derived transpose(int64_t dim0, int64_t dim1) const {
    return td_result_(td_.transpose(dim0, dim1));
  }
  Derived expand(at::IntArrayRef shape) const { return td_result_(td_.expand(shape)); }
  std::vector<Derived> unbind(int64_t dim = 0) const { return td_results_(td_.unbind(dim)); }
  std::vector<Derived> split(int64_t split_size, int64_t dim = 0) const {
    return td_results_(td_.split(split_size, dim));
  }
  std::vector<Derived> chunk(int64_t chunks, int64_t dim = 0) const {
    return td_results_(td_.chunk(chunks, dim));
  }

  // ---- in-place writes --------------------------------------------------------------
  /// this[index] = value (TensorDictBase::index_put_ of the tensordicts; the
  /// values `value` holds beside its tensordict are not written).
  Derived& index_put_(IndexList index, const Derived& value) {
    td_.index_put_(index, value.tensordict());
    return td_derived_();
  }
  /// Copies every entry of `other`'s tensordict into this one in place.
  Derived& update_(const Derived& other) { return update_(other.tensordict()); }
  /// Copies every entry of `other` into this one in place (the form that
  /// works on locked, memory-mapped or shared storages).
  Derived& update_(const TensorDictBase& other) {
    td_.update_(other);
    return td_derived_();
  }
  /// Python's tc.update(td): sets every entry of `other`, replacing or adding
  /// (LockedError on a locked storage, which nothing then changes).
  Derived& update(const TensorDictBase& other) {
    td_.update(other);
    return td_derived_();
  }
  Derived& update(const Derived& other) { return update(other.tensordict()); }
  Derived& share_memory_() {
    td_.share_memory_();
    return td_derived_();
  }
  Derived& lock_() {
    td_.lock_();
    return td_derived_();
  }
  Derived& unlock_() {
    td_.unlock_();
    return td_derived_();
  }

  // ---- stacking -----------------------------------------------------------------
  /// Dense stack of the tensordicts (td::stack). The values held beside them
  /// must be equal across items (SchemaError naming the field).
  static Derived stack(const std::vector<Derived>& items, int64_t dim = 0) {
    return td_combine_(items, tensordict::stack(td_handles_(items), dim), "stack");
  }
  static Derived cat(const std::vector<Derived>& items, int64_t dim = 0) {
    return td_combine_(items, tensordict::cat(td_handles_(items), dim), "cat");
  }
  /// Lazy stack (td::lazy_stack) of the items' tensordicts, live.
  static Derived lazy_stack(const std::vector<Derived>& items, int64_t dim = 0) {
    return td_combine_(items, tensordict::lazy_stack(td_handles_(items), dim), "lazy_stack");
  }

  // ---- files --------------------------------------------------------------------
  /// Saves in the tensorclass layout of Python tensordict 0.15:
  /// `prefix/meta.json` holds `_type` only, and `prefix/_tensordict/` every set
  /// field as a memmap TensorDict directory (non-tensor fields as NonTensorData
  /// entries). A field that is not set is not written, as Python leaves out a
  /// field holding None. The directory replaces any earlier save at `prefix` at
  /// once. Returns a tensorclass over the mapped tensors (locked, as
  /// TensorDictBase::memmap). load_memmap() also reads the older layout, where
  /// the non-tensor fields sit in `prefix/meta.json`.
  Derived memmap(const std::string& prefix, const MemmapOptions& options = {}) const {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    meta["_type"] = python_type();
    TensorDictBase tensors = td_;
    if (non_tensor_) {
      std::vector<std::pair<std::string, nlohmann::json>> beside;
      for (const FieldInfo& f : fields()) {
        std::string name(f.name);
        if (non_tensor_->contains(name) && !(*non_tensor_)[name].is_null())
          beside.emplace_back(name, (*non_tensor_)[name]);
      }
      if (!beside.empty()) {
        tensors = td_.copy();
        for (auto& [name, value] : beside)
          tensors.set_non_tensor(NestedKey(name), std::move(value));
      }
    }
    return td_wrap_(detail::write_tensorclass_dir(tensors, prefix, meta.dump(), options), nullptr);
  }
  /// Loads a tensorclass directory written by memmap() or by Python (any
  /// version the core reads): tensors mapped lazily, non-tensor fields from
  /// meta.json (fields Python pickled into other.pickle are not read; a
  /// null field is not set). Not locked, as Python's load_memmap.
  static Derived load_memmap(const std::string& prefix, const LoadOptions& options = {}) {
    return from_tensordict(tensordict::load_memmap(prefix, options));
  }

  /// "Transition(" + the tensordict's repr + the values held beside it + ")".
  std::string repr() const {
    std::string out = std::string(static_type_name()) + "(" + td_.repr();
    if (non_tensor_ && !non_tensor_->empty()) out += ", non_tensor=" + non_tensor_->dump();
    return out + ")";
  }
  friend std::ostream& operator<<(std::ostream& os, const TensorClass& tc) {
    return os << tc.repr();
  }

  // ---- used by the field macros ---------------------------------------------------
  static constexpr auto td_all_fields_() {
    static_assert(std::is_base_of_v<TensorClass, Derived>,
                  "TensorClass<Derived>: Derived must be the class deriving from it "
                  "(struct Transition : td::TensorClass<Transition>)");
    static_assert(std::is_same_v<typename decltype(Derived::td_required_fields_())::owner, Derived>,
                  "declare the tensor fields of a TensorClass with TENSORDICT_FIELDS(...) "
                  "(TENSORDICT_FIELDS() when there is none): it also brings in the constructors");
    return detail::concat_fields(detail::own_fields<Derived>(Derived::td_required_fields_()),
                                 detail::own_fields<Derived>(Derived::td_optional_fields_()),
                                 detail::own_fields<Derived>(Derived::td_non_tensor_fields_()),
                                 detail::own_fields<Derived>(Derived::td_nested_fields_()));
  }

 protected:
  at::Tensor td_read_tensor_(std::string_view name) const {
    try {
      return td_.get({name});
    } catch (const KeyError&) {
      if (!td_.contains(NestedKey(name))) td_throw_not_set_(name);
      throw;
    }
  }
  void td_write_tensor_(std::string_view name, const at::Tensor& value) {
    td_.set(NestedKey(name), value);
  }
  void td_write_tensor_inplace_(std::string_view name, const at::Tensor& value) {
    td_.set_(NestedKey(name), value);
  }
  TensorDictBase td_read_nested_(std::string_view name) const {
    try {
      return td_.get_tensordict(NestedKey(name));
    } catch (const KeyError&) {
      if (!td_.contains(NestedKey(name))) td_throw_not_set_(name);
      throw;
    }
  }
  void td_write_nested_(std::string_view name, const TensorDictBase& value) {
    td_.set(NestedKey(name), value);
  }
  void td_write_nested_inplace_(std::string_view name, const TensorDictBase& value) {
    td_read_nested_(name).update_(value);
  }

  template <class T>
  T td_read_non_tensor_(std::string_view name) const {
    const nlohmann::json* j = nullptr;
    std::optional<Value> entry;
    if (non_tensor_) {
      auto it = non_tensor_->find(std::string(name));
      if (it != non_tensor_->end()) j = &*it;
    }
    if (!j && (entry = td_.find(NestedKey(name)))) {
      if (!entry->is_non_tensor())
        throw TypeError("'" + std::string(static_type_name()) + "' field '" + std::string(name) +
                        "' holds a " + to_string(entry->kind()) +
                        (entry->is_non_tensor_stack()
                             ? " (one value per element): index the tensorclass to read "
                               "an element's value"
                             : ", not a non-tensor value"));
      j = &entry->non_tensor().data();
    }
    if (!j || j->is_null()) {
      if constexpr (detail::is_std_optional<T>::value)
        return std::nullopt;
      else
        td_throw_not_set_(name);
    }
    try {
      return detail::from_json_value<T>(*j);
    } catch (const nlohmann::json::exception& e) {
      throw TypeError("'" + std::string(static_type_name()) + "' field '" + std::string(name) +
                      "' holds " + j->dump() + ", which is not a " +
                      std::string(td_field_(name)->type) + ": " + e.what());
    }
  }
  void td_write_non_tensor_(std::string_view name, nlohmann::json value) {
    const NestedKey key(name);
    if (value.is_null()) {
      if (td_.contains(key)) td_.del_(key);
    } else {
      td_.set_non_tensor(key, std::move(value));
    }
    if (non_tensor_) non_tensor_->erase(std::string(name));
  }

 private:
  static const FieldInfo* td_field_(std::string_view name) {
    return detail::find_field(fields(), name);
  }

  [[noreturn]] static void td_throw_not_set_(std::string_view name) {
    detail::throw_field_not_set(static_type_name(), name);
  }

  /// A tensor field holds a tensor or a nested tensordict; a non-tensor field
  /// a value of its declared type.
  static void td_check_entry_(const std::string& ctx, const FieldInfo& f, EntryKind kind,
                              const nlohmann::json* value) {
    const std::string name(f.name);
    const bool non_tensor = kind == EntryKind::NonTensor || kind == EntryKind::NonTensorStack;
    if (f.kind == FieldKind::Tensor) {
      if (non_tensor)
        throw SchemaError(ctx + ": field '" + name + "' is a tensor field but holds a " +
                          to_string(kind));
      return;
    }
    if (f.kind == FieldKind::Nested) {
      if (kind != EntryKind::TensorDict)
        throw SchemaError(ctx + ": field '" + name + "' is a nested " + std::string(f.type) +
                          " field but holds a " + to_string(kind));
      return;
    }
    // A NonTensorStack (one value per element) is not checked value by value.
    if (!non_tensor)
      throw SchemaError(ctx + ": field '" + name + "' is a non-tensor field (" +
                        std::string(f.type) + ") but holds a " + to_string(kind));
    if (value && !value->is_null()) {
      std::string why = f.check(*value);
      if (!why.empty())
        throw SchemaError(ctx + ": field '" + name + "' expects " + std::string(f.type) + ", got " +
                          value->dump() + " (" + why + ")");
    }
  }

  template <class Items>
  static TensorDictBase td_construct_(const Items& items, at::IntArrayRef batch_size,
                                      std::optional<at::Device> device) {
    const std::string ctx = std::string(static_type_name()) + "()";
    detail::check_constructor_items(
        fields(), ctx, items, [&](const FieldInfo& f, const TensorDict::Item& it) {
          // A nested key makes its first level a tensordict.
          EntryKind kind = it.first.size() > 1 ? EntryKind::TensorDict : it.second.kind();
          td_check_entry_(ctx, f, kind,
                          kind == EntryKind::NonTensor ? &it.second.non_tensor().data() : nullptr);
        });
    return TensorDict(items, batch_size, device);
  }

  static Derived td_wrap_(const TensorDictBase& td, std::shared_ptr<nlohmann::json>&& values) {
    static_assert(sizeof(Derived) == sizeof(TensorClass),
                  "a TensorClass may not add data members (operations re-wrap results and "
                  "would lose them): declare them as fields");
    Derived out;
    TensorClass& base = out;
    base.td_ = td;
    base.non_tensor_ = std::move(values);
    return out;
  }
  /// A result of an operation on this tensorclass: same values beside it.
  Derived td_result_(const TensorDictBase& td) const {
    return td_wrap_(td, non_tensor_ ? std::make_shared<nlohmann::json>(*non_tensor_) : nullptr);
  }
  std::vector<Derived> td_results_(const std::vector<TensorDictBase>& tds) const {
    std::vector<Derived> out;
    out.reserve(tds.size());
    for (const auto& t : tds) out.push_back(td_result_(t));
    return out;
  }
  static std::vector<TensorDictBase> td_handles_(const std::vector<Derived>& items) {
    std::vector<TensorDictBase> out;
    out.reserve(items.size());
    for (const auto& it : items) out.push_back(it.tensordict());
    return out;
  }
  static Derived td_combine_(const std::vector<Derived>& items, const TensorDictBase& result,
                             const char* op) {
    if (items.empty()) return td_wrap_(result, nullptr);
    const nlohmann::json& first = items.front().non_tensor_values();
    for (const auto& it : items) {
      const nlohmann::json& v = it.non_tensor_values();
      for (const auto* side : {&first, &v})
        for (auto kv = side->begin(); kv != side->end(); ++kv)
          if (!first.contains(kv.key()) || !v.contains(kv.key()) || first[kv.key()] != v[kv.key()])
            throw SchemaError(std::string(static_type_name()) + "::" + op +
                              "(): non-tensor field '" + kv.key() + "' differs between items");
    }
    return td_wrap_(result, first.empty() ? nullptr : std::make_shared<nlohmann::json>(first));
  }
  Derived& td_derived_() { return static_cast<Derived&>(*this); }

  TensorDictBase td_;
  // Non-tensor values held beside td_ (Python's _non_tensordict); null when
  // there are none, so most tensorclasses pay one null pointer.
  std::shared_ptr<nlohmann::json> non_tensor_;
};

}  // namespace tensordict
