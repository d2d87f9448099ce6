// TensorDictMaxValueWriter: the top-`capacity` items by a rank entry, kept
// with a min-heap of (rank, row) as TorchRL's heapq list, and its checkpoint
// files in TorchRL's layout.
#include <tensordict/errors.h>
#include <tensordict/rb/writer.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

#include "io/json_io.h"
#include "rb/checkpoint_io.h"

namespace tensordict::rb {

namespace fs = std::filesystem;
using detail::field;
using detail::format_error;
using detail::integer_value;
using detail::ojson;

namespace {

using Entry = std::pair<double, int64_t>;
constexpr auto kMinHeap = std::greater<Entry>();

RankReduction reduction_named(const std::string& name) {
  if (name == "sum") return RankReduction::kSum;
  if (name == "max") return RankReduction::kMax;
  if (name == "min") return RankReduction::kMin;
  if (name == "mean") return RankReduction::kMean;
  if (name == "median") return RankReduction::kMedian;
  if (name == "none") return RankReduction::kNone;
  throw ValueError("TensorDictMaxValueWriter: unknown reduction \"" + name +
                   "\" (expected sum, max, min, mean, median or none)");
}

ojson key_json(const NestedKey& key) {
  if (key.size() == 1) return key.front();
  ojson parts = ojson::array();
  for (const std::string& part : key) parts.push_back(part);
  return parts;
}

}  // namespace

TensorDictMaxValueWriter::TensorDictMaxValueWriter(NestedKey rank_key, RankReduction reduction)
    : rank_key_(std::move(rank_key)), reduction_(reduction) {
  if (rank_key_.empty()) throw ValueError("TensorDictMaxValueWriter: the rank key is empty");
}

TensorDictMaxValueWriter::TensorDictMaxValueWriter(NestedKey rank_key, const std::string& reduction)
    : TensorDictMaxValueWriter(std::move(rank_key), reduction_named(reduction)) {}

std::vector<double> TensorDictMaxValueWriter::ranks(const TensorDictBase& data,
                                                    int64_t lead) const {
  const std::string where = "TensorDictMaxValueWriter: the rank entry " + rank_key_.repr();
  const std::optional<Value> value = data.find(rank_key_);
  if (!value) throw KeyError(where + " is missing from the data written");
  if (!value->is_tensor()) throw TypeError(where + " is not a tensor");
  at::Tensor t = value->tensor();
  const at::ScalarType type = t.scalar_type();
  if (c10::isComplexType(type) || !(c10::isFloatingType(type) || c10::isIntegralType(type, true)))
    throw TypeError(where + " is " + std::string(c10::toString(type)) + ", expected real numbers");
  const int64_t n = lead ? t.size(0) : 1;
  // One float or double per item in CPU memory (a reward column): read as it
  // is, without the conversions below (a few tensor calls per write).
  if (t.device().is_cpu() && t.numel() == n && t.is_contiguous() &&
      (type == at::kFloat || type == at::kDouble)) {
    std::vector<double> out(static_cast<std::size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      const double v = type == at::kFloat ? static_cast<double>(t.data_ptr<float>()[k])
                                          : t.data_ptr<double>()[k];
      if (std::isnan(v)) throw ValueError(where + " is NaN for item " + std::to_string(k));
      out[static_cast<std::size_t>(k)] = v;
    }
    return out;
  }
  t = t.to(at::kCPU).reshape({n, -1});
  const int64_t per_item = t.size(1);
  if (per_item == 0) throw ShapeError(where + " has no element per item");
  if (per_item > 1) {
    if (reduction_ == RankReduction::kNone)
      throw ShapeError(where + " has " + std::to_string(per_item) +
                       " elements per item and the writer has no reduction (use sum, max, "
                       "min, mean or median)");
    if (type == at::kBool) t = t.to(at::kLong);
    switch (reduction_) {
      case RankReduction::kSum:
        t = t.sum(1);
        break;
      case RankReduction::kMax:
        t = std::get<0>(t.max(1));
        break;
      case RankReduction::kMin:
        t = std::get<0>(t.min(1));
        break;
      case RankReduction::kMean:
        t = (c10::isFloatingType(t.scalar_type()) ? t : t.to(at::kDouble)).mean(1);
        break;
      case RankReduction::kMedian:
        t = std::get<0>(t.median(1));
        break;
      case RankReduction::kNone:
        break;
    }
  }
  const at::Tensor flat = t.reshape({n}).to(at::kDouble).contiguous();
  const double* v = flat.data_ptr<double>();
  for (int64_t k = 0; k < n; ++k)
    if (std::isnan(v[k])) throw ValueError(where + " is NaN for item " + std::to_string(k));
  return std::vector<double>(v, v + n);
}

int64_t TensorDictMaxValueWriter::place(double rank, int64_t capacity) {
  int64_t row;
  if (static_cast<int64_t>(heap_.size()) < capacity) {
    row = cursor_;
    cursor_ = (cursor_ + 1) % capacity;
  } else if (rank > heap_.front().first) {
    std::pop_heap(heap_.begin(), heap_.end(), kMinHeap);
    removed_.push_back(heap_.back());
    row = heap_.back().second;
    heap_.pop_back();
  } else {
    return -1;
  }
  heap_.emplace_back(rank, row);
  std::push_heap(heap_.begin(), heap_.end(), kMinHeap);
  added_.emplace_back(rank, row);
  ++write_count_;
  return row;
}

at::Tensor TensorDictMaxValueWriter::write_rows(const TensorDictBase& batch, int64_t capacity) {
  detail::check_capacity(capacity, "TensorDictMaxValueWriter::write_rows");
  if (batch.batch_dims() != 1)
    throw ShapeError("TensorDictMaxValueWriter::write_rows: expected a batch of size [n], got " +
                     c10::str(batch.batch_size()));
  const std::vector<double> rank = ranks(batch, 1);
  removed_.clear();
  added_.clear();
  previous_cursor_ = cursor_;
  previous_write_count_ = write_count_;
  const auto n = static_cast<int64_t>(rank.size());
  at::Tensor out = at::full({n}, -1, at::kLong);
  int64_t* rows = out.data_ptr<int64_t>();
  std::unordered_map<int64_t, int64_t> item_of_row;  // the last item given each row
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = place(rank[k], capacity);
    if (row < 0) continue;
    if (auto [it, fresh] = item_of_row.try_emplace(row, k); !fresh) {
      rows[it->second] = -1;  // overwritten within this same write
      it->second = k;
    }
    rows[k] = row;
  }
  return out;
}

