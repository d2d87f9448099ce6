// NonTensorStack (per-element non-tensor values) and the helpers the core uses
// to carry it through indexing, index assignment, shape ops and stack/cat.
// Every operation goes through a tensor of the values' flat positions, which
// takes the same LibTorch operation as a tensor leaf; the values are gathered
// after it.
#include "core/internal.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/accumulate.h>

#include <cmath>
#include <cstdio>

namespace tensordict {

using detail::format_shape;

namespace detail {

// ---- Python's repr of JSON values ----------------------------------------------

namespace {

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7F) {
          char buf[5];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + quote;
}

}  // namespace

std::string python_repr(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "None";
    case nlohmann::json::value_t::boolean:
      return v.get<bool>() ? "True" : "False";
    case nlohmann::json::value_t::string:
      return python_string_repr(v.get_ref<const std::string&>());
    case nlohmann::json::value_t::number_float: {
      double d = v.get<double>();
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      return v.dump();  // shortest round trip, "1.0", "1e-05": Python's spelling
    }
    case nlohmann::json::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        out += python_repr(item);
      }
      return out + "]";
    }
    case nlohmann::json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += python_string_repr(it.key()) + ": " + python_repr(it.value());
      }
      return out + "}";
    }
    default:
      return v.dump();
  }
}

// ---- positions ---------------------------------------------------------------

at::Tensor stack_positions(const NonTensorStack& s) {
  return at::arange(s.numel(), at::TensorOptions(at::kLong)).view(s.batch_size());
}

Value gather_non_tensor(const std::vector<nlohmann::json>& pool, const at::Tensor& positions,
                        std::optional<at::Device> device) {
  at::Tensor pos = positions.contiguous();
  const int64_t* p = pos.data_ptr<int64_t>();
  if (pos.dim() == 0) return NonTensorData(pool[static_cast<std::size_t>(*p)], {}, device);
  std::vector<nlohmann::json> values;
  values.reserve(static_cast<std::size_t>(pos.numel()));
  for (int64_t i = 0; i < pos.numel(); ++i) values.push_back(pool[static_cast<std::size_t>(p[i])]);
  return NonTensorStack::from_flat(std::move(values), pos.sizes().vec(), device);
}

namespace {

std::string at_key(const NestedKey& key) {
  return key.empty() ? std::string() : " at key " + key.repr();
}

at::Tensor select_positions(at::IntArrayRef batch, const TranslatedIndex& t, const NestedKey& key) {
  at::Tensor all =
      at::arange(c10::multiply_integers(batch), at::TensorOptions(at::kLong)).view(batch);
  try {
    return apply_index(all, t);
  } catch (const c10::Error& e) {
    throw IndexError("indexing the non-tensor values" + at_key(key) +
                     " failed: " + e.what_without_backtrace());
  }
}

// vals (row-major over `batch`)[t] = value.
void put_values(std::vector<nlohmann::json>& vals, at::IntArrayRef batch, const TranslatedIndex& t,
                const Value& value, const NestedKey& key) {
  at::Tensor sel = select_positions(batch, t, key).contiguous();
  const int64_t* sp = sel.data_ptr<int64_t>();
  if (value.is_non_tensor()) {
    for (int64_t i = 0; i < sel.numel(); ++i)
      vals[static_cast<std::size_t>(sp[i])] = value.non_tensor().data();
    return;
  }
  const NonTensorStack& src = value.non_tensor_stack();
  if (!at::is_expandable_to(src.batch_size(), sel.sizes()))
    throw ShapeError("cannot write a NonTensorStack of batch size " +
                     format_shape(src.batch_size()) + at_key(key) + " at an index of shape " +
                     format_shape(sel.sizes()));
  at::Tensor vp = stack_positions(src).expand(sel.sizes()).contiguous();
  const int64_t* vpp = vp.data_ptr<int64_t>();
  for (int64_t i = 0; i < sel.numel(); ++i)
    vals[static_cast<std::size_t>(sp[i])] = src.values()[static_cast<std::size_t>(vpp[i])];
}

}  // namespace

Value index_non_tensor_stack(const NonTensorStack& s, const TranslatedIndex& t) {
  return gather_non_tensor(s.values(), select_positions(s.batch_size(), t, NestedKey()),
                           s.device());
}

