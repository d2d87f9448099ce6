#include <tensordict/errors.h>
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/rb/shared_cursor.h>
#include <tensordict/rb/slice_sampler.h>
#include <tensordict/storage/memmap.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/stack.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "rb/checkpoint_io.h"
#include "rb/tensor_args.h"
#include "storage/memmap/mapped_file.h"

namespace tensordict::rb {

namespace {

using at::indexing::Slice;

// One tensor leaf of the storage: its key, element shape and dtype.
struct Leaf {
  NestedKey key;
  std::vector<int64_t> shape;  // without the batch dim
  at::ScalarType dtype;
  at::Tensor data;        // the storage's tensor (direct storages only)
  int64_t row_bytes = 0;  // bytes of one row of `data`
};

// One level of the storage (the root is the empty key) and its entry count:
// a written row must have the same entries, no more.
struct Level {
  NestedKey key;
  std::size_t entries;
};

std::string key_repr(const NestedKey& key) { return key.repr(); }

bool is_memory_level(const TensorDictBase& td) { return td.node().is_memory_node(); }

}  // namespace

struct ReplayBuffer::State {
  std::mutex mutex;
  TensorDictBase storage;  // undefined until the first write of a lazy buffer
  int64_t capacity = 0;
  // An [env, time] storage (batch size [envs, steps], TorchRL's ndim 2):
  // envs > 0, the writer cycles over the `steps` time steps and capacity is
  // envs * steps. envs == 0 for a storage of batch size [capacity].
  int64_t envs = 0;
  int64_t steps = 0;
  std::string lazy_storage;
  // 2: a lazy buffer whose storage is made [env, time] at the first write.
  int64_t lazy_ndim = 1;
  StorageOptions lazy_options;
  std::shared_ptr<Sampler> sampler;
  std::shared_ptr<Writer> writer;
  // The writer when it is exactly a RoundRobinWriter: add and extend then
  // take the rows from its cursor without a virtual call.
  RoundRobinWriter* round_robin = nullptr;
  int64_t last_row = -1;  // the row written last (-1: none), for SliceSampler
  at::Generator generator;
  std::vector<Leaf> leaves;
  std::vector<Level> levels;
  // The storage keeps its tensors in this process (memory, memmap, shared):
  // rows are copied straight into them, without going through index_put_.
  bool direct = false;
  // The cursor shared with other processes (attach()); null otherwise.
  std::shared_ptr<SharedCursor> shared;

  int64_t size() const {
    const int64_t written = shared        ? shared->committed()
                            : round_robin ? round_robin->position().write_count
                                          : writer->state().write_count;
    if (envs) return std::min(written, steps) * envs;  // whole time steps
    return std::min(written, capacity);
  }

  // The rows the writer cycles over: time steps of an [env, time] storage.
  int64_t writer_capacity() const { return envs ? steps : capacity; }

  // The batch dims a written batch (lead 1) or row (lead 0) has.
  int64_t data_dims(int64_t lead) const { return envs ? lead + 1 : lead; }

  // An attached buffer's writer state, from the shared counters (tickets
  // count the time steps of an [env, time] buffer).
  WriterState shared_state() const {
    const int64_t committed = shared->committed();
    return {committed % writer_capacity(), committed};
  }

  // sample() of an attached buffer: the rows committed when it starts; drawn
  // again when a write of another process reached one of them meanwhile.
  TensorDict sample_shared(int64_t batch_size, SampleInfo& info);
  // Draws `batch_size` rows (elements of an [env, time] buffer) of the
  // `filled` first ones, `newest` the row (time step) written last, and
  // copies them out.
  TensorDict draw(int64_t batch_size, int64_t filled, int64_t newest, SampleInfo& info);

  // The row a round-robin writer at `state` wrote last; -1 for other writers
  // (they do not say) and before any write.
  int64_t newest_row(const WriterState& state) const {
    const int64_t cycle = writer_capacity();
    return round_robin && state.write_count > 0 ? (state.cursor + cycle - 1) % cycle : -1;
  }

  // The [env, time] pairs (int64 [n, 2]) of `flat` (int64 [n]): positions in
  // TorchRL's time-major order, time = k / envs and env = k % envs, the
  // order in which samplers number the elements of an [env, time] buffer.
  at::Tensor unravel(const at::Tensor& flat) const {
    return at::stack({flat.remainder(envs), flat.div(envs, "floor")}, 1);
  }
  // The time-major positions (int64 [n]) of [env, time] pairs (integer
  // [n, 2]), checked: IndexError for a pair outside the storage.
  at::Tensor ravel(const at::Tensor& pairs, const std::string& where) const {
    if (pairs.dim() != 2 || pairs.size(1) != 2)
      throw ShapeError(where + ": an [env, time] buffer takes [n, 2] (env, time) indices, got " +
                       c10::str(pairs.sizes()));
    const at::Tensor env = detail::checked_rows(pairs.select(1, 0), envs, where + " (env)");
    const at::Tensor time = detail::checked_rows(pairs.select(1, 1), steps, where + " (time)");
    return time.mul(envs).add_(env);
  }

  // Tells the sampler that row r (time step r of every env) was written. A
  // sampler error here would leave the row written but unknown to it: the
  // samplers only fail on rows out of range, which the writer never gives.
  void on_write_step(int64_t r) const {
    if (envs)
      sampler->on_write(at::arange(r * envs, (r + 1) * envs, at::kLong));
    else
      sampler->on_write_row(r);
  }

  // Copies one checked row (`src`, its leaves) into row r of the storage.
  void write_row(int64_t r, const TensorDictBase& row, const std::vector<at::Tensor>& src);
  // extend() of an [env, time] buffer: the batch's n steps of every env go
  // to the next n time steps, round robin; returns the [env, time] pairs.
  at::Tensor extend_steps(const TensorDictBase& batch, int64_t n,
                          const std::vector<at::Tensor>& src);
  // extend() through a writer other than RoundRobinWriter: the rows it chose.
  at::Tensor extend_chosen(const TensorDictBase& batch, const std::vector<at::Tensor>& src);

