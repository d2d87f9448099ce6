#pragma once
/// @file rb/replay_buffer.h
/// ReplayBuffer: a fixed-capacity buffer of rows (transitions) in any
/// tensordict storage, written through a writer (round robin by default) and
/// read through a sampler (TorchRL's TensorDictReplayBuffer). See
/// docs/replay_buffer_library.md.
///
/// @code
///   namespace rb = tensordict::rb;
///   rb::ReplayBuffer buffer(100'000, std::make_shared<rb::PrioritizedSampler>(100'000, 0.6, 0.4));
///   buffer.extend(batch);                      // batch size [n]
///   tensordict::TensorDict s = buffer.sample(256);   // + "index", "priority_weight"
///   s.set("td_error", td_error);
///   buffer.update_tensordict_priority(s);
/// @endcode
///
/// Thread safety: every public call may be made from any thread at any time,
/// concurrently with any other (several threads writing, several sampling,
/// priorities updated beside them). One mutex per buffer serialises the calls,
/// so each is atomic: a sample never sees half of a write, and the writer,
/// sampler and storage change together. The tensordicts a sample returns are
/// the caller's own (copies of the rows). Writing to the storage() handle or
/// the sampler() directly bypasses that lock and is the caller's business.
///
/// Several processes (and hosts): ReplayBuffer::attach(storage, cursor)
/// opens one buffer from each process, its round-robin cursor shared through
/// a SharedCursor kept with the storage (rb/shared_cursor.h: a mapped file
/// for memmap and shared memory, the Redis server for a store). Writes then
/// reserve their rows atomically and commit them in order; samples see only
/// committed rows. See docs/replay_buffer_library.md, "Several processes".
///
/// [env, time] buffers (TorchRL's ndim=2 storages): a storage of batch size
/// [envs, steps] holds each env's steps along time in its own row. extend
/// takes batches [envs, t], add one step of every env ([envs]); the writer
/// cycles over the time steps; capacity() is envs * steps and size() the
/// elements filled. sample(n) returns n elements, batch [n], with "index"
/// int64 [n, 2] (env, time); samplers number the elements time-major as
/// TorchRL does; checkpoints are TorchRL's [steps, envs] layout. A
/// PrioritizedSampler of envs * steps keeps one priority per element in that
/// numbering; a SliceSampler slices along time within one env
/// (slice_sampler.h). RandomSampler, SamplerWithoutReplacement,
/// PrioritizedSampler, SliceSampler and SliceSamplerWithoutReplacement only
/// (UnsupportedError for samplers of one's own and for writers other than
/// RoundRobinWriter). attach() takes such a storage too: its cursor's
/// tickets count time steps (capacity T), each written to every env.
/// ReplayBuffer(capacity, ..., ndim = 2) makes such a storage at the first
/// write, from the batch's env count.
///
/// Errors: typed tensordict:: errors, raised before anything changes (bad
/// input writes nothing and leaves the cursor and priorities as they were):
/// a row whose keys, shapes or dtypes differ from the storage's (KeyError,
/// ShapeError, TypeError naming the key), a sample of an empty buffer or of
/// batch_size <= 0 (ValueError), a priority index out of range (IndexError),
/// a NaN/inf/negative priority (ValueError).

#include <tensordict/nested_key.h>
#include <tensordict/rb/sampler.h>
#include <tensordict/rb/slice_sampler.h>
#include <tensordict/rb/writer.h>
#include <tensordict/schema.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace tensordict::rb {

class SharedCursor;

class ReplayBuffer {
 public:
  /// Opens the buffer over `storage` (batch size [C], already allocated,
  /// opened in this process: load_memmap, attach_shared,
  /// TensorDictStore::from_store, ...) whose round-robin cursor is `cursor`,
  /// shared by every process that attaches the same storage and cursor.
  /// add and extend reserve their rows with cursor->reserve(), copy them and
  /// cursor->commit() them; size() and sample() read cursor->committed(), so
  /// they never cover a row reserved but not written. A sample retries when
  /// another process overwrote (wrap-around) one of its rows while it read
  /// it. `sampler` defaults to a RandomSampler; SamplerWithoutReplacement is
  /// the other sampler taken (UnsupportedError for samplers that keep
  /// per-row state written rows update: prioritized, slices). An [env, time]
  /// storage [E, T] is attached with a cursor of capacity T: an extend of
  /// [E, t] reserves t tickets, ticket k is time step k % T of every env.
  /// ValueError when `cursor` is null or its capacity is not C (T); the
  /// storage's errors as the constructor's.
  static ReplayBuffer attach(TensorDictBase storage, std::shared_ptr<SharedCursor> cursor,
                             std::shared_ptr<Sampler> sampler = nullptr);
  /// The cursor of a buffer opened with attach(); null otherwise.
  std::shared_ptr<SharedCursor> shared_cursor() const;