void put_non_tensor_stack(NonTensorStack& s, const TranslatedIndex& t, const Value& value,
                          const NestedKey& key) {
  std::vector<nlohmann::json> vals = s.values();
  put_values(vals, s.batch_size(), t, value, key);
  s = NonTensorStack::from_flat(std::move(vals), s.batch_size().vec(), s.device());
}

std::optional<Value> put_non_tensor(const Value& dest, const TranslatedIndex& t, const Value& value,
                                    const NestedKey& key) {
  if (dest.is_non_tensor_stack()) {
    NonTensorStack s = dest.non_tensor_stack();
    put_non_tensor_stack(s, t, value, key);
    if (s == dest.non_tensor_stack()) return std::nullopt;
    return Value(std::move(s));
  }
  const NonTensorData& d = dest.non_tensor();
  // Python: nothing happens when the rows already read the written value.
  bool same = true;
  if (value.is_non_tensor()) {
    same = value.non_tensor().data() == d.data();
  } else {
    for (const auto& v : value.non_tensor_stack().values()) same = same && v == d.data();
  }
  if (same) return std::nullopt;
  // The one value becomes one value per element (batch []: the one element).
  const auto batch = d.batch_size();
  std::vector<nlohmann::json> vals(static_cast<std::size_t>(c10::multiply_integers(batch)),
                                   d.data());
  put_values(vals, batch, t, value, key);
  if (batch.empty()) return Value(NonTensorData(std::move(vals[0]), {}, d.device()));
  return Value(NonTensorStack::from_flat(std::move(vals), batch.vec(), d.device()));
}

Value map_non_tensor_stack(const NonTensorStack& s,
                           const std::function<at::Tensor(const at::Tensor&)>& fn, const char* op,
                           const NestedKey& key) {
  at::Tensor pos;
  auto fail = [&](const char* why) {
    return ShapeError(std::string(op) + " failed on the NonTensorStack" + at_key(key) +
                      " of batch size " + format_shape(s.batch_size()) + ": " + why);
  };
  try {
    pos = fn(stack_positions(s));
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw fail(e.what_without_backtrace());
  } catch (const std::runtime_error& e) {
    // LibTorch's shape inference (InferSize.h) throws std::runtime_error.
    throw fail(e.what());
  }
  return gather_non_tensor(s.values(), pos, s.device());
}

namespace {

at::IntArrayRef batch_of(const Value& v) {
  return v.is_non_tensor() ? v.non_tensor().batch_size() : v.non_tensor_stack().batch_size();
}

std::optional<at::Device> device_of(const Value& v) {
  return v.is_non_tensor() ? v.non_tensor().device() : v.non_tensor_stack().device();
}

// True when every item is a NonTensorData holding the first one's value.
bool equal_non_tensor_data(const std::vector<const Value*>& items) {
  for (const auto* v : items)
    if (!v->is_non_tensor() || v->non_tensor().data() != items[0]->non_tensor().data())
      return false;
  return true;
}

// Every item's values appended to `pool`, and a tensor of their positions in
// it (of the item's batch shape).
std::vector<at::Tensor> pool_positions(const std::vector<const Value*>& items,
                                       std::vector<nlohmann::json>& pool) {
  std::vector<at::Tensor> out;
  out.reserve(items.size());
  for (const auto* v : items) {
    const auto offset = static_cast<int64_t>(pool.size());
    if (v->is_non_tensor()) {
      pool.push_back(v->non_tensor().data());
      out.push_back(at::full(v->non_tensor().batch_size(), offset, at::TensorOptions(at::kLong)));
    } else {
      const auto& s = v->non_tensor_stack();
      pool.insert(pool.end(), s.values().begin(), s.values().end());
      out.push_back(stack_positions(s) + offset);
    }
  }
  return out;
}

}  // namespace