  // UnsupportedError or ValueError when `given` cannot sample this buffer:
  // an [env, time] one (`env_time`) takes only the samplers that know how
  // its elements are numbered; when the buffer's size is known (`sized`: not
  // a lazy [env, time] buffer before its first write) a PrioritizedSampler
  // must hold `elements` priorities and a slice fit in `cycle` rows (time
  // steps).
  static void check_sampler(const Sampler& given, bool env_time, bool sized, int64_t elements,
                            int64_t cycle) {
    // The samplers that know the time-major numbering of an [env, time]
    // buffer's elements (a SliceSampler reads StorageView::envs).
    const std::type_info& kind = typeid(given);
    if (env_time && kind != typeid(RandomSampler) && kind != typeid(SamplerWithoutReplacement) &&
        kind != typeid(PrioritizedSampler) && kind != typeid(SliceSampler) &&
        kind != typeid(SliceSamplerWithoutReplacement))
      throw UnsupportedError("ReplayBuffer: a " + given.name() +
                             " over an [env, time] storage is not built yet; such a buffer "
                             "samples with RandomSampler, SamplerWithoutReplacement, "
                             "PrioritizedSampler or a SliceSampler");
    if (!sized) return;
    if (const auto* p = dynamic_cast<const PrioritizedSampler*>(&given);
        p && p->capacity() != elements)
      throw ValueError("ReplayBuffer: the PrioritizedSampler holds " +
                       std::to_string(p->capacity()) + " rows, the buffer " +
                       std::to_string(elements) +
                       (env_time ? " (envs * steps, one priority per element)" : ""));
    // A slice runs along time: in an [env, time] buffer within one env's steps.
    if (const auto* slices = dynamic_cast<const SliceSampler*>(&given);
        slices && slices->options().slice_len > cycle)
      throw ValueError("ReplayBuffer: the SliceSampler's slice_len " +
                       std::to_string(slices->options().slice_len) + " exceeds the " +
                       (env_time ? "time steps per env " : "capacity ") + std::to_string(cycle) +
                       ": no slice would ever fit");
  }

  // Takes `given` (a RandomSampler when null), checked against the capacity.
  void set_sampler(std::shared_ptr<Sampler> given) {
    if (!given) given = std::make_shared<RandomSampler>();
    const bool lazy_env = lazy_ndim == 2 && !storage.defined();
    check_sampler(*given, envs || lazy_env, !lazy_env, capacity, writer_capacity());
    sampler = std::move(given);
  }

  void set_writer(std::shared_ptr<Writer> w) {
    if ((envs || lazy_ndim == 2) && w && typeid(*w) != typeid(RoundRobinWriter))
      throw UnsupportedError("ReplayBuffer: a " + w->name() +
                             " over an [env, time] storage (TorchRL refuses it too); such a "
                             "buffer writes with a RoundRobinWriter");
    writer = w ? std::move(w) : std::make_shared<RoundRobinWriter>();
    round_robin = typeid(*writer) == typeid(RoundRobinWriter)
                      ? static_cast<RoundRobinWriter*>(writer.get())
                      : nullptr;
  }

  // Reads the storage's structure; the checks of the constructor.
  void adopt(TensorDictBase td) {
    if (!td.defined()) throw ValueError("ReplayBuffer: the storage is an undefined tensordict");
    const int64_t dims = td.batch_dims();
    if (dims < 1 || dims > 2 || td.batch_size()[0] <= 0 || td.batch_size()[dims - 1] <= 0)
      throw ShapeError(
          "ReplayBuffer: the storage must have batch size [capacity] or [envs, steps] (an "
          "[env, time] storage), each > 0, got " +
          c10::str(td.batch_size()));
    std::vector<Leaf> found;
    std::vector<Level> levels{{NestedKey(), td.num_keys()}};
    bool direct = is_memory_level(td);
    for (const auto& [key, value] : td.items(/*include_nested=*/true, /*leaves_only=*/false)) {
      if (value.is_tensordict()) {
        levels.push_back({key, value.tensordict().num_keys()});
        direct = direct && is_memory_level(value.tensordict());
      } else if (value.is_tensor()) {
        const at::Tensor& t = value.tensor();
        Leaf leaf{key, std::vector<int64_t>(t.sizes().begin() + dims, t.sizes().end()),
                  t.scalar_type(), t, 0};
        direct = direct && t.device().is_cpu() && t.is_contiguous();
        const int64_t rows = dims == 2 ? t.size(0) * t.size(1) : t.size(0);
        leaf.row_bytes = rows > 0 ? static_cast<int64_t>(t.nbytes()) / rows : 0;
        found.push_back(std::move(leaf));
      } else {
        throw TypeError("ReplayBuffer: the storage entry " + key_repr(key) +
                        " is not a tensor; a replay buffer stores tensors only");
      }
    }
    if (found.empty()) throw ValueError("ReplayBuffer: the storage has no tensor to store rows in");
    if (!direct)
      for (Leaf& leaf : found) leaf.data = at::Tensor();  // read through the storage instead
    envs = dims == 2 ? td.batch_size()[0] : 0;
    steps = dims == 2 ? td.batch_size()[1] : 0;
    capacity = dims == 2 ? envs * steps : td.batch_size()[0];
    storage = std::move(td);
    leaves = std::move(found);
    this->levels = std::move(levels);
    this->direct = direct;
  }

  // Names the first key where `data`'s level `level` and the storage's differ.
  [[noreturn]] void throw_key_mismatch(const char* where, const TensorDictBase& data,
                                       const Level& level) const {
    const TensorDictBase mine = level.key.empty() ? storage : storage.get_tensordict(level.key);
    const TensorDictBase theirs = level.key.empty() ? data : data.get_tensordict(level.key);
    for (const NestedKey& k : theirs.keys())
      if (!mine.contains(k))
        throw KeyError(std::string(where) + ": key " + key_repr(level.key + k) +
                       " is not in the storage (its keys are fixed when it is made)");
    for (const NestedKey& k : mine.keys())
      if (!theirs.contains(k))
        throw KeyError(std::string(where) + ": the data has no key " + key_repr(level.key + k) +
                       ", which the storage has");
    throw KeyError(std::string(where) + ": the keys under " + key_repr(level.key) +
                   " differ from the storage's");
  }

