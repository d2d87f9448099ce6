// H5Node: a group of an HDF5 file as a tensordict level. Row operations use
// one HDF5 selection per dataset per operation: a hyperslab for ints and
// slices, a union of row runs (or one covering hyperslab when the rows are
// dense) for long indices and masks, sorted and de-duplicated once per
// operation and put back in the user's order.
#include "storage/hdf5/h5_node.h"

#include "io/json_io.h"
#include "storage/hdf5/h5_counters.h"

#include <tensordict/detail/format.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace tensordict::detail::h5 {

CallCounters& call_counters() noexcept {
  static CallCounters c;
  return c;
}

namespace {

void check_key(std::string_view key, const File& file, const std::string& path) {
  if (key.find('/') != std::string_view::npos)
    throw ValueError(file.where(path) + ": the key '" + std::string(key) +
                     "' contains '/', which HDF5 reads as a path separator; use a nested key "
                     "instead");
  if (key.empty() || key == "." || key == "..")
    throw ValueError(file.where(path) + ": '" + std::string(key) +
                     "' is not a valid HDF5 link name");
}

std::vector<int64_t> concat(at::IntArrayRef a, at::IntArrayRef b) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// The rows of a Rows selection, prepared once per operation for every leaf.
struct RowsPlan {
  std::vector<int64_t> user_shape;
  int64_t n = 0;
  std::vector<int64_t> unique;                    // sorted
  std::vector<std::pair<hsize_t, hsize_t>> runs;  // (start, count)
  bool identity = false;                          // already sorted and unique
  at::Tensor inverse;                             // [n]: position in unique
  at::Tensor last;                                // [unique]: last user position
  at::Tensor local;                               // [n]: row - unique.front()
  int64_t span = 0;
  /// Dense rows: one covering hyperslab read, then picked in memory.
  bool cover() const { return runs.size() == 1 || span <= 4 * static_cast<int64_t>(unique.size()); }
};

RowsPlan plan_rows(const RowSelection& rows) {
  RowsPlan p;
  at::Tensor r = rows.rows().to(at::kLong).contiguous();
  p.user_shape.assign(r.sizes().begin(), r.sizes().end());
  p.n = r.numel();
  if (p.n == 0) return p;
  const int64_t* v = r.data_ptr<int64_t>();
  p.identity = rows.rows_sorted() && rows.rows_unique();
  if (p.identity) {
    p.unique.assign(v, v + p.n);
  } else {
    std::vector<int64_t> order(static_cast<std::size_t>(p.n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] < v[b]; });
    p.inverse = at::empty({p.n}, at::kLong);
    int64_t* inv = p.inverse.data_ptr<int64_t>();
    std::vector<int64_t> last;
    for (int64_t pos : order) {
      if (p.unique.empty() || p.unique.back() != v[pos]) {
        p.unique.push_back(v[pos]);
        last.push_back(pos);
      } else {
        last.back() = pos;  // stable: the latest user position wins a write
      }
      inv[pos] = static_cast<int64_t>(p.unique.size()) - 1;
    }
    p.last = at::tensor(last, at::kLong);
  }
  for (int64_t u : p.unique) {
    if (!p.runs.empty() && p.runs.back().first + p.runs.back().second == static_cast<hsize_t>(u))
      ++p.runs.back().second;
    else
      p.runs.emplace_back(static_cast<hsize_t>(u), 1);
  }
  p.span = p.unique.back() - p.unique.front() + 1;
  if (p.cover() && !(p.identity && p.span == p.n)) p.local = r.flatten() - p.unique.front();
  return p;
}