  /// A buffer over `storage`, a tensordict of batch size [capacity]
  /// pre-allocated in any storage (from_schema: memory, memmap, shared, h5,
  /// redis, ...), whose rows are taken as unwritten, or of batch size
  /// [envs, steps] for an [env, time] buffer (see above). `sampler` defaults
  /// to a RandomSampler. ShapeError unless the storage has batch size [C] or
  /// [E, T], each > 0;
  /// TypeError when it holds non-tensor entries; ValueError when a
  /// PrioritizedSampler's capacity differs from C. `writer` defaults to a
  /// RoundRobinWriter.
  explicit ReplayBuffer(TensorDictBase storage, std::shared_ptr<Sampler> sampler = nullptr,
                        std::shared_ptr<Writer> writer = nullptr);
  /// A buffer of `capacity` rows whose storage is made at the first write:
  /// zeros shaped like the written row (or batch's rows), batch size
  /// [capacity], in the storage named `storage` with `options` (from_schema's
  /// names: "memory", "memmap" with {"prefix": dir}, "shared", ...; TorchRL's
  /// LazyTensorStorage and LazyMemmapStorage). ValueError unless capacity > 0.
  ///
  /// `ndim` 2 makes an [env, time] buffer (TorchRL's lazy storages with
  /// ndim=2): the first write, an extend of batch size [envs, t] or an add of
  /// [envs], makes a storage of batch size [envs, ceil(capacity / envs)], so
  /// capacity() is then envs times that (TorchRL's max_size after its first
  /// write). A first write of another batch shape is a ShapeError; a
  /// PrioritizedSampler whose capacity is not that envs * steps, or a
  /// SliceSampler whose slice_len exceeds the steps, a ValueError; both
  /// before the storage is made. A checkpoint loaded before the first write
  /// gives the storage its [envs, steps]. ValueError unless ndim is 1 or 2;
  /// UnsupportedError as for an [env, time] storage (samplers of one's own,
  /// writers other than RoundRobinWriter).
  explicit ReplayBuffer(int64_t capacity, std::shared_ptr<Sampler> sampler = nullptr,
                        std::string storage = "memory", StorageOptions options = {},
                        std::shared_ptr<Writer> writer = nullptr, int64_t ndim = 1);
  ~ReplayBuffer();
  /// A moved-from buffer may only be destroyed or assigned to.
  ReplayBuffer(ReplayBuffer&&) noexcept;
  ReplayBuffer& operator=(ReplayBuffer&&) noexcept;
  ReplayBuffer(const ReplayBuffer&) = delete;
  ReplayBuffer& operator=(const ReplayBuffer&) = delete;

  /// Writes one row (batch size []) where the writer says (at the cursor for
  /// a RoundRobinWriter); returns its row index, or -1 when the writer does
  /// not keep it (a TensorDictMaxValueWriter's row that ranks too low). An
  /// [env, time] buffer takes one step of every env (batch size [envs]) and
  /// returns the time step it went to.
  int64_t add(const TensorDictBase& row);
  /// Writes a batch (batch size [n]) at the cursor, wrapping at the end; an
  /// extend of more than capacity rows keeps the last `capacity` (as TorchRL).
  /// Returns the rows written (int64, one per surviving item). Rows are
  /// written with one index_put_ per extend on storages other than memory,
  /// memmap and shared (one round trip for Redis and HDF5). With another
  /// writer, returns the row of each of the n items, -1 for an item not kept
  /// (as TorchRL's TensorDictMaxValueWriter), and writes the kept ones with
  /// one index_put_. An [env, time] buffer takes batch size [envs, t] and
  /// returns the (env, time) pairs written (int64 [envs * kept, 2], env by
  /// env, the order of batch.flatten(0, 1)).
  at::Tensor extend(const TensorDictBase& batch);
  /// `batch_size` rows chosen by the sampler, copied into a TensorDict of
  /// batch size [batch_size] with "index" (int64, the rows) and, when the
  /// sampler is prioritized, "priority_weight" (float32 importance weights).
  /// ("index" is int64 [batch_size, 2], (env, time), for an [env, time]
  /// buffer.) A sampler's further entries (SampleInfo::entries: a SliceSampler's
  /// truncated and done flags) replace the stored ones of the same key.
  /// ValueError when the buffer is empty or batch_size <= 0.
  TensorDict sample(int64_t batch_size);
  /// New priorities of rows (int64 index, real priority; one priority is
  /// broadcast). A no-op for samplers without priorities, as in TorchRL, after
  /// the same index checks (IndexError outside [0, capacity)). An [env, time]
  /// buffer takes int64 [n, 2] (env, time) pairs (ShapeError otherwise,
  /// IndexError for an env or time step outside the storage).
  void update_priority(const at::Tensor& index, const at::Tensor& priority);
  /// update_priority(sampled["index"], sampled[priority_key]); a priority
  /// with more dims than [B] is reduced by its max over them (TorchRL's
  /// default reduction). KeyError when either key is missing.
  void update_tensordict_priority(const TensorDictBase& sampled,
                                  const NestedKey& priority_key = "td_error");