  // The data's tensor for each leaf, checked against the storage's layout:
  // same keys, element shapes and dtypes; `lead` the data's batch dims
  // (0 for a row, 1 for a batch of `n`), after the env dim of an [env, time]
  // storage.
  void check(const char* where, const TensorDictBase& data, int64_t lead, int64_t n,
             std::vector<at::Tensor>& out) const {
    int64_t prefix[2];
    int64_t prefix_dims = 0;
    if (envs) prefix[prefix_dims++] = envs;
    if (lead) prefix[prefix_dims++] = n;
    for (const Level& level : levels) {
      const std::size_t count =
          level.key.empty() ? data.num_keys() : data.get_tensordict(level.key).num_keys();
      if (count != level.entries) throw_key_mismatch(where, data, level);
    }
    out.clear();
    out.reserve(leaves.size());
    for (const Leaf& leaf : leaves) {
      at::Tensor t = data.get(leaf.key);
      const int64_t dims = static_cast<int64_t>(leaf.shape.size());
      bool shape_ok = t.dim() == prefix_dims + dims;
      for (int64_t d = 0; shape_ok && d < prefix_dims; ++d) shape_ok = t.size(d) == prefix[d];
      for (int64_t d = 0; shape_ok && d < dims; ++d)
        shape_ok = t.size(prefix_dims + d) == leaf.shape[d];
      if (!shape_ok) {
        std::vector<int64_t> expected(leaf.shape);
        expected.insert(expected.begin(), prefix, prefix + prefix_dims);
        throw ShapeError(std::string(where) + ": " + key_repr(leaf.key) + " has shape " +
                         c10::str(t.sizes()) + ", the storage expects " +
                         c10::str(at::IntArrayRef(expected)));
      }
      if (t.scalar_type() != leaf.dtype)
        throw TypeError(std::string(where) + ": " + key_repr(leaf.key) + " is " +
                        std::string(c10::toString(t.scalar_type())) + ", the storage holds " +
                        std::string(c10::toString(leaf.dtype)));
      out.push_back(std::move(t));
    }
  }

  // Makes the storage of a lazy buffer from the first data written.
  void allocate_like(const TensorDictBase& data, int64_t lead) {
    adopt(make_like(data, lead, {capacity}));
  }

  // Makes the storage of a lazy [env, time] buffer from its first write,
  // `data` of batch size [envs, t] (lead 1) or [envs] (lead 0): [envs,
  // ceil(capacity / envs)] as TorchRL's lazy ndim=2 storages; the sampler is
  // checked against it first.
  void allocate_env_time(const char* where, const TensorDictBase& data, int64_t lead) {
    if (data.batch_dims() != lead + 1 || data.batch_size()[0] <= 0)
      throw ShapeError(
          std::string(where) +
          ": the [env, time] storage (ndim 2) is made at the first write from " +
          (lead ? "a batch of batch size [envs, t]" : "one step of every env, [envs]") +
          ", got batch size " + c10::str(data.batch_size()));
    const int64_t count = data.batch_size()[0];
    const int64_t time_steps = (capacity + count - 1) / count;
    check_sampler(*sampler, true, true, count * time_steps, time_steps);
    adopt(make_like(data, lead + 1, {count, time_steps}));
  }

  // A new storage of batch size `batch` shaped like `data`'s rows (after its
  // `lead` batch dims), in the storage the lazy buffer was given.
  TensorDictBase make_like(const TensorDictBase& data, int64_t lead,
                           const std::vector<int64_t>& batch) const {
    Schema schema;
    for (const auto& [key, value] : data.items(/*include_nested=*/true, /*leaves_only=*/false)) {
      if (value.is_tensordict()) continue;
      if (!value.is_tensor())
        throw TypeError("ReplayBuffer: entry " + key_repr(key) +
                        " is not a tensor; a replay buffer stores tensors only");
      const at::Tensor& t = value.tensor();
      if (t.dim() < lead)
        throw ShapeError("ReplayBuffer: entry " + key_repr(key) + " has shape " +
                         c10::str(t.sizes()) + ", shorter than the batch");
      schema.add(key, FieldSpec{std::vector<int64_t>(t.sizes().begin() + lead, t.sizes().end()),
                                t.scalar_type()});
    }
    if (schema.empty()) throw ValueError("ReplayBuffer: the data written has no tensor");
    return from_schema(schema, batch, lazy_storage, lazy_options);
  }

  // Every slot of the storage as a TensorDict (the storage's own tensors
  // when they are in this process), for a checkpoint.
  // An [env, time] storage is saved time-major, [steps, envs], TorchRL's
  // layout (its writer cycles over dim 0).
  TensorDict all_rows() const {
    TensorDict out(envs ? std::vector<int64_t>{steps, envs} : std::vector<int64_t>{capacity});
    for (const Leaf& leaf : leaves) {
      at::Tensor data = direct ? leaf.data : storage.get(leaf.key);
      out.set(leaf.key, envs ? data.transpose(0, 1).contiguous() : data);
    }
    return out;
  }

  // The rows of a checkpoint of an [env, time] buffer ([steps, envs]) in
  // this buffer's [envs, steps] layout.
  static TensorDict env_major(const TensorDictBase& rows) {
    TensorDict out(std::vector<int64_t>{rows.batch_size()[1], rows.batch_size()[0]});
    for (const auto& [key, value] : rows.items(/*include_nested=*/true, /*leaves_only=*/true))
      out.set(key, value.tensor().transpose(0, 1));
    return out;
  }

  // Copies `rows` (batch [capacity], the storage's layout, checked) into
  // every slot of `target`.
  static void copy_all(TensorDictBase& target, const TensorDictBase& rows, int64_t capacity) {
    target.index_put_({Slice(0, capacity)}, rows);
  }

  // The rows `index` (int64, checked) of a direct storage, copied leaf by
  // leaf with one load and store per row: for the small rows of RL
  // transitions this is cheaper than an index_select per leaf, whose fixed
  // cost is most of the time at 256 rows. Rows of kLargeRowBytes or more
  // (image frames) go through index_select, which copies on several threads:
  // 2x faster for 256 frames of 84x84x3 bytes on 2 cores.
  TensorDict gather(const at::Tensor& index) const {
    const int64_t n = index.numel();
    const int64_t* rows = index.data_ptr<int64_t>();
    TensorDict out(std::vector<int64_t>{n});
    for (const Leaf& leaf : leaves) {
      std::vector<int64_t> shape{n};
      shape.insert(shape.end(), leaf.shape.begin(), leaf.shape.end());
      at::Tensor dst = at::empty(shape, leaf.data.options());
      const char* from = static_cast<const char*>(leaf.data.data_ptr());
      char* to = static_cast<char*>(dst.data_ptr());
      switch (leaf.row_bytes) {
        case 1:
          copy_rows<uint8_t>(to, from, rows, n);
          break;
        case 2:
          copy_rows<uint16_t>(to, from, rows, n);
          break;
        case 4:
          copy_rows<uint32_t>(to, from, rows, n);
          break;
        case 8:
          copy_rows<uint64_t>(to, from, rows, n);
          break;
        case 16:
          copy_rows<Bytes16>(to, from, rows, n);
          break;
        default:
          if (leaf.row_bytes >= kLargeRowBytes) {
            at::index_select_out(dst, leaf.data, 0, index);
            break;
          }
          for (int64_t b = 0; b < n; ++b)
            std::memcpy(to + b * leaf.row_bytes, from + rows[b] * leaf.row_bytes,
                        static_cast<size_t>(leaf.row_bytes));
      }
      out.set(leaf.key, dst);
    }
    return out;
  }