int64_t TensorDictMaxValueWriter::write_row(const TensorDictBase& item, int64_t capacity) {
  detail::check_capacity(capacity, "TensorDictMaxValueWriter::write_row");
  const double rank = ranks(item, 0).front();
  removed_.clear();
  added_.clear();
  previous_cursor_ = cursor_;
  previous_write_count_ = write_count_;
  return place(rank, capacity);
}

void TensorDictMaxValueWriter::undo() {
  // heap before = heap now + removed - added, as multisets.
  std::vector<Entry> now(heap_);
  now.insert(now.end(), removed_.begin(), removed_.end());
  std::sort(now.begin(), now.end());
  std::sort(added_.begin(), added_.end());
  std::vector<Entry> before;
  std::set_difference(now.begin(), now.end(), added_.begin(), added_.end(),
                      std::back_inserter(before));
  std::make_heap(before.begin(), before.end(), kMinHeap);
  heap_ = std::move(before);
  cursor_ = previous_cursor_;
  write_count_ = previous_write_count_;
  removed_.clear();
  added_.clear();
}

void TensorDictMaxValueWriter::load_state(const WriterState& state, int64_t capacity) {
  detail::check_capacity(capacity, "TensorDictMaxValueWriter::load_state");
  if (state != WriterState{})
    throw UnsupportedError(
        "TensorDictMaxValueWriter::load_state: a cursor and write count alone do not say which "
        "rows rank highest; load a checkpoint (ReplayBuffer::loads) instead");
  reset();
}

void TensorDictMaxValueWriter::reset() {
  cursor_ = write_count_ = previous_cursor_ = previous_write_count_ = 0;
  heap_.clear();
  removed_.clear();
  added_.clear();
}

std::vector<std::pair<double, int64_t>> TensorDictMaxValueWriter::top_values() const {
  std::vector<Entry> out(heap_);
  std::sort(out.begin(), out.end());
  return out;
}

void TensorDictMaxValueWriter::dumps(const fs::path& dir) const {
  const auto k = static_cast<int64_t>(heap_.size());
  // The heap's own order, so that TorchRL's heapq goes on from it as it is.
  at::Tensor values = at::empty({k, 2}, at::kDouble);
  double* v = values.data_ptr<double>();
  for (int64_t i = 0; i < k; ++i) {
    v[2 * i] = heap_[i].first;
    v[2 * i + 1] = static_cast<double>(heap_[i].second);
  }
  // TorchRL saves an empty heap as shape [0].
  const ojson shape = k ? ojson::array({k, 2}) : ojson::array({0});
  detail::write_raw_file(dir / "current_top_values.memmap", values);
  detail::write_json_file(dir / "metadata.json", ojson{{"cursor", cursor_},
                                                       {"write_count", write_count_},
                                                       {"rank_key", key_json(rank_key_)},
                                                       {"dtype", "torch.float64"},
                                                       {"shape", shape}});
}