int64_t product(at::IntArrayRef s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

// Selects the rows [start, start + count) of dim 0, every element of the
// other dims, as one hyperslab (op SET) or added to the selection (OR).
void select_rows(hid_t space, const std::vector<int64_t>& shape, hsize_t start, hsize_t count,
                 H5S_seloper_t op, const std::string& context) {
  std::vector<hsize_t> s(shape.size(), 0), c(shape.begin(), shape.end());
  s[0] = start;
  c[0] = count;
  check(H5Sselect_hyperslab(space, op, s.data(), nullptr, c.data(), nullptr), "H5Sselect_hyperslab",
        context);
}

// The hyperslab of a Box selection; returns its count per dim.
std::vector<hsize_t> select_box(hid_t space, const RowSelection& rows,
                                const std::vector<int64_t>& shape, const std::string& context) {
  const std::size_t rank = shape.size();
  std::vector<hsize_t> start(rank, 0), stride(rank, 1), count(shape.begin(), shape.end());
  auto ranges = rows.ranges();
  for (std::size_t i = 0; i < ranges.size() && i < rank; ++i) {
    start[i] = static_cast<hsize_t>(ranges[i].start);
    stride[i] = static_cast<hsize_t>(std::max<int64_t>(ranges[i].step, 1));
    count[i] = static_cast<hsize_t>(ranges[i].count());
  }
  if (std::find(count.begin(), count.end(), 0) == count.end())
    check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), stride.data(), count.data(),
                              nullptr),
          "H5Sselect_hyperslab", context);
  return count;
}

// One H5Dread or H5Dwrite of `t`'s bytes, counted.
void transfer(bool write, const Dataset& d, hid_t mem, hid_t file_space, const at::Tensor& t,
              const std::string& context) {
  auto& counters = call_counters();
  ++(write ? counters.writes : counters.reads);
  if (file_space != H5S_ALL) ++counters.selections;
  const hid_t type = memory_type(t.scalar_type());
  if (write) {
    // HDF5 buffers small writes (sieve buffer, chunk cache): what failed may
    // be an earlier write's bytes, flushed now (a full disk).
    if (H5Dwrite(d.id.get(), type, mem, file_space, H5P_DEFAULT, t.data_ptr()) < 0)
      throw StorageError(context + ": H5Dwrite failed (" + error_text() +
                         "); HDF5 buffers small writes, so rows written since the last "
                         "successful flush() may be lost too");
  } else {
    check(H5Dread(d.id.get(), type, mem, file_space, H5P_DEFAULT, t.data_ptr()), "H5Dread",
          context);
  }
}
void read_into(const Dataset& d, hid_t mem, hid_t file_space, const at::Tensor& out,
               const std::string& context) {
  transfer(false, d, mem, file_space, out, context);
}
void write_from(const Dataset& d, hid_t mem, hid_t file_space, const at::Tensor& value,
                const std::string& context) {
  transfer(true, d, mem, file_space, value, context);
}

// A new tensor to read into: a shape too large for memory (a crafted file
// can declare a terabyte dataset in a few bytes) is a StorageError naming the
// dataset, not an allocator error.
at::Tensor allocate(const Dataset& d, at::IntArrayRef shape) {
  try {
    return at::empty(shape, at::TensorOptions().dtype(d.info.dtype));
  } catch (const c10::Error& e) {
    throw StorageError(d.where + ": cannot allocate a tensor of shape " + format_shape(shape) +
                       " to read into (" + e.what_without_backtrace() +
                       "); read fewer rows at a time");
  } catch (const std::bad_alloc&) {
    throw StorageError(d.where + ": cannot allocate a tensor of shape " + format_shape(shape) +
                       " to read into (out of memory); read fewer rows at a time");
  }
}

at::Tensor read_all(const Dataset& d, const std::string& context) {
  at::Tensor out = allocate(d, d.shape);
  if (out.numel() > 0) read_into(d, H5S_ALL, H5S_ALL, out, context);
  return out;
}

void write_all(const Dataset& d, const at::Tensor& value, const std::string& context) {
  if (value.numel() == 0) return;
  write_from(d, H5S_ALL, H5S_ALL, value.contiguous(), context);
}