  static constexpr int64_t kLargeRowBytes = 4096;

  struct Bytes16 {
    uint64_t low, high;
  };
  template <class Word>
  static void copy_rows(char* to, const char* from, const int64_t* rows, int64_t n) {
    for (int64_t b = 0; b < n; ++b)
      std::memcpy(to + b * sizeof(Word), from + rows[b] * sizeof(Word), sizeof(Word));
  }

  void prepare(const char* where, const TensorDictBase& data, int64_t lead) {
    if (!data.defined()) throw ValueError(std::string(where) + ": the data is undefined");
    if (lazy_ndim == 2 && !storage.defined()) allocate_env_time(where, data, lead);
    if (envs && (data.batch_dims() != lead + 1 || data.batch_size()[0] != envs))
      throw ShapeError(std::string(where) + ": the storage is [env, time] with " +
                       std::to_string(envs) + " envs: expected " +
                       (lead ? "a batch of batch size [" + std::to_string(envs) + ", t]"
                             : "one step of every env, batch size [" + std::to_string(envs) + "]") +
                       ", got batch size " + c10::str(data.batch_size()));
    if (!envs && data.batch_dims() != lead)
      throw ShapeError(std::string(where) +
                       (lead ? ": expected a batch (batch size [n]), got "
                             : ": expected one row (batch size []), got ") +
                       "batch size " + c10::str(data.batch_size()));
    if (!storage.defined()) allocate_like(data, lead);
  }
};

ReplayBuffer::ReplayBuffer(TensorDictBase storage, std::shared_ptr<Sampler> sampler,
                           std::shared_ptr<Writer> writer)
    : state_(std::make_unique<State>()) {
  state_->adopt(std::move(storage));
  state_->set_writer(std::move(writer));
  state_->set_sampler(std::move(sampler));
  state_->generator = at::make_generator<at::CPUGeneratorImpl>(std::random_device{}());
}

ReplayBuffer::ReplayBuffer(int64_t capacity, std::shared_ptr<Sampler> sampler, std::string storage,
                           StorageOptions options, std::shared_ptr<Writer> writer, int64_t ndim)
    : state_(std::make_unique<State>()) {
  if (ndim != 1 && ndim != 2)
    throw ValueError(
        "ReplayBuffer: ndim must be 1 (a storage of batch size [capacity]) or 2 (an "
        "[env, time] storage), got " +
        std::to_string(ndim));
  state_->lazy_ndim = ndim;
  state_->set_writer(std::move(writer));
  if (capacity <= 0)
    throw ValueError("ReplayBuffer: the capacity must be positive, got " +
                     std::to_string(capacity));
  state_->capacity = capacity;
  state_->lazy_storage = std::move(storage);
  state_->lazy_options = std::move(options);
  state_->set_sampler(std::move(sampler));
  state_->generator = at::make_generator<at::CPUGeneratorImpl>(std::random_device{}());
}

ReplayBuffer ReplayBuffer::attach(TensorDictBase storage, std::shared_ptr<SharedCursor> cursor,
                                  std::shared_ptr<Sampler> sampler) {
  if (!cursor) throw ValueError("ReplayBuffer::attach: the shared cursor is null");
  if (sampler && typeid(*sampler) != typeid(RandomSampler) &&
      typeid(*sampler) != typeid(SamplerWithoutReplacement))
    throw UnsupportedError("ReplayBuffer::attach: a " + sampler->name() +
                           " keeps per-row state that the writes of other processes would not "
                           "update; an attached buffer samples with RandomSampler or "
                           "SamplerWithoutReplacement");
  ReplayBuffer buffer(std::move(storage), std::move(sampler));
  // The tickets of an [env, time] buffer count time steps: an extend of
  // [envs, t] takes t of them.
  const State& s = *buffer.state_;
  if (cursor->capacity() != s.writer_capacity())
    throw ValueError("ReplayBuffer::attach: the cursor at " + cursor->where() + " cycles over " +
                     std::to_string(cursor->capacity()) + " rows, the storage holds " +
                     std::to_string(s.writer_capacity()) +
                     (s.envs ? " time steps (of " + std::to_string(s.envs) + " envs)" : ""));
  buffer.state_->shared = std::move(cursor);
  return buffer;
}

std::shared_ptr<SharedCursor> ReplayBuffer::shared_cursor() const { return state_->shared; }

TensorDict ReplayBuffer::State::sample_shared(int64_t batch_size, SampleInfo& info) {
  // A seqlock on the cursor: rows (time steps) whose tickets were reserved
  // after `committed` was read may have been overwritten while this sample
  // read them. Bounded in time so that writers wrapping faster than a
  // sample reads are an error, not a hang.
  const int64_t cycle = writer_capacity();
  const auto deadline = std::chrono::steady_clock::now() + shared->commit_timeout();
  for (;;) {
    const int64_t committed = shared->committed();
    const int64_t filled = std::min(committed, cycle);
    if (filled == 0) throw ValueError("ReplayBuffer::sample: the buffer is empty");
    TensorDict out = draw(batch_size, envs ? filled * envs : filled, (committed - 1) % cycle, info);
    std::atomic_thread_fence(std::memory_order_acquire);
    // Tickets in [from, reserved) overwrote rows that were already filled.
    const int64_t from = std::max(committed, cycle);
    const int64_t overwritten = shared->reserved() - from;
    if (overwritten <= 0) return out;
    if (overwritten < cycle) {
      const int64_t lo = from % cycle, hi = (from + overwritten) % cycle;
      const at::Tensor index =
          (envs ? info.index.select(1, 1) : info.index).to(at::kLong).contiguous();
      const int64_t* rows = index.data_ptr<int64_t>();
      bool clean = true;
      for (int64_t k = 0; clean && k < index.numel(); ++k)
        clean = lo < hi ? (rows[k] < lo || rows[k] >= hi) : (rows[k] < lo && rows[k] >= hi);
      if (clean) return out;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw TimeoutError("ReplayBuffer::sample: other processes overwrote the sampled rows at " +
                         shared->where() + " faster than a sample could read them");
  }
}

TensorDict ReplayBuffer::State::draw(int64_t batch_size, int64_t filled, int64_t newest,
                                     SampleInfo& info) {
  const auto sample_where = [this] { return sampler->name() + "::sample"; };
  if (envs) {
    // The sampler numbers the elements time-major, as TorchRL's samplers do.
    const StorageView view{&storage, filled, capacity, newest, envs};
    info = sampler->sample_from(view, batch_size, &generator);
    info.index = unravel(detail::checked_rows(info.index, filled, sample_where));
    const at::Tensor env = info.index.select(1, 0), time = info.index.select(1, 1);
    if (direct) {
      TensorDict out(std::vector<int64_t>{info.index.size(0)});
      for (const Leaf& leaf : leaves) out.set(leaf.key, leaf.data.index({env, time}));
      return out;
    }
    TensorDictBase rows = storage.index({env, time});
    return rows.is<TensorDict>() ? rows.as<TensorDict>() : rows.to_tensordict();
  }
  const StorageView view{&storage, filled, capacity, newest};
  info = sampler->sample_from(view, batch_size, &generator);
  if (direct) {
    // The sampler may be the user's: its rows are checked before they are
    // used as raw offsets.
    info.index = detail::checked_rows(info.index, filled, sample_where);
    return gather(info.index);
  }
  TensorDictBase rows = storage.index({info.index});
  return rows.is<TensorDict>() ? rows.as<TensorDict>() : rows.to_tensordict();
}

ReplayBuffer::~ReplayBuffer() = default;
ReplayBuffer::ReplayBuffer(ReplayBuffer&&) noexcept = default;
ReplayBuffer& ReplayBuffer::operator=(ReplayBuffer&&) noexcept = default;

int64_t ReplayBuffer::add(const TensorDictBase& row) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.prepare("ReplayBuffer::add", row, 0);
  thread_local std::vector<at::Tensor> src;
  s.check("ReplayBuffer::add", row, 0, 0, src);
  if (s.shared) {
    // A failed copy leaves the reservation uncommitted: the failure rule of
    // a writer that dies between reserve and commit (shared_cursor.h).
    const Reservation reservation = s.shared->reserve(1);
    const int64_t r = reservation.first % s.writer_capacity();
    s.write_row(r, row, src);
    src.clear();
    s.shared->commit(reservation);
    s.last_row = r;
    s.on_write_step(r);
    return r;
  }
  const int64_t r = s.round_robin ? s.round_robin->position().cursor
                                  : s.writer->write_row(row, s.writer_capacity());
  if (r < 0) {  // not kept (a TensorDictMaxValueWriter's choice)
    src.clear();
    return -1;
  }
  try {
    s.write_row(r, row, src);
  } catch (...) {
    src.clear();
    if (!s.round_robin) s.writer->undo();
    throw;
  }
  src.clear();  // do not keep the caller's tensors alive
  if (s.round_robin) s.round_robin->next_row(s.writer_capacity());
  s.last_row = r;
  s.on_write_step(r);
  return r;
}

void ReplayBuffer::State::write_row(int64_t r, const TensorDictBase& row,
                                    const std::vector<at::Tensor>& src) {
  State& s = *this;
  if (s.envs) {  // row r is time step r of every env
    if (s.direct)
      for (size_t k = 0; k < src.size(); ++k) s.leaves[k].data.select(1, r).copy_(src[k]);
    else
      s.storage.index_put_({Slice(), r}, row);
    return;
  }
  if (s.direct) {
    for (size_t k = 0; k < src.size(); ++k) {
      const Leaf& leaf = s.leaves[k];
      const at::Tensor& t = src[k];
      if (t.is_contiguous() && t.device().is_cpu())
        std::memcpy(static_cast<char*>(leaf.data.data_ptr()) + r * leaf.row_bytes, t.data_ptr(),
                    static_cast<size_t>(leaf.row_bytes));
      else
        leaf.data.select(0, r).copy_(t);
    }
  } else {
    s.storage.index_put_({r}, row);
  }
}

at::Tensor ReplayBuffer::extend(const TensorDictBase& batch) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.prepare("ReplayBuffer::extend", batch, 1);
  const int64_t n = batch.batch_size()[s.envs ? 1 : 0];
  thread_local std::vector<at::Tensor> src;
  s.check("ReplayBuffer::extend", batch, 1, n, src);
  if (n == 0) return s.envs ? at::empty({0, 2}, at::kLong) : at::empty({0}, at::kLong);
  if (s.envs) {
    at::Tensor pairs = s.extend_steps(batch, n, src);
    src.clear();
    return pairs;
  }
  if (!s.round_robin) {
    at::Tensor rows = s.extend_chosen(batch, src);
    src.clear();
    return rows;
  }
  const int64_t kept = std::min(n, s.capacity);
  const int64_t skip = n - kept;  // items overwritten within this same extend
  RoundRobinWriter writer = *s.round_robin;
  Reservation reservation;
  at::Tensor rows;
  int64_t first = 0;
  if (s.shared) {
    // Tickets from the shared cursor (a failed copy leaves them uncommitted:
    // the failure rule of shared_cursor.h).
    reservation = s.shared->reserve(n);
    const int64_t start = reservation.first + skip;
    rows = at::arange(start, reservation.first + n, at::kLong).remainder_(s.capacity);
    first = start % s.capacity;
  } else {
    rows = writer.next_rows(n, s.capacity);
    if (skip) rows = rows.narrow(0, skip, kept);
    first = (s.round_robin->position().cursor + skip) % s.capacity;
  }
  const int64_t head = std::min(kept, s.capacity - first);  // rows before the wrap
  if (s.direct) {
    for (size_t k = 0; k < src.size(); ++k) {
      const Leaf& leaf = s.leaves[k];
      const at::Tensor& t = src[k];
      if (t.is_contiguous() && t.device().is_cpu()) {
        const char* from = static_cast<const char*>(t.data_ptr()) + skip * leaf.row_bytes;
        char* to = static_cast<char*>(leaf.data.data_ptr());
        std::memcpy(to + first * leaf.row_bytes, from, static_cast<size_t>(head * leaf.row_bytes));
        std::memcpy(to, from + head * leaf.row_bytes,
                    static_cast<size_t>((kept - head) * leaf.row_bytes));
      } else {
        leaf.data.narrow(0, first, head).copy_(t.narrow(0, skip, head));
        if (head < kept)
          leaf.data.narrow(0, 0, kept - head).copy_(t.narrow(0, skip + head, kept - head));
      }
    }
  } else {
    const TensorDictBase items = skip ? batch.index({Slice(skip, n)}) : batch;
    // One index_put_: a slice when the rows do not wrap, else the row list.
    if (head == kept)
      s.storage.index_put_({Slice(first, first + kept)}, items);
    else
      s.storage.index_put_({rows}, items);
  }
  src.clear();
  if (s.shared) {
    s.shared->commit(reservation);
    s.last_row = (reservation.first + n - 1) % s.capacity;
  } else {
    *s.round_robin = writer;
    s.last_row = (writer.state().cursor + s.capacity - 1) % s.capacity;
  }
  s.sampler->on_write(rows);
  return rows;
}

