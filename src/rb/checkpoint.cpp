// The samplers' part of a replay buffer checkpoint (TorchRL's Sampler.dumps /
// loads) and the file helpers of src/rb/checkpoint_io.h.
#include "rb/checkpoint_io.h"

#include <tensordict/errors.h>
#include <tensordict/rb/sampler.h>
#include <tensordict/rb/slice_sampler.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/files.h"
#include "io/json_io.h"

namespace tensordict::rb {

namespace fs = std::filesystem;

// ---- file helpers --------------------------------------------------------------------

namespace detail {

void format_error(const fs::path& file, const std::string& what) {
  throw FormatError("replay buffer checkpoint: " + file.string() + ": " + what);
}

ojson read_json_object(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) format_error(file, "missing");
  const std::string text = tensordict::detail::read_regular_file(file.string(), "checkpoint file");
  ojson j;
  try {
    j = tensordict::detail::parse_python_json(text, file.string());
  } catch (const nlohmann::json::exception& e) {
    format_error(file, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object())
    format_error(file, "expected a JSON object, got " + std::string(j.type_name()));
  return j;
}

const ojson& field(const ojson& object, const char* name, const fs::path& file) {
  const auto it = object.find(name);
  if (it == object.end()) format_error(file, std::string("the field \"") + name + "\" is missing");
  return *it;
}

int64_t integer_value(const ojson& value, const char* name, const fs::path& file) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX))
      format_error(file, std::string("\"") + name + "\" is out of range");
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // Within +-2^53, where every whole float is exact.
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) <= 9007199254740992.0)
      return static_cast<int64_t>(d);
  }
  format_error(file, std::string("\"") + name + "\" must be a whole number, got " + value.dump());
}

double number_value(const ojson& value, const char* name, const fs::path& file) {
  if (!value.is_number() || !std::isfinite(value.get<double>()))
    format_error(file,
                 std::string("\"") + name + "\" must be a finite number, got " + value.dump());
  return value.get<double>();
}

void write_json_file(const fs::path& file, const ojson& object) {
  const std::string text = object.dump();
  tensordict::detail::write_new_file(file.string(), text.data(), text.size(), /*durable=*/true,
                                     "replay buffer checkpoint");
}

void write_raw_file(const fs::path& file, const at::Tensor& values) {
  tensordict::detail::write_new_file(file.string(), static_cast<const char*>(values.data_ptr()),
                                     values.nbytes(), /*durable=*/true, "replay buffer checkpoint");
}

at::Tensor read_float64_file(const fs::path& file, int64_t count) {
  std::error_code ec;
  if (!fs::exists(file, ec)) format_error(file, "missing");
  const std::string bytes = tensordict::detail::read_regular_file(file.string(), "checkpoint file");
  const auto need = static_cast<std::size_t>(count) * sizeof(double);
  if (bytes.size() < need)
    format_error(file, "truncated: " + std::to_string(bytes.size()) + " bytes, expected " +
                           std::to_string(need) + " (float64 [" + std::to_string(count) + "])");
  at::Tensor out = at::empty({count}, at::kDouble);
  std::memcpy(out.data_ptr(), bytes.data(), need);
  return out;
}

}  // namespace detail

using detail::field;
using detail::format_error;
using detail::integer_value;
using detail::ojson;

namespace {

bool holds_files(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !fs::is_empty(dir, ec);
}

// The error for a sampler/ directory written by another kind of sampler.
[[noreturn]] void foreign_sampler(const fs::path& dir, const std::string& mine) {
  std::string theirs = "the state of another sampler";
  std::error_code ec;
  if (fs::exists(dir / "sampler_metadata.json", ec))
    theirs = "the state of a PrioritizedSampler";
  else if (fs::exists(dir / "meta.json", ec))
    theirs = "the state of a SamplerWithoutReplacement";
  else if (!holds_files(dir))
    theirs = "no sampler state (a RandomSampler's checkpoint)";
  throw ValueError("replay buffer checkpoint: " + dir.string() + " holds " + theirs +
                   ", this buffer's sampler is a " + mine +
                   " (a checkpoint loads into a buffer "
                   "with the same kind of sampler)");
}

// The one-element tensor `key` of a loaded sampler tensordict, as int64.
int64_t scalar_entry(const TensorDictBase& td, const char* key, bool want_bool,
                     const fs::path& meta) {
  if (!td.contains(key) || !td.at(key).is_tensor())
    format_error(meta, std::string("the entry \"") + key + "\" is missing or not a tensor");
  const at::Tensor t = td.get(key);
  const bool type_ok = want_bool ? t.scalar_type() == at::kBool
                                 : c10::isIntegralType(t.scalar_type(), /*includeBool=*/false);
  if (!type_ok || t.numel() != 1)
    format_error(meta, std::string("\"") + key + "\" must be one " +
                           (want_bool ? "bool" : "integer") + ", got " +
                           std::string(c10::toString(t.scalar_type())) + " of " +
                           std::to_string(t.numel()) + " elements");
  return want_bool ? int64_t(t.item<bool>()) : t.to(at::kLong).item<int64_t>();
}

}  // namespace