// The selected rows of one dataset (everything but General).
at::Tensor read_selected(Dataset& d, const RowSelection& rows, const RowsPlan* plan) {
  const std::string& context = d.where;
  switch (rows.kind()) {
    case RowSelection::Kind::All:
      return read_all(d, context);
    case RowSelection::Kind::Box: {
      at::Tensor out = allocate(d, rows.selected_shape(d.shape));
      if (out.numel() == 0) return out;
      auto count = select_box(d.space.get(), rows, d.shape, context);
      read_into(d, d.memory_space(count), d.space.get(), out, context);
      return out;
    }
    case RowSelection::Kind::Rows: {
      const RowsPlan& p = *plan;
      std::vector<int64_t> feat(d.shape.begin() + 1, d.shape.end());
      auto out_shape = concat(p.user_shape, feat);
      if (p.n == 0 || product(feat) == 0) return allocate(d, out_shape);
      const bool cover = p.cover();
      const int64_t count = cover ? p.span : static_cast<int64_t>(p.unique.size());
      if (cover) {
        select_rows(d.space.get(), d.shape, static_cast<hsize_t>(p.unique.front()),
                    static_cast<hsize_t>(p.span), H5S_SELECT_SET, context);
      } else {
        for (std::size_t i = 0; i < p.runs.size(); ++i)
          select_rows(d.space.get(), d.shape, p.runs[i].first, p.runs[i].second,
                      i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, context);
      }
      auto tmp_shape = concat({count}, feat);
      at::Tensor tmp = allocate(d, tmp_shape);
      read_into(d, d.memory_space(std::vector<hsize_t>(tmp_shape.begin(), tmp_shape.end())),
                d.space.get(), tmp, context);
      if (cover) {
        if (!p.local.defined()) return tmp.view(out_shape);
        return tmp.index_select(0, p.local).view(out_shape);
      }
      if (p.identity) return tmp.view(out_shape);
      return tmp.index_select(0, p.inverse).view(out_shape);
    }
    case RowSelection::Kind::General:
      break;
  }
  return rows.apply(read_all(d, context)).contiguous();
}

void write_selected(Dataset& d, const RowSelection& rows, const RowsPlan* plan,
                    const at::Tensor& value) {
  const std::string& context = d.where;
  switch (rows.kind()) {
    case RowSelection::Kind::All:
      write_all(d, value, context);
      return;
    case RowSelection::Kind::Box: {
      if (value.numel() == 0) return;
      auto count = select_box(d.space.get(), rows, d.shape, context);
      write_from(d, d.memory_space(count), d.space.get(),
                 value.is_contiguous() ? value : value.contiguous(), context);
      return;
    }
    case RowSelection::Kind::Rows: {
      const RowsPlan& p = *plan;
      if (value.numel() == 0 || p.n == 0) return;
      std::vector<int64_t> feat(d.shape.begin() + 1, d.shape.end());
      at::Tensor src = value.reshape(concat({p.n}, feat));
      if (!p.identity) src = src.index_select(0, p.last);
      src = src.contiguous();
      for (std::size_t i = 0; i < p.runs.size(); ++i)
        select_rows(d.space.get(), d.shape, p.runs[i].first, p.runs[i].second,
                    i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, context);
      auto mem_shape = concat({static_cast<int64_t>(p.unique.size())}, feat);
      write_from(d, d.memory_space(std::vector<hsize_t>(mem_shape.begin(), mem_shape.end())),
                 d.space.get(), src, context);
      return;
    }
    case RowSelection::Kind::General:
      break;
  }
  // Read, modify, write: the fallback for index forms HDF5 cannot select.
  at::Tensor whole = read_all(d, context);
  rows.put(whole, value);
  write_all(d, whole, context);
}

const H5Node* same_file(const Node* n, const std::shared_ptr<File>& file) {
  const auto* h = dynamic_cast<const H5Node*>(n);
  return h && h->file() == file ? h : nullptr;
}

}  // namespace

H5Node::H5Node(std::shared_ptr<File> file, std::string path, std::vector<int64_t> batch_size,
               std::optional<at::Device> device, std::vector<ObjectId> lineage)
    : file_(std::move(file)),
      path_(std::move(path)),
      batch_size_(std::move(batch_size)),
      device_(device),
      lineage_(std::move(lineage)) {
  keeps_data_outside_ = true;
}

std::vector<ObjectId> H5Node::lineage_with(const std::string& path) const {
  std::vector<ObjectId> out = lineage_;
  out.push_back(file_->group_id(path));
  return out;
}

void H5Node::set_batch_size(std::vector<int64_t> batch_size) {
  // Not stored in the file (h5py files carry no batch size).
  batch_size_ = std::move(batch_size);
}

std::vector<std::string> H5Node::keys() const {
  Lock l = lock();
  return file_->keys(path_);
}

std::size_t H5Node::size() const {
  Lock l = lock();
  return file_->keys(path_).size();
}

Entry* H5Node::entry(std::string_view key) const {
  file_->check_open();
  if (entries_generation_ != file_->generation()) {
    entries_.clear();
    entries_generation_ = file_->generation();
  }
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  Entry* e = file_->entry(path_, key);
  if (e) entries_.emplace(std::string(key), e);
  return e;
}