at::Tensor ReplayBuffer::State::extend_steps(const TensorDictBase& batch, int64_t n,
                                             const std::vector<at::Tensor>& src) {
  const int64_t kept = std::min(n, steps);
  const int64_t skip = n - kept;  // steps overwritten within this same extend
  RoundRobinWriter next = *round_robin;
  Reservation reservation;
  at::Tensor times;
  int64_t first = 0;
  if (shared) {
    // n tickets, one per time step, written to steps ticket % steps (a
    // failed copy leaves them uncommitted: the failure rule of shared_cursor.h).
    reservation = shared->reserve(n);
    times =
        at::arange(reservation.first + skip, reservation.first + n, at::kLong).remainder_(steps);
    first = (reservation.first + skip) % steps;
  } else {
    times = next.next_rows(n, steps);
    if (skip) times = times.narrow(0, skip, kept);
    first = (round_robin->position().cursor + skip) % steps;
  }
  const int64_t head = std::min(kept, steps - first);  // steps before the wrap
  if (direct) {
    for (size_t k = 0; k < src.size(); ++k) {
      const at::Tensor& data = leaves[k].data;
      data.narrow(1, first, head).copy_(src[k].narrow(1, skip, head));
      if (head < kept)
        data.narrow(1, 0, kept - head).copy_(src[k].narrow(1, skip + head, kept - head));
    }
  } else {
    storage.index_put_({Slice(), Slice(first, first + head)},
                       batch.index({Slice(), Slice(skip, skip + head)}));
    if (head < kept)
      storage.index_put_({Slice(), Slice(0, kept - head)},
                         batch.index({Slice(), Slice(skip + head, n)}));
  }
  if (shared) {
    shared->commit(reservation);
    last_row = (reservation.first + n - 1) % steps;
  } else {
    *round_robin = next;
    last_row = (next.state().cursor + steps - 1) % steps;
  }
  // Env by env, the order of batch.flatten(0, 1)'s kept items.
  const at::Tensor env = at::arange(envs, at::kLong).repeat_interleave(kept);
  const at::Tensor time = times.repeat({envs});
  sampler->on_write(time.mul(envs).add_(env));
  return at::stack({env, time}, 1);
}