Value stack_non_tensors(const std::vector<const Value*>& items, int64_t dim, const char* op,
                        const NestedKey& key, bool collapse_equal) {
  const auto b0 = batch_of(*items[0]);
  for (std::size_t i = 1; i < items.size(); ++i)
    if (!batch_of(*items[i]).equals(b0))
      throw ShapeError(std::string(op) + ": the non-tensor entry " + key.repr() +
                       " has batch size " + format_shape(b0) + " in item 0 and " +
                       format_shape(batch_of(*items[i])) + " in item " + std::to_string(i));
  if (collapse_equal && equal_non_tensor_data(items)) {
    NonTensorData d = items[0]->non_tensor();
    auto nb = d.batch_size().vec();
    nb.insert(nb.begin() + std::min<int64_t>(dim, static_cast<int64_t>(nb.size())),
              static_cast<int64_t>(items.size()));
    d.set_batch_size(std::move(nb));
    return d;
  }
  std::vector<nlohmann::json> pool;
  auto positions = pool_positions(items, pool);
  return gather_non_tensor(pool, at::stack(positions, dim), device_of(*items[0]));
}

Value cat_non_tensors(const std::vector<const Value*>& items, int64_t dim, const NestedKey& key) {
  int64_t total = 0;
  for (const auto* v : items) {
    auto b = batch_of(*v);
    if (static_cast<int64_t>(b.size()) <= dim)
      throw ShapeError("cat: the non-tensor entry " + key.repr() + " has batch size " +
                       format_shape(b) + ", which has no dim " + std::to_string(dim));
    total += b[dim];
  }
  if (equal_non_tensor_data(items)) {
    NonTensorData d = items[0]->non_tensor();
    auto nb = d.batch_size().vec();
    nb[dim] = total;
    d.set_batch_size(std::move(nb));
    return d;
  }
  std::vector<nlohmann::json> pool;
  auto positions = pool_positions(items, pool);
  at::Tensor joined;
  try {
    joined = at::cat(positions, dim);
  } catch (const c10::Error& e) {
    throw ShapeError("cat: the batch sizes of the non-tensor entry " + key.repr() +
                     " are incompatible: " + e.what_without_backtrace());
  }
  return gather_non_tensor(pool, joined, device_of(*items[0]));
}

std::vector<Value> unbind_non_tensor(const Value& v, int64_t dim, const NestedKey& key) {
  std::vector<Value> out;
  if (v.is_non_tensor()) {
    const auto& d = v.non_tensor();
    if (static_cast<int64_t>(d.batch_size().size()) <= dim)
      throw ShapeError("the non-tensor entry " + key.repr() + " of batch size " +
                       format_shape(d.batch_size()) + " has no dim " + std::to_string(dim));
    auto nb = d.batch_size().vec();
    const int64_t n = nb[dim];
    nb.erase(nb.begin() + dim);
    for (int64_t i = 0; i < n; ++i) out.emplace_back(NonTensorData(d.data(), nb, d.device()));
    return out;
  }
  const auto& s = v.non_tensor_stack();
  if (s.dim() <= dim)
    throw ShapeError("the NonTensorStack " + key.repr() + " of batch size " +
                     format_shape(s.batch_size()) + " has no dim " + std::to_string(dim));
  for (const auto& p : stack_positions(s).unbind(dim))
    out.push_back(gather_non_tensor(s.values(), p, s.device()));
  return out;
}

}  // namespace detail

// ---- NonTensorData -------------------------------------------------------------

namespace {

nlohmann::json repeat_nested(const nlohmann::json& v, at::IntArrayRef batch) {
  if (batch.empty()) return v;
  nlohmann::json inner = repeat_nested(v, batch.slice(1));
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < batch[0]; ++i) out.push_back(inner);
  return out;
}

}  // namespace

nlohmann::json NonTensorData::tolist() const { return repeat_nested(data_, batch_size_); }

// ---- NonTensorStack ------------------------------------------------------------

namespace {

std::string describe(const nlohmann::json& j) {
  std::string text = j.dump();
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return std::string(j.type_name()) + " " + text;
}

void flatten_nested(const nlohmann::json& j, at::IntArrayRef batch, std::size_t level,
                    const std::string& where, std::vector<nlohmann::json>& out) {
  if (level == batch.size()) {
    out.push_back(j);
    return;
  }
  const std::string at = where.empty() ? "at the top level" : "at " + where;
  if (!j.is_array())
    throw ValueError("NonTensorStack: expected a list of " + std::to_string(batch[level]) +
                     " items " + at + " (batch size " + format_shape(batch) + "), got a " +
                     describe(j));
  if (static_cast<int64_t>(j.size()) != batch[level])
    throw ValueError("NonTensorStack: expected a list of " + std::to_string(batch[level]) +
                     " items " + at + " (batch size " + format_shape(batch) + "), got " +
                     std::to_string(j.size()));
  for (std::size_t i = 0; i < j.size(); ++i)
    flatten_nested(j[i], batch, level + 1, where + "[" + std::to_string(i) + "]", out);
}

nlohmann::json build_nested(const std::vector<nlohmann::json>& values, at::IntArrayRef batch,
                            std::size_t level, std::size_t& offset) {
  if (level == batch.size()) return values[offset++];
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < batch[level]; ++i)
    out.push_back(build_nested(values, batch, level + 1, offset));
  return out;
}