std::optional<EntryKind> H5Node::kind(std::string_view key) const {
  Lock l = lock();
  const Entry* e = entry(key);
  if (!e) return std::nullopt;
  if (e->is_group) return EntryKind::TensorDict;
  if (e->dataset->info.element == Element::Tensor) return EntryKind::Tensor;
  return e->dataset->stack_shape ? EntryKind::NonTensorStack : EntryKind::NonTensor;
}

std::optional<TensorMeta> H5Node::tensor_meta(std::string_view key) const {
  Lock l = lock();
  const Entry* e = entry(key);
  if (!e || e->is_group || e->dataset->info.element != Element::Tensor) return std::nullopt;
  return TensorMeta{e->dataset->shape, e->dataset->info.dtype, device_.value_or(at::kCPU)};
}

std::shared_ptr<H5Node> H5Node::child(std::string_view key) const {
  auto it = children_.find(key);
  if (it != children_.end()) return it->second;
  const std::string path = join(path_, key);
  // The walk at open refused cycles and depth; links added since (by
  // another writer) are refused here, before a recursive walk follows them.
  const ObjectId& id = entry(key)->group_id;
  if (std::find(lineage_.begin(), lineage_.end(), id) != lineage_.end())
    throw FormatError(file_->where(path) +
                      ": a link back to a group that contains it (a cycle of links), which "
                      "no tensordict can hold");
  if (lineage_.size() >= static_cast<std::size_t>(kMaxNestingDepth))
    throw FormatError(file_->where(path) + ": groups nested deeper than " +
                      std::to_string(kMaxNestingDepth) + " levels");
  std::vector<ObjectId> lineage = lineage_;
  lineage.push_back(id);
  auto inferred = file_->inferred.find(id);
  auto node = std::make_shared<H5Node>(
      file_, path, inferred != file_->inferred.end() ? inferred->second : batch_size_, device_,
      std::move(lineage));
  children_.emplace(std::string(key), node);
  return node;
}

Dataset& H5Node::tensor_dataset(std::string_view key) const {
  Entry* e = entry(key);
  if (e && !e->is_group && e->dataset->info.element == Element::Tensor) return *e->dataset;
  const std::string where = file_->where(join(path_, key));
  if (!e) throw KeyError(where + ": no such dataset");
  if (e->is_group) throw TypeError(where + " is a group, not a tensor dataset");
  if (!e->dataset->refused.empty())
    throw FormatError(where + ": the dataset cannot be read: " + e->dataset->refused);
  if (e->dataset->info.element == Element::Unsupported)
    throw FormatError(where + ": dataset of unsupported element type (" +
                      e->dataset->info.description + ")");
  throw TypeError(where + " is a non-tensor dataset, not a tensor");
}

std::optional<Value> H5Node::find(std::string_view key) const {
  Lock l = lock();
  Entry* e = entry(key);
  if (!e) return std::nullopt;
  if (e->is_group) return Value(TensorDictBase(child(key)));
  const std::string full = join(path_, key);
  Dataset& d = *e->dataset;
  switch (d.info.element) {
    case Element::Tensor: {
      file_->refresh(d);
      at::Tensor t = read_all(d, file_->where(full));
      if (device_ && !device_->is_cpu()) t = t.to(*device_);
      return Value(std::move(t));
    }
    case Element::String:
    case Element::Opaque: {
      file_->refresh(d);
      nlohmann::json data = file_->read_non_tensor(d, file_->where(full));
      if (!d.stack_shape) return Value(NonTensorData(std::move(data), batch_size_, device_));
      // Python tensordict's NonTensorStack: one element per entry of the
      // dataset, whose shape the attribute repeats.
      if (*d.stack_shape != d.shape)
        throw FormatError(file_->where(full) + ": a NonTensorStack of shape " +
                          format_shape(*d.stack_shape) +
                          " (its __tensordict_stack__ attribute) "
                          "in a dataset of shape " +
                          format_shape(d.shape));
      return Value(NonTensorStack(data, *d.stack_shape, device_));
    }
    case Element::Unsupported:
      if (!d.refused.empty())
        throw FormatError(file_->where(full) + ": the dataset cannot be read: " + d.refused);
      break;
  }
  throw FormatError(
      file_->where(full) + ": dataset of unsupported element type (" + d.info.description +
      "); tensors are bool, int8-64, uint8 (uint16-64 with LibTorch 2.3+), float16-64, "
      "complex64/128, non-tensors strings and NUMPY opaque values");
}