at::Tensor ReplayBuffer::State::extend_chosen(const TensorDictBase& batch,
                                              const std::vector<at::Tensor>& src) {
  at::Tensor item_rows = writer->write_rows(batch, capacity);  // -1: not kept
  // The items kept and their rows, read in one pass (a writer that keeps few
  // items, the max-value one on a full buffer, spends most of a write here).
  const at::Tensor given = item_rows.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* row_of = given.data_ptr<int64_t>();
  std::vector<int64_t> kept_items, kept_rows;
  for (int64_t k = 0; k < given.numel(); ++k)
    if (row_of[k] >= 0) {
      kept_items.push_back(k);
      kept_rows.push_back(row_of[k]);
    }
  if (kept_rows.empty()) return item_rows;
  const auto count = static_cast<int64_t>(kept_rows.size());
  const at::Tensor items = at::empty({count}, at::kLong);
  const at::Tensor rows = at::empty({count}, at::kLong);
  std::memcpy(items.data_ptr<int64_t>(), kept_items.data(), kept_items.size() * sizeof(int64_t));
  std::memcpy(rows.data_ptr<int64_t>(), kept_rows.data(), kept_rows.size() * sizeof(int64_t));
  try {
    if (direct) {
      // Row by row: the writer keeps a few scattered items (a max-value
      // writer on a full buffer), where two index calls per leaf cost more.
      for (size_t k = 0; k < src.size(); ++k) {
        const Leaf& leaf = leaves[k];
        const at::Tensor& t = src[k];
        if (!t.is_contiguous() || !t.device().is_cpu()) {
          leaf.data.index_copy_(0, rows, t.index_select(0, items));
          continue;
        }
        const char* from = static_cast<const char*>(t.data_ptr());
        char* to = static_cast<char*>(leaf.data.data_ptr());
        for (size_t i = 0; i < kept_rows.size(); ++i)
          std::memcpy(to + kept_rows[i] * leaf.row_bytes, from + kept_items[i] * leaf.row_bytes,
                      static_cast<size_t>(leaf.row_bytes));
      }
    } else {
      storage.index_put_({rows}, batch.index({items}));
    }
  } catch (...) {
    writer->undo();
    throw;
  }
  last_row = kept_rows.back();
  sampler->on_write(rows);
  return item_rows;
}

TensorDict ReplayBuffer::sample(int64_t batch_size) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (batch_size <= 0)
    throw ValueError("ReplayBuffer::sample: the batch size must be positive, got " +
                     std::to_string(batch_size));
  SampleInfo info;
  TensorDict out;
  if (s.shared) {
    out = s.sample_shared(batch_size, info);
  } else {
    const int64_t filled = s.size();
    if (filled == 0) throw ValueError("ReplayBuffer::sample: the buffer is empty");
    out = s.draw(batch_size, filled, s.last_row, info);
  }
  for (auto& [key, value] : info.entries) out.set(key, std::move(value));
  out.set("index", info.index);
  if (info.weight.defined()) out.set("priority_weight", info.weight);
  return out;
}

void ReplayBuffer::update_priority(const at::Tensor& index, const at::Tensor& priority) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  const at::Tensor rows =
      s.envs ? s.ravel(index, "ReplayBuffer::update_priority")
             : detail::checked_rows(index, s.capacity, "ReplayBuffer::update_priority");
  detail::checked_values(priority, rows.numel(), "ReplayBuffer::update_priority");
  s.sampler->update_priority(rows, priority);
}