// ---- the base and RandomSampler ------------------------------------------------------

void Sampler::dumps(const fs::path&) const {
  throw UnsupportedError(name() +
                         " cannot be saved in a checkpoint: it does not override "
                         "Sampler::dumps() and Sampler::loads()");
}

void Sampler::loads(const fs::path&) {
  throw UnsupportedError(name() +
                         " cannot be loaded from a checkpoint: it does not override "
                         "Sampler::dumps() and Sampler::loads()");
}

void RandomSampler::dumps(const fs::path&) const {}

void RandomSampler::loads(const fs::path& dir) {
  if (holds_files(dir)) foreign_sampler(dir, name());
}

// TorchRL's SliceSampler saves nothing either (its trajectories are found
// again in the stored rows).
void SliceSampler::dumps(const fs::path&) const {}

void SliceSampler::loads(const fs::path& dir) {
  if (holds_files(dir)) foreign_sampler(dir, name());
}

// ---- SamplerWithoutReplacement -------------------------------------------------------

void SamplerWithoutReplacement::dumps(const fs::path& dir) const {
  TensorDict state(std::vector<int64_t>{});
  state.set("len_storage", at::scalar_tensor(epoch_size_, at::kLong));
  if (order_.defined() && remaining() > 0)
    state.set("_sample_list", order_.narrow(0, next_, remaining()).clone());
  else
    state.set_non_tensor("_sample_list", nullptr);  // TorchRL's None: no order drawn yet
  state.set("drop_last", at::scalar_tensor(drop_last_, at::kBool));
  state.set("_ran_out", at::scalar_tensor(ran_out_, at::kBool));
  MemmapOptions options;
  options.durable = true;
  state.save(dir.string(), options);
}

void SamplerWithoutReplacement::loads(const fs::path& dir) {
  const fs::path meta = dir / "meta.json";
  std::error_code ec;
  if (!fs::exists(meta, ec)) {
    if (!holds_files(dir) || fs::exists(dir / "sampler_metadata.json", ec))
      foreign_sampler(dir, name());
    format_error(meta, "missing (a SamplerWithoutReplacement saves its state there)");
  }
  const TensorDictBase td = load_memmap(dir.string());
  if (td.batch_dims() != 0)
    format_error(meta, "expected a tensordict of batch size [], got " + c10::str(td.batch_size()));
  const int64_t len_storage = scalar_entry(td, "len_storage", false, meta);
  const bool drop_last = scalar_entry(td, "drop_last", true, meta) != 0;
  const bool ran_out = scalar_entry(td, "_ran_out", true, meta) != 0;
  if (len_storage < 0) format_error(meta, "\"len_storage\" is negative");
  if (!td.contains("_sample_list")) format_error(meta, "the entry \"_sample_list\" is missing");
  at::Tensor order;
  if (td.is_non_tensor("_sample_list")) {
    if (!td.get_non_tensor("_sample_list").is_null())
      format_error(meta, "\"_sample_list\" must be an int64 tensor or null");
  } else {
    const at::Tensor list = td.get("_sample_list");
    if (list.scalar_type() != at::kLong || list.dim() != 1)
      format_error(meta, "\"_sample_list\" must be int64 [k], got " +
                             std::string(c10::toString(list.scalar_type())) + " " +
                             c10::str(list.sizes()));
    order = list.clone();
    const int64_t* r = order.data_ptr<int64_t>();
    std::vector<bool> seen(static_cast<std::size_t>(len_storage), false);
    for (int64_t k = 0; k < order.numel(); ++k) {
      if (r[k] < 0 || r[k] >= len_storage || seen[static_cast<std::size_t>(r[k])])
        format_error(meta, "\"_sample_list\" entry " + std::to_string(r[k]) + " at position " +
                               std::to_string(k) + " is not a distinct row below len_storage " +
                               std::to_string(len_storage));
      seen[static_cast<std::size_t>(r[k])] = true;
    }
    if (order.numel() == 0) order = at::Tensor();  // nothing left: a new epoch at the next sample
  }
  drop_last_ = drop_last;
  ran_out_ = ran_out;
  order_ = order;
  epoch_size_ = order.defined() ? len_storage : 0;
  next_ = 0;
}