at::Tensor H5Node::read_at(std::string_view key, const RowSelection& rows) const {
  LeafRead leaf{this, NestedKey(std::string(key)), at::Tensor()};
  read_leaves(rows, std::span<LeafRead>(&leaf, 1));
  return leaf.out;
}

void H5Node::read_leaves(const RowSelection& rows, std::span<LeafRead> leaves) const {
  std::vector<LeafRead> others;
  std::vector<std::size_t> other_index;
  Lock l = lock();
  file_->check_open();
  std::optional<RowsPlan> plan;
  if (rows.kind() == RowSelection::Kind::Rows) plan = plan_rows(rows);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    LeafRead& leaf = leaves[i];
    const H5Node* n = same_file(leaf.node, file_);
    if (!n) {
      others.push_back(leaf);
      other_index.push_back(i);
      continue;
    }
    Dataset& d = n->tensor_dataset(leaf.key());
    file_->refresh(d);
    at::Tensor out = read_selected(d, rows, plan ? &*plan : nullptr);
    if (n->device_ && !n->device_->is_cpu()) out = out.to(*n->device_);
    leaf.out = std::move(out);
  }
  if (!others.empty()) {
    Node::read_leaves(rows, others);
    for (std::size_t i = 0; i < others.size(); ++i) leaves[other_index[i]].out = others[i].out;
  }
}

void H5Node::write(std::string_view key, Value value) {
  Lock l = lock();
  const std::string full = join(path_, key);
  file_->check_writable("writing", full);
  file_->check_structure_writable("writing", full);
  check_key(key, *file_, path_);
  // Everything that can be refused is refused before the old entry goes.
  std::function<void(const Value&, const std::string&)> validate = [&](const Value& v,
                                                                       const std::string& where) {
    switch (v.kind()) {
      case EntryKind::Tensor:
        if (!v.tensor().defined()) throw ValueError(file_->where(where) + ": undefined tensor");
        (void)file_type(v.tensor().scalar_type(), file_->where(where));
        break;
      case EntryKind::NonTensor:
        File::check_non_tensor(v.non_tensor().data(), file_->where(where));
        break;
      case EntryKind::NonTensorStack:
        File::check_non_tensor_stack(v.non_tensor_stack(), file_->where(where));
        break;
      case EntryKind::TensorDict: {
        const Node& n = v.tensordict().node();
        for (const auto& k : n.keys()) {
          check_key(k, *file_, where);
          validate(*n.find(k), join(where, k));
        }
        break;
      }
    }
  };
  validate(value, full);
  if (value.is_tensordict()) {
    const auto* h = dynamic_cast<const H5Node*>(&value.tensordict().node());
    if (h && h->file_ == file_ && h->path_ == full) return;  // the entry itself
  }
  if (entry(key)) {
    children_.erase(std::string(key));
    file_->remove(path_, key);
  }
  write_value(key, value);
}

void H5Node::write_value(std::string_view key, const Value& value) {
  switch (value.kind()) {
    case EntryKind::Tensor:
      file_->write_tensor(path_, key, value.tensor().detach().cpu());
      return;
    case EntryKind::NonTensor:
      file_->write_non_tensor(path_, key, value.non_tensor().data());
      return;
    case EntryKind::TensorDict: {
      const TensorDictBase& td = value.tensordict();
      const std::string path = join(path_, key);
      file_->group(path, /*create=*/true);
      auto node =
          std::make_shared<H5Node>(file_, path, td.batch_size().vec(), device_, lineage_with(path));
      children_[std::string(key)] = node;
      const Node& src = td.node();
      for (const auto& k : src.keys()) node->write_value(k, *src.find(k));
      return;
    }
    case EntryKind::NonTensorStack:
      file_->write_non_tensor_stack(path_, key, value.non_tensor_stack());
      return;
  }
}

void H5Node::write_(std::string_view key, const at::Tensor& value) {
  auto all = RowSelection::all(batch_size_);
  LeafWrite leaf{this, NestedKey(std::string(key)), value};
  write_leaves_(all, std::span<const LeafWrite>(&leaf, 1));
}