std::function<void()> TensorDictMaxValueWriter::read_checkpoint(const fs::path& dir,
                                                                int64_t capacity, int64_t len) {
  const fs::path file = dir / "metadata.json";
  const ojson meta = detail::read_json_object(file);
  if (!meta.contains("rank_key"))
    throw ValueError("replay buffer checkpoint: " + file.string() +
                     " has no \"rank_key\": a RoundRobinWriter's, this buffer's writer is a "
                     "TensorDictMaxValueWriter (a checkpoint loads into a buffer with the same "
                     "kind of writer)");
  const ojson& key = meta["rank_key"];
  NestedKey saved_key;
  if (key.is_string()) {
    saved_key = NestedKey(key.get<std::string>());
  } else if (key.is_array() && !key.empty() &&
             std::all_of(key.begin(), key.end(), [](const ojson& p) { return p.is_string(); })) {
    saved_key = NestedKey(key.get<std::vector<std::string>>());
  } else {
    format_error(file, "\"rank_key\" must be a string or a list of strings, got " + key.dump());
  }
  if (saved_key != rank_key_)
    throw ValueError("replay buffer checkpoint: " + file.string() + " ranks by " +
                     saved_key.repr() + ", this writer by " + rank_key_.repr());
  WriterState state;
  state.cursor = integer_value(field(meta, "cursor", file), "cursor", file);
  state.write_count = integer_value(field(meta, "write_count", file), "write_count", file);
  detail::check_writer_counts(file, state, capacity, len);
  if (state.cursor != len % capacity)
    format_error(file, "\"cursor\" " + std::to_string(state.cursor) + " with " +
                           std::to_string(len) + " rows filled (expected " +
                           std::to_string(len % capacity) +
                           ": the writer fills rows in order until the storage is full)");

  const ojson& dtype_json = field(meta, "dtype", file);
  const std::string dtype = dtype_json.is_string() ? dtype_json.get<std::string>() : "";
  std::size_t item = 0;
  if (dtype == "torch.float32" || dtype == "torch.int32")
    item = 4;
  else if (dtype == "torch.float64" || dtype == "torch.int64")
    item = 8;
  else
    format_error(file,
                 "\"dtype\" must be torch.float32, torch.float64, torch.int32 or "
                 "torch.int64, got " +
                     dtype_json.dump());
  const ojson& shape = field(meta, "shape", file);
  int64_t k = 0;
  if (shape == ojson::array({0})) {
    k = 0;
  } else if (shape.is_array() && shape.size() == 2 && shape[1] == 2) {
    k = integer_value(shape[0], "shape", file);
  } else {
    format_error(file, "\"shape\" must be [k, 2] or [0], got " + shape.dump());
  }
  if (k != len)
    format_error(file, "\"shape\" holds " + std::to_string(k) + " (rank, row) pairs for " +
                           std::to_string(len) + " filled rows (expected one per row)");
  const fs::path values_file = dir / "current_top_values.memmap";
  std::vector<Entry> heap;
  if (k > 0) {
    std::error_code ec;
    if (!fs::exists(values_file, ec)) format_error(values_file, "missing");
    const std::string bytes =
        tensordict::detail::read_regular_file(values_file.string(), "checkpoint file");
    const std::size_t need = static_cast<std::size_t>(k) * 2 * item;
    if (bytes.size() < need)
      format_error(values_file, "truncated: " + std::to_string(bytes.size()) + " bytes, expected " +
                                    std::to_string(need));
    auto value = [&](std::size_t i) -> double {
      const char* p = bytes.data() + i * item;
      if (dtype == "torch.float32") {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      if (dtype == "torch.int32") {
        int32_t x;
        std::memcpy(&x, p, 4);
        return x;
      }
      if (dtype == "torch.int64") {
        int64_t x;
        std::memcpy(&x, p, 8);
        return static_cast<double>(x);
      }
      double d;
      std::memcpy(&d, p, 8);
      return d;
    };
    std::vector<bool> seen(static_cast<std::size_t>(len), false);
    for (int64_t i = 0; i < k; ++i) {
      const double rank = value(2 * i), row = value(2 * i + 1);
      if (std::isnan(rank)) format_error(values_file, "rank " + std::to_string(i) + " is NaN");
      if (!(row >= 0 && row < static_cast<double>(len)) || std::floor(row) != row ||
          seen[static_cast<std::size_t>(row)])
        format_error(values_file, "pair " + std::to_string(i) + " names row " +
                                      std::to_string(row) + ", expected each row of [0, " +
                                      std::to_string(len) + ") once");
      seen[static_cast<std::size_t>(row)] = true;
      heap.emplace_back(rank, static_cast<int64_t>(row));
    }
  }
  std::make_heap(heap.begin(), heap.end(), kMinHeap);
  return [this, state, heap = std::move(heap)]() mutable {
    reset();
    cursor_ = state.cursor;
    write_count_ = state.write_count;
    heap_ = std::move(heap);
  };
}

}  // namespace tensordict::rb