  /// Rows filled so far: min(write_count, capacity); for an attached buffer
  /// write_count is the shared cursor's committed tickets; for an [env, time]
  /// buffer envs * min(write_count, steps) (the writer counts time steps).
  int64_t size() const;
  int64_t capacity() const;
  /// The storage (undefined before the first write of a buffer made with a
  /// capacity). A handle to the same data, not a copy.
  TensorDictBase storage() const;
  WriterState writer_state() const;
  /// Resumes at `state` (e.g. from a checkpoint): ValueError unless
  /// 0 <= cursor < capacity and write_count >= 0. The storage must already
  /// hold the rows written. A TensorDictMaxValueWriter takes only {0, 0}
  /// (UnsupportedError otherwise: its kept ranks come with loads()). An
  /// attached buffer sets the shared cursor's counters to write_count
  /// (ValueError unless cursor == write_count % capacity): only while no other
  /// process writes.
  void load_writer_state(const WriterState& state);
  std::shared_ptr<Sampler> sampler() const;
  std::shared_ptr<Writer> writer() const;
  /// Seeds the buffer's random generator (every sample draws from it).
  void manual_seed(uint64_t seed);
  /// Forgets every row (TorchRL's empty()): cursor and write_count 0, the
  /// sampler's on_empty(). The storage keeps its (now unreachable) data. An
  /// attached buffer resets the shared cursor: only while no other process
  /// writes.
  void empty();

  /// Saves the buffer as a checkpoint directory in TorchRL's
  /// ReplayBuffer.dumps layout (docs/formats.md, "TorchRL replay buffer
  /// checkpoints"): storage/ (every slot as a memory-mapped tensordict of
  /// batch [capacity], whatever the storage, and storage_metadata.json),
  /// the writer's files (Writer::dumps), buffer_metadata.json, the sampler's files
  /// (Sampler::dumps) and rng_state/ (the buffer's generator). All or
  /// nothing and durable: written into a sibling directory, fsync()ed, then
  /// put in place of `dir` in one rename, so an earlier checkpoint there is
  /// replaced whole or, on error, left as it was. ValueError before the first
  /// write of a buffer made with a capacity (there is no storage to save);
  /// StorageError when `dir` exists and is not a checkpoint, or on an I/O
  /// failure; UnsupportedError for a sampler that cannot be saved.
  void dumps(const std::filesystem::path& dir) const;
  /// Loads a checkpoint written by dumps() or by TorchRL into this buffer,
  /// which must have the same capacity and kind of sampler and writer
  /// (ValueError otherwise). The rows are copied into this buffer's storage, whose keys,
  /// shapes and dtypes must be the checkpoint's (KeyError, ShapeError,
  /// TypeError), or which is made from the files when the buffer has not
  /// been written yet; the writer, the sampler and the generator take the
  /// saved state. Every missing, malformed, truncated or foreign file is a
  /// FormatError naming the file and the field, and so is what the library
  /// does not hold (a transform's state, a writer's generations, a pytree
  /// storage). Everything is checked before the buffer changes: on error it
  /// is as it was. UnsupportedError on an attached buffer (load into a
  /// buffer of one process, then set the cursor with load_writer_state).
  void loads(const std::filesystem::path& dir);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tensordict::rb