NonTensorStack as_stack(Value v, const char* op) {
  if (!v.is_non_tensor_stack())
    throw ValueError(std::string("NonTensorStack::") + op +
                     ": the result has no batch dim (a NonTensorStack has at least one); "
                     "use index() to read one element");
  return std::move(v.non_tensor_stack());
}

}  // namespace

NonTensorStack::NonTensorStack(std::vector<nlohmann::json> values,
                               std::optional<c10::Device> device)
    : values_(std::move(values)),
      batch_size_{static_cast<int64_t>(values_.size())},
      device_(device) {}

NonTensorStack::NonTensorStack(const nlohmann::json& nested, std::vector<int64_t> batch_size,
                               std::optional<c10::Device> device)
    : batch_size_(std::move(batch_size)), device_(device) {
  if (batch_size_.empty())
    throw ValueError(
        "NonTensorStack: the batch size must have at least one dim "
        "(use NonTensorData for a single value)");
  for (auto d : batch_size_)
    if (d < 0) throw ValueError("NonTensorStack: invalid batch size " + format_shape(batch_size_));
  values_.reserve(static_cast<std::size_t>(c10::multiply_integers(batch_size_)));
  flatten_nested(nested, batch_size_, 0, "", values_);
}

NonTensorStack NonTensorStack::from_flat(std::vector<nlohmann::json> values,
                                         std::vector<int64_t> batch_size,
                                         std::optional<c10::Device> device) {
  if (batch_size.empty())
    throw ValueError(
        "NonTensorStack: the batch size must have at least one dim "
        "(use NonTensorData for a single value)");
  if (static_cast<int64_t>(values.size()) != c10::multiply_integers(batch_size))
    throw ValueError("NonTensorStack: " + std::to_string(values.size()) +
                     " values do not fill the batch size " + format_shape(batch_size));
  NonTensorStack out;
  out.values_ = std::move(values);
  out.batch_size_ = std::move(batch_size);
  out.device_ = device;
  return out;
}

NonTensorStack NonTensorStack::from_list(const nlohmann::json& list,
                                         std::optional<c10::Device> device) {
  if (!list.is_array())
    throw ValueError("NonTensorStack::from_list: expected a list, got a " + describe(list));
  std::vector<int64_t> batch{static_cast<int64_t>(list.size())};
  std::vector<const nlohmann::json*> level;
  for (const auto& item : list) level.push_back(&item);
  // One more batch dim while every item of this level is a list of one length.
  while (!level.empty()) {
    const std::size_t n = level[0]->is_array() ? level[0]->size() : 0;
    bool regular = true;
    for (const auto* item : level) regular = regular && item->is_array() && item->size() == n;
    if (!regular) break;
    batch.push_back(static_cast<int64_t>(n));
    std::vector<const nlohmann::json*> next;
    next.reserve(level.size() * n);
    for (const auto* item : level)
      for (const auto& sub : *item) next.push_back(&sub);
    level = std::move(next);
  }
  return NonTensorStack(list, std::move(batch), device);
}

NonTensorStack NonTensorStack::from_non_tensor(const NonTensorData& data) {
  if (data.batch_size().empty())
    throw ValueError(
        "NonTensorStack::from_non_tensor: the NonTensorData has batch size [], "
        "a NonTensorStack needs at least one batch dim");
  std::vector<nlohmann::json> values(
      static_cast<std::size_t>(c10::multiply_integers(data.batch_size())), data.data());
  return from_flat(std::move(values), data.batch_size().vec(), data.device());
}

nlohmann::json NonTensorStack::tolist() const {
  std::size_t offset = 0;
  return build_nested(values_, batch_size_, 0, offset);
}