void ReplayBuffer::update_tensordict_priority(const TensorDictBase& sampled,
                                              const NestedKey& priority_key) {
  const at::Tensor index = sampled.get("index");
  at::Tensor priority = sampled.get(priority_key);
  if (priority.dim() > 1) priority = priority.reshape({priority.size(0), -1}).amax(1);
  update_priority(index, priority);
}

int64_t ReplayBuffer::size() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->size();
}

int64_t ReplayBuffer::capacity() const { return state_->capacity; }

TensorDictBase ReplayBuffer::storage() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->storage;
}

WriterState ReplayBuffer::writer_state() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->shared ? state_->shared_state() : state_->writer->state();
}

void ReplayBuffer::load_writer_state(const WriterState& state) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->writer->load_state(state, state_->writer_capacity());
  if (state_->shared) {
    const int64_t cycle = state_->writer_capacity();
    if (state.cursor != state.write_count % cycle)
      throw ValueError(
          "ReplayBuffer::load_writer_state: an attached buffer's cursor is its "
          "write_count % " +
          std::string(state_->envs ? "steps" : "capacity") + " (" +
          std::to_string(state.write_count % cycle) + "), got " + std::to_string(state.cursor));
    state_->shared->reset(state.write_count);
  }
  state_->last_row = state_->newest_row(state);
}

std::shared_ptr<Writer> ReplayBuffer::writer() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->writer;
}

std::shared_ptr<Sampler> ReplayBuffer::sampler() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->sampler;
}

void ReplayBuffer::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::lock_guard<std::mutex> generator_lock(state_->generator.mutex());
  state_->generator.set_current_seed(seed);
}

void ReplayBuffer::empty() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->shared) state_->shared->reset(0);
  state_->writer->reset();
  state_->last_row = -1;
  state_->sampler->on_empty();
}

// ---- checkpoints (TorchRL's dumps/loads layout) ----------------------------------------

namespace fs = std::filesystem;
using detail::field;
using detail::format_error;
using detail::integer_value;
using detail::ojson;

void ReplayBuffer::dumps(const fs::path& dir) const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.storage.defined())
    throw ValueError(
        "ReplayBuffer::dumps: nothing to save, the buffer has never been written (its storage "
        "is made at the first write)");
  fs::path root = fs::absolute(dir).lexically_normal();
  if (!root.has_filename()) root = root.parent_path();  // "dir/"
  std::error_code ec;
  const auto st = fs::status(root, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      throw StorageError("ReplayBuffer::dumps: " + root.string() +
                         " exists and is not a directory");
    // The checkpoint replaces the whole directory: never one that is not a checkpoint.
    if (!fs::is_empty(root, ec) && !fs::exists(root / "buffer_metadata.json", ec))
      throw StorageError("ReplayBuffer::dumps: refusing to replace " + root.string() +
                         ": the directory is not empty and holds no buffer_metadata.json (it is "
                         "not a replay buffer checkpoint)");
  }
  fs::path created_from;
  const fs::path stage =
      tensordict::detail::make_stage(root, "rbsave", "ReplayBuffer::dumps", created_from);
  try {
    MemmapOptions durable;
    durable.durable = true;
    s.all_rows().save((stage / "storage").string(), durable);
    detail::write_json_file(
        stage / "storage" / "storage_metadata.json",
        ojson{{"metadata", ojson::object()}, {"is_pytree", false}, {"len", s.size()}});
    fs::create_directory(stage / "writer");
    if (s.shared)
      s.writer->load_state(s.shared_state(), s.writer_capacity());  // what dumps() writes
    s.writer->dumps(stage / "writer");
    // The library's buffers have no batch size of their own (sample(n) takes it).
    detail::write_json_file(stage / "buffer_metadata.json",
                            ojson{{"batch_size", nullptr}, {"consume_after_n_samples", nullptr}});
    s.sampler->dumps(stage / "sampler");
    at::Tensor rng;
    {
      std::lock_guard<std::mutex> generator_lock(s.generator.mutex());
      rng = s.generator.get_state();
    }
    TensorDict rng_state(std::vector<int64_t>{});
    rng_state.set("rng_state", rng);
    rng_state.save((stage / "rng_state").string(), durable);
    tensordict::detail::sync_tree_dirs(stage, 0);
    tensordict::detail::install_dir(stage, root);
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
  tensordict::detail::sync_after_install(root, created_from);
}