void H5Node::write_at_(std::string_view key, const RowSelection& rows, const at::Tensor& value) {
  LeafWrite leaf{this, NestedKey(std::string(key)), value};
  write_leaves_(rows, std::span<const LeafWrite>(&leaf, 1));
}

void H5Node::write_leaves_(const RowSelection& rows, std::span<const LeafWrite> leaves) {
  std::vector<LeafWrite> others;
  Lock l = lock();
  std::vector<const LeafWrite*> mine;
  for (const auto& leaf : leaves) {
    if (same_file(leaf.node, file_))
      mine.push_back(&leaf);
    else
      others.push_back(leaf);
  }
  if (!mine.empty()) {
    file_->check_writable("writing rows of", path_);
    // Resolve every dataset first: a missing or foreign one fails before any
    // byte is written.
    std::vector<Dataset*> datasets;
    datasets.reserve(mine.size());
    for (const LeafWrite* leaf : mine)
      datasets.push_back(&static_cast<H5Node*>(leaf->node)->tensor_dataset(leaf->key()));
    std::optional<RowsPlan> plan;
    if (rows.kind() == RowSelection::Kind::Rows) plan = plan_rows(rows);
    std::vector<std::string> written;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const LeafWrite& leaf = *mine[i];
      try {
        const at::Tensor& v = leaf.value;
        write_selected(*datasets[i], rows, plan ? &*plan : nullptr, v.is_cpu() ? v : v.cpu());
      } catch (const Error& e) {
        if (written.empty()) throw;
        std::vector<std::string> rest;
        for (std::size_t j = i; j < mine.size(); ++j) rest.push_back(mine[j]->path.repr());
        throw StorageError(fmt::format("{} (written: {}; not written: {})", e.what(),
                                       fmt::join(written, ", "), fmt::join(rest, ", ")));
      }
      written.push_back(leaf.path.repr());
    }
    file_->written();
  }
  if (!others.empty()) Node::write_leaves_(rows, others);
}

void H5Node::create_leaf(std::string_view key, at::IntArrayRef shape,
                         const at::TensorOptions& options) {
  Lock l = lock();
  const std::string full = join(path_, key);
  file_->check_writable("creating", full);
  file_->check_structure_writable("creating", full);
  check_key(key, *file_, path_);
  (void)file_type(options.dtype().toScalarType(), file_->where(full));
  if (entry(key)) {
    children_.erase(std::string(key));
    file_->remove(path_, key);
  }
  file_->create_tensor(path_, key, shape, options.dtype().toScalarType());
}

void H5Node::create_leaves(std::span<const LeafCreate> leaves) {
  std::vector<LeafCreate> others;
  Lock l = lock();
  // Refuse bad dtypes and keys before creating anything.
  for (const auto& leaf : leaves) {
    if (const H5Node* n = same_file(leaf.node, file_)) {
      const std::string full = join(n->path_, leaf.key());
      file_->check_writable("creating", full);
      file_->check_structure_writable("creating", full);
      check_key(leaf.key(), *file_, n->path_);
      (void)file_type(leaf.options.dtype().toScalarType(), file_->where(full));
    }
  }
  for (const auto& leaf : leaves) {
    if (same_file(leaf.node, file_))
      static_cast<H5Node*>(leaf.node)->create_leaf(leaf.key(), leaf.shape, leaf.options);
    else
      others.push_back(leaf);
  }
  if (!others.empty()) Node::create_leaves(others);
}

TensorDictBase H5Node::create_nested(std::string_view key, at::IntArrayRef batch_size,
                                     std::optional<at::Device> device) {
  Lock l = lock();
  const std::string full = join(path_, key);
  file_->check_writable("creating group", full);
  file_->check_structure_writable("creating group", full);
  check_key(key, *file_, path_);
  if (entry(key)) {
    children_.erase(std::string(key));
    file_->remove(path_, key);
  }
  file_->group(full, /*create=*/true);
  auto node = std::make_shared<H5Node>(file_, full, batch_size.vec(), device, lineage_with(full));
  children_[std::string(key)] = node;
  return TensorDictBase(node);
}

void H5Node::remove(std::string_view key) {
  Lock l = lock();
  file_->check_structure_writable("removing", join(path_, key));
  children_.erase(std::string(key));
  file_->remove(path_, key);
}

void H5Node::flush() { file_->flush(); }