const nlohmann::json& NonTensorStack::at(c10::IntArrayRef position) const {
  if (position.size() != batch_size_.size())
    throw IndexError("NonTensorStack::at: " + std::to_string(position.size()) +
                     " indices for a stack of batch size " + format_shape(batch_size_));
  int64_t flat = 0;
  for (std::size_t d = 0; d < position.size(); ++d) {
    int64_t n = batch_size_[d], i = position[d];
    if (i < -n || i >= n)
      throw IndexError("NonTensorStack::at: index " + std::to_string(i) +
                       " is out of bounds for dim " + std::to_string(d) + " of size " +
                       std::to_string(n));
    flat = flat * n + (i < 0 ? i + n : i);
  }
  return values_[static_cast<std::size_t>(flat)];
}

bool NonTensorStack::all_equal() const {
  for (const auto& v : values_)
    if (v != values_.front()) return false;
  return true;
}

Value NonTensorStack::index(at::ArrayRef<at::indexing::TensorIndex> index) const {
  auto t = detail::translate_index(index, batch_size_, false);
  return detail::index_non_tensor_stack(*this, t);
}

Value NonTensorStack::operator[](int64_t i) const { return index({at::indexing::TensorIndex(i)}); }

NonTensorStack& NonTensorStack::index_put_(at::ArrayRef<at::indexing::TensorIndex> index,
                                           const NonTensorData& value) {
  auto t = detail::translate_index(index, batch_size_, true);
  detail::put_non_tensor_stack(*this, t, Value(value), NestedKey());
  return *this;
}

NonTensorStack& NonTensorStack::index_put_(at::ArrayRef<at::indexing::TensorIndex> index,
                                           const NonTensorStack& value) {
  auto t = detail::translate_index(index, batch_size_, true);
  detail::put_non_tensor_stack(*this, t, Value(value), NestedKey());
  return *this;
}

namespace {
// A shape op on the positions; the result must keep at least one dim.
template <class Fn>
NonTensorStack shape_op(const NonTensorStack& s, const char* op, Fn fn) {
  return as_stack(detail::map_non_tensor_stack(s, fn, op, NestedKey()), op);
}
}  // namespace

NonTensorStack NonTensorStack::reshape(c10::IntArrayRef shape) const {
  return shape_op(*this, "reshape", [&](const at::Tensor& p) { return p.reshape(shape); });
}

NonTensorStack NonTensorStack::unsqueeze(int64_t dim) const {
  return shape_op(*this, "unsqueeze", [&](const at::Tensor& p) { return p.unsqueeze(dim); });
}

NonTensorStack NonTensorStack::permute(c10::IntArrayRef dims) const {
  return shape_op(*this, "permute", [&](const at::Tensor& p) { return p.permute(dims); });
}

NonTensorStack NonTensorStack::transpose(int64_t dim0, int64_t dim1) const {
  return shape_op(*this, "transpose", [&](const at::Tensor& p) { return p.transpose(dim0, dim1); });
}

NonTensorStack NonTensorStack::expand(c10::IntArrayRef shape) const {
  return shape_op(*this, "expand", [&](const at::Tensor& p) { return p.expand(shape); });
}

std::vector<Value> NonTensorStack::unbind(int64_t dim) const {
  return detail::unbind_non_tensor(Value(*this), detail::wrap_dim(dim, this->dim(), "unbind"),
                                   NestedKey());
}

namespace detail {
std::string non_tensor_stack_repr(const nlohmann::json& values, at::IntArrayRef batch,
                                  std::optional<at::Device> device) {
  // Python: str(self.tolist()), cut after 50 characters (code points).
  std::string list = python_repr(values);
  std::size_t chars = 0, cut = list.size();
  for (std::size_t i = 0; i < list.size(); ++i) {
    if ((static_cast<unsigned char>(list[i]) & 0xC0) == 0x80) continue;
    if (chars == 50) {
      cut = i;
      break;
    }
    ++chars;
  }
  if (cut < list.size()) list = list.substr(0, cut) + "...";
  return "NonTensorStack(\n    " + list + ",\n    batch_size=" + format_torch_size(batch) +
         ",\n    device=" + (device ? device->str() : std::string("None")) + ")";
}
}  // namespace detail

std::string NonTensorStack::repr() const {
  return detail::non_tensor_stack_repr(tolist(), batch_size_, device_);
}

}  // namespace tensordict