void ReplayBuffer::loads(const fs::path& dir) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.shared)
    throw UnsupportedError(
        "ReplayBuffer::loads: the buffer is attached to a cursor shared by other processes; "
        "load the checkpoint into a buffer of one process, then set the shared cursor with "
        "load_writer_state()");
  const fs::path root = fs::absolute(dir).lexically_normal();
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw FormatError("ReplayBuffer::loads: " + root.string() +
                      " is not a directory (a replay buffer checkpoint)");

  const fs::path buffer_file = root / "buffer_metadata.json";
  const ojson buffer_meta = detail::read_json_object(buffer_file);
  if (const ojson& b = field(buffer_meta, "batch_size", buffer_file); !b.is_null()) {
    if (integer_value(b, "batch_size", buffer_file) <= 0)
      format_error(buffer_file, "\"batch_size\" must be positive or null, got " + b.dump());
  }
  if (buffer_meta.contains("consume_after_n_samples") &&
      !buffer_meta["consume_after_n_samples"].is_null())
    format_error(buffer_file,
                 "\"consume_after_n_samples\" is set: a consuming buffer, which this library "
                 "does not have");
  if (fs::exists(root / "transform.t", ec))
    format_error(root / "transform.t",
                 "the state of a transform, which this library's buffers do not have");

  const fs::path storage_dir = root / "storage";
  const fs::path storage_file = storage_dir / "storage_metadata.json";
  const ojson storage_meta = detail::read_json_object(storage_file);
  const ojson& pytree = field(storage_meta, "is_pytree", storage_file);
  if (!pytree.is_boolean())
    format_error(storage_file, "\"is_pytree\" must be true or false, got " + pytree.dump());
  if (pytree.get<bool>())
    format_error(storage_file,
                 "\"is_pytree\" is true: a storage of non-tensordict data, which this "
                 "library does not read");
  const int64_t len = integer_value(field(storage_meta, "len", storage_file), "len", storage_file);

  if (!fs::exists(storage_dir / "meta.json", ec))
    format_error(storage_dir / "meta.json", "missing (the storage's rows are saved there)");
  TensorDictBase rows = load_memmap(storage_dir.string());
  // TorchRL's TensorDictReplayBuffer, and its max-value writer's add, store
  // each row's own position as "index": bookkeeping (a sample's "index" says
  // the same), not data, unless this buffer's storage has such an entry.
  if (rows.contains("index") && rows.at("index").is_tensor() &&
      !(s.storage.defined() && s.storage.contains("index")))
    rows = rows.exclude({"index"});
  // A lazy [env, time] buffer not written yet takes the checkpoint's
  // [steps, envs] when it fits its capacity (restored on any error below).
  struct Restore {
    State& s;
    int64_t envs, steps, capacity;
    bool armed;
    ~Restore() {
      if (!armed) return;
      s.envs = envs;
      s.steps = steps;
      s.capacity = capacity;
    }
  } restore{s, s.envs, s.steps, s.capacity, !s.storage.defined() && s.lazy_ndim == 2};
  if (restore.armed) {
    if (rows.batch_dims() != 2 || rows.batch_size()[0] <= 0 || rows.batch_size()[1] <= 0)
      format_error(storage_dir / "meta.json",
                   "expected the tensordict of an [env, time] buffer, batch size [steps, envs] "
                   "(TorchRL's ndim 2), got " +
                       c10::str(rows.batch_size()));
    const int64_t count = rows.batch_size()[1], time_steps = rows.batch_size()[0];
    if (time_steps != (s.capacity + count - 1) / count)
      throw ValueError("ReplayBuffer::loads: " + (storage_dir / "meta.json").string() +
                       " holds batch size " + c10::str(rows.batch_size()) +
                       " ([steps, envs]); a buffer of capacity " + std::to_string(s.capacity) +
                       " makes " + std::to_string((s.capacity + count - 1) / count) +
                       " time steps of " + std::to_string(count) + " envs");
    State::check_sampler(*s.sampler, true, true, count * time_steps, time_steps);
    s.envs = count;
    s.steps = time_steps;
    s.capacity = count * time_steps;
  }
  if (s.envs ? rows.batch_dims() != 2 : rows.batch_dims() != 1)
    format_error(storage_dir / "meta.json",
                 (s.envs ? "expected the tensordict of an [env, time] buffer, batch size "
                           "[steps, envs] (TorchRL's ndim 2), got "
                         : "expected a tensordict of batch size [capacity], got ") +
                     c10::str(rows.batch_size()));
  if (s.envs && (rows.batch_size()[0] != s.steps || rows.batch_size()[1] != s.envs))
    throw ValueError(
        "ReplayBuffer::loads: " + (storage_dir / "meta.json").string() + " holds batch size " +
        c10::str(rows.batch_size()) + " ([steps, envs]), this buffer [" + std::to_string(s.steps) +
        ", " + std::to_string(s.envs) + "] (a checkpoint loads into a buffer of the same shape)");
  const int64_t capacity = s.envs ? s.capacity : rows.batch_size()[0];
  if (capacity != s.capacity)
    throw ValueError("ReplayBuffer::loads: " + (storage_dir / "meta.json").string() + " holds " +
                     std::to_string(capacity) + " rows, this buffer " + std::to_string(s.capacity) +
                     " (a checkpoint loads into a buffer of the same capacity)");
  if (len < 0 || len > capacity || (s.envs && len % s.envs != 0))
    format_error(storage_file,
                 "\"len\" " + std::to_string(len) + " is not in [0, " + std::to_string(capacity) +
                     "]" +
                     (s.envs ? " or not whole time steps of " + std::to_string(s.envs) + " envs"
                             : std::string()));
  const std::function<void()> load_writer =
      s.writer->read_checkpoint(root / "writer", s.writer_capacity(), s.envs ? len / s.envs : len);
  for (const auto& [key, value] : rows.items(/*include_nested=*/true, /*leaves_only=*/false))
    if (!value.is_tensor() && !value.is_tensordict())
      format_error(storage_dir, "the entry " + key.repr() +
                                    " is not a tensor; a replay buffer stores tensors only");
  if (s.envs) rows = State::env_major(rows);
  const std::string where = "ReplayBuffer::loads: " + storage_dir.string();
  if (s.storage.defined()) {
    std::vector<at::Tensor> checked;
    s.check(where.c_str(), rows, 1, s.envs ? s.steps : capacity, checked);
  }

  at::Tensor rng;
  if (fs::exists(root / "rng_state", ec)) {
    const TensorDictBase saved = load_memmap((root / "rng_state").string());
    const fs::path rng_file = root / "rng_state" / "meta.json";
    if (!saved.contains("rng_state") || !saved.at("rng_state").is_tensor())
      format_error(rng_file, "the entry \"rng_state\" is missing or not a tensor");
    rng = saved.get("rng_state");
    std::lock_guard<std::mutex> generator_lock(s.generator.mutex());
    const at::Tensor mine = s.generator.get_state();
    if (rng.scalar_type() != at::kByte || rng.sizes() != mine.sizes())
      format_error(rng_file, "\"rng_state\" must be uint8 " + c10::str(mine.sizes()) +
                                 " (a CPU generator's state), got " +
                                 std::string(c10::toString(rng.scalar_type())) + " " +
                                 c10::str(rng.sizes()));
    rng = rng.clone();
  }

  // A buffer not written yet gets a storage made from the files, filled
  // before it is adopted.
  TensorDictBase fresh;
  if (!s.storage.defined()) {
    fresh = s.envs ? s.make_like(rows, 2, {s.envs, s.steps}) : s.make_like(rows, 1, {capacity});
    State::copy_all(fresh, rows, s.envs ? s.envs : capacity);
  }
  s.sampler->loads(root / "sampler");  // all or nothing itself; the last check
  if (fresh.defined()) {
    s.adopt(std::move(fresh));
    restore.armed = false;
  } else if (s.direct) {
    for (const Leaf& leaf : s.leaves) leaf.data.copy_(rows.get(leaf.key));
  } else {
    State::copy_all(s.storage, rows, s.envs ? s.envs : capacity);
  }
  load_writer();
  s.last_row = s.newest_row(s.writer->state());
  if (rng.defined()) {
    std::lock_guard<std::mutex> generator_lock(s.generator.mutex());
    s.generator.set_state(rng);
  }
}

}  // namespace tensordict::rb