namespace {

// The walk of the groups under the opened one, at open: infers or checks the
// batch sizes. A group linked from several places (hard links) is walked
// once; a link back to a group being walked (a cycle, which would make every
// recursive walk endless), groups nested past kMaxNestingDepth, and shared
// groups that expand the tree past kMaxSharedExpansion entries more than the
// file holds (a few bytes can link one group 2 x 2 x ... times: a later
// to_tensordict would never end) are FormatErrors naming the link.
class GroupWalk {
 public:
  static constexpr int64_t kMaxSharedExpansion = int64_t{1} << 16;

  GroupWalk(File& file, std::optional<at::IntArrayRef> check) : file_(file), check_(check) {}

  struct Summary {
    std::optional<std::vector<int64_t>> batch;
    int64_t entries = 0;  // entries of the tree below, shared groups counted each time
  };

  Summary visit(const std::string& path, const ObjectId& id) {
    if (auto it = seen_.find(id); it != seen_.end()) return it->second;
    for (std::size_t i = 0; i < lineage_.size(); ++i)
      if (lineage_[i].first == id)
        throw FormatError(file_.where(path) + ": a link back to " + lineage_[i].second +
                          ", a group that contains it (a cycle of links), which no tensordict "
                          "can hold");
    if (lineage_.size() >= static_cast<std::size_t>(kMaxNestingDepth))
      throw FormatError(file_.where(path) + ": groups nested deeper than " +
                        std::to_string(kMaxNestingDepth) + " levels");
    lineage_.emplace_back(id, path);
    Summary out;
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& k : file_.keys(path)) {
      Entry* e = file_.entry(path, k);
      if (!e) continue;
      ++distinct_;
      out.entries = saturated_add(out.entries, 1);
      const std::string full = join(path, k);
      if (e->is_group) {
        Summary sub = visit(full, e->group_id);
        out.entries = saturated_add(out.entries, sub.entries);
        if (sub.batch) shapes.push_back(std::move(*sub.batch));
        continue;
      }
      const Dataset& d = *e->dataset;
      if (d.info.element != Element::Tensor && !d.stack_shape) continue;
      // A NonTensorStack has a shape, as in Python.
      const auto& s = d.stack_shape ? *d.stack_shape : d.shape;
      if (check_ && (s.size() < check_->size() ||
                     !at::IntArrayRef(s).slice(0, check_->size()).equals(*check_)))
        throw ShapeError(file_.where(full) + ": dataset of shape " + format_shape(s) +
                         " does not start with the batch size " + format_shape(*check_));
      shapes.push_back(s);
    }
    lineage_.pop_back();
    if (out.entries - distinct_ > kMaxSharedExpansion)
      throw FormatError(file_.where(path) +
                        ": groups linked from several places (hard links) make this tree of " +
                        "more than " + std::to_string(kMaxSharedExpansion) +
                        " entries beyond the file's own; refused rather than walked");
    // A group without tensors (empty, or non-tensors only) does not constrain
    // its parent and takes the parent's batch size (Python raises IndexError
    // for non-tensors only, and forces [] on the parent for an empty group).
    if (!shapes.empty()) {
      std::vector<int64_t> batch = shapes.front();
      for (const auto& s : shapes) {
        std::size_t i = 0;
        while (i < batch.size() && i < s.size() && batch[i] == s[i]) ++i;
        batch.resize(i);
      }
      if (!check_) file_.inferred[id] = batch;
      out.batch = std::move(batch);
    }
    return seen_.emplace(id, std::move(out)).first->second;
  }

 private:
  static int64_t saturated_add(int64_t a, int64_t b) {
    return a > INT64_MAX - b ? INT64_MAX : a + b;
  }

  File& file_;
  std::optional<at::IntArrayRef> check_;
  std::vector<std::pair<ObjectId, std::string>> lineage_;  // id, path
  std::unordered_map<ObjectId, Summary> seen_;
  int64_t distinct_ = 0;
};

}  // namespace

std::optional<std::vector<int64_t>> H5Node::infer_batch_size(File& file, const std::string& path) {
  return GroupWalk(file, std::nullopt).visit(path, file.group_id(path)).batch;
}

void H5Node::check_batch_size(File& file, const std::string& path, at::IntArrayRef batch_size) {
  (void)GroupWalk(file, batch_size).visit(path, file.group_id(path));
}

}  // namespace tensordict::detail::h5