// ---- PrioritizedSampler --------------------------------------------------------------

void PrioritizedSampler::dumps(const fs::path& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw StorageError("replay buffer checkpoint: cannot create " + dir.string() + ": " +
                       ec.message());
  detail::write_raw_file(dir / "sumtree.memmap", sum_tree_.leaves());
  detail::write_raw_file(dir / "mintree.memmap", min_tree_.leaves());
  ojson max_priority = ojson::array({nullptr, nullptr});
  if (!std::isnan(max_priority_)) {
    max_priority[0] = max_priority_;
    // TorchRL writes the slot as a float.
    if (max_priority_slot_ >= 0) max_priority[1] = static_cast<double>(max_priority_slot_);
  }
  ojson meta;
  meta["_alpha"] = alpha_;
  meta["_beta"] = beta_;
  meta["_eps"] = eps_;
  meta["_max_priority"] = std::move(max_priority);
  meta["_max_capacity"] = static_cast<double>(capacity());
  meta["_schema_version"] = 1;
  detail::write_json_file(dir / "sampler_metadata.json", meta);
}

void PrioritizedSampler::loads(const fs::path& dir) {
  const fs::path file = dir / "sampler_metadata.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    if (!holds_files(dir) || fs::exists(dir / "meta.json", ec)) foreign_sampler(dir, name());
    format_error(file, "missing (a PrioritizedSampler saves its state there)");
  }
  const ojson meta = detail::read_json_object(file);
  PrioritizedSamplerState state;
  const auto exponent = [&](const char* name) {
    const double v = detail::number_value(field(meta, name, file), name, file);
    if (v < 0) format_error(file, std::string("\"") + name + "\" is negative");
    return v;
  };
  state.alpha = exponent("_alpha");
  state.beta = exponent("_beta");
  state.eps = exponent("_eps");
  if (meta.contains("_schema_version")) {
    const int64_t version = integer_value(meta["_schema_version"], "_schema_version", file);
    // Version 0 (none written) differs only with max_priority_within_buffer.
    if (version < 0 || version > 1)
      format_error(file, "unknown \"_schema_version\" " + std::to_string(version) +
                             " (this library reads 0 and 1)");
  }
  state.max_capacity = integer_value(field(meta, "_max_capacity", file), "_max_capacity", file);
  if (state.max_capacity != capacity())
    throw ValueError("replay buffer checkpoint: " + file.string() + ": \"_max_capacity\" is " +
                     std::to_string(state.max_capacity) + ", this PrioritizedSampler holds " +
                     std::to_string(capacity()) +
                     " rows (a checkpoint loads into a buffer of "
                     "the same capacity)");
  const ojson& pair = field(meta, "_max_priority", file);
  if (!pair.is_array() || pair.size() != 2)
    format_error(file,
                 "\"_max_priority\" must be [value, slot] or [null, null], got " + pair.dump());
  state.max_priority = std::numeric_limits<double>::quiet_NaN();
  state.max_priority_slot = -1;
  if (!pair[0].is_null()) {
    state.max_priority = detail::number_value(pair[0], "_max_priority", file);
    if (state.max_priority < 0) format_error(file, "\"_max_priority\" is negative");
    if (!pair[1].is_null()) {
      state.max_priority_slot = integer_value(pair[1], "_max_priority", file);
      if (state.max_priority_slot < 0 || state.max_priority_slot >= capacity())
        format_error(file, "the slot of \"_max_priority\", " +
                               std::to_string(state.max_priority_slot) + ", is not a row below " +
                               std::to_string(capacity()));
    }
  }
  state.sum_leaves = detail::read_float64_file(dir / "sumtree.memmap", capacity());
  state.min_leaves = detail::read_float64_file(dir / "mintree.memmap", capacity());
  const double* sums = state.sum_leaves.data_ptr<double>();
  double* mins = state.min_leaves.data_ptr<double>();
  // TorchRL's float32 trees mark unused min leaves with the largest float32.
  const double float32_max = std::numeric_limits<float>::max();
  for (int64_t s = 0; s < capacity(); ++s) {
    if (!(sums[s] >= 0) || !std::isfinite(sums[s]))
      format_error(dir / "sumtree.memmap", "leaf " + std::to_string(s) + " is " +
                                               std::to_string(sums[s]) +
                                               ", not a finite non-negative weight");
    if (!(mins[s] >= 0))
      format_error(dir / "mintree.memmap", "leaf " + std::to_string(s) + " is " +
                                               std::to_string(mins[s]) +
                                               ", not a non-negative weight");
    if (mins[s] >= float32_max) mins[s] = std::numeric_limits<double>::infinity();
  }
  load_state(state);
}

}  // namespace tensordict::rb
