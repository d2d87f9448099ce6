#pragma once
/// @file rb/shared_cursor.h
/// A round-robin write cursor shared by several processes (and hosts), kept
/// with the storage instead of in one process: SharedCursor is the contract,
/// MappedCursor keeps it in a small mapped file (in the directory of a
/// memmap or shared-memory storage), RedisCursor (rb/redis_cursor.h,
/// component tensordict::redis) on the Redis server beside a store. A
/// ReplayBuffer opened with ReplayBuffer::attach(storage, cursor) writes
/// through it. See docs/replay_buffer_library.md, "Several processes and
/// hosts".
///
/// Tickets: the t-th row ever written through the cursor (counted from 0)
/// has ticket t and goes to row t % capacity. A write RESERVES its tickets
/// with one atomic fetch-add of the reserve counter, copies its rows, then
/// COMMITS them: the commit counter moves from `first` to `first + count`
/// only once it has reached `first`, i.e. once every earlier reservation is
/// committed. Readers take the commit counter as the write count, so a
/// sample never covers a reserved row that is not written yet.
///
/// The failure rule: a writer that dies (or fails) between reserve and commit
/// stalls the commit counter at its first ticket. Readers keep sampling the
/// rows committed before it; later writers' commits wait `commit_timeout`
/// and then fail with TimeoutError (their rows are not acknowledged).
/// recover(), called once the stalled writer is known to be gone and while
/// no other writer is between reserve and commit, discards every
/// uncommitted reservation (the reserve counter goes back to the commit
/// counter, in a new epoch): the tickets are given out again, and a commit
/// of a discarded reservation fails with ConflictError.

#include <tensordict/errors.h>
#include <tensordict/tensor_dict_base.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

namespace tensordict::rb {

/// Tickets [first, first + count) reserved in `epoch` (recover() and
/// reset() start a new epoch; a reservation of an older one cannot commit).
struct Reservation {
  int64_t first = 0;
  int64_t count = 0;
  int64_t epoch = 0;
};

class SharedCursor {
 public:
  virtual ~SharedCursor() = default;
  /// Where the counters live, for messages ("mapped file <path>", ...).
  virtual std::string where() const = 0;
  /// Rows of the storage the cursor cycles over.
  virtual int64_t capacity() const = 0;

  /// Reserves `count` consecutive tickets (one atomic fetch-add) and returns
  /// them. ValueError when count < 0.
  virtual Reservation reserve(int64_t count) = 0;
  /// Tickets committed: every ticket below it is written (the buffer's
  /// write_count; its size is min(committed, capacity)).
  virtual int64_t committed() = 0;
  /// Tickets reserved so far (committed or not).
  virtual int64_t reserved() = 0;
  /// Discards every uncommitted reservation (see the failure rule above):
  /// the reserve counter returns to the commit counter in a new epoch.
  /// Returns the tickets discarded (0 when nothing was pending).
  virtual int64_t recover() = 0;
  /// Both counters to `write_count` in a new epoch (ReplayBuffer::empty and
  /// load_writer_state): only while no writer is between reserve and commit.
  /// ValueError when write_count < 0.
  virtual void reset(int64_t write_count) = 0;

  /// Commits `r`: waits until every earlier ticket is committed, then
  /// advances the commit counter past `r`. TimeoutError naming the stalled
  /// ticket when that takes longer than commit_timeout(); ConflictError when
  /// recover() or reset() discarded `r`.
  void commit(const Reservation& r) {
    if (r.count == 0) return;
    int64_t seen = try_commit(r);
    if (seen == kCommitted) return;  // the common case: no clock read
    const auto deadline = std::chrono::steady_clock::now() + commit_timeout_;
    auto pause = std::chrono::microseconds(2);
    for (int spins = 0;; ++spins, seen = try_commit(r)) {
      if (seen == kCommitted) return;
      if (seen == kDiscarded)
        throw ConflictError("SharedCursor::commit: the reservation of tickets [" +
                            std::to_string(r.first) + ", " + std::to_string(r.first + r.count) +
                            ") at " + where() +
                            " was discarded by recover() or reset(); its rows are not written");
      if (std::chrono::steady_clock::now() >= deadline)
        throw TimeoutError("SharedCursor::commit: tickets [" + std::to_string(r.first) + ", " +
                           std::to_string(r.first + r.count) + ") at " + where() +
                           " wait for ticket " + std::to_string(seen) +
                           ", reserved by a writer that has not committed it within " +
                           std::to_string(commit_timeout_.count()) +
                           " ms (call recover() once that writer is gone)");
      if (spins < 16) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
  }

  /// How long commit() waits for earlier reservations (10 s by default).
  std::chrono::milliseconds commit_timeout() const noexcept { return commit_timeout_; }
  void set_commit_timeout(std::chrono::milliseconds timeout) noexcept { commit_timeout_ = timeout; }

 protected:
  static constexpr int64_t kCommitted = -1;
  static constexpr int64_t kDiscarded = -2;
  /// One attempt: kCommitted when the commit counter was r.first and now is
  /// r.first + r.count; kDiscarded when r's epoch is over; otherwise the
  /// commit counter seen (an earlier ticket still uncommitted).
  virtual int64_t try_commit(const Reservation& r) = 0;

 private:
  std::chrono::milliseconds commit_timeout_{10'000};
};

/// The counters in a small file mapped by every process that opens it: on a
/// file system beside a memmap storage, or under /dev/shm beside a shared-
/// memory storage. Each counter is one 64-bit word updated with atomic
/// instructions (its epoch in the top 16 bits, the tickets below).
class MappedCursor : public SharedCursor {
 public:
  /// Opens the cursor file `path`, creating it (counters 0) when missing.
  /// ValueError when the file was made for another capacity or capacity <= 0;
  /// FormatError when it is not a cursor file; StorageError when it cannot be
  /// created or mapped.
  MappedCursor(const std::filesystem::path& path, int64_t capacity);
  /// The cursor file "rb_cursor" inside the directory of `storage`, a memmap
  /// tensordict (saved or loaded) or a shared-memory one (its /dev/shm
  /// directory, removed with it by unlink_shared), for its batch size [C]:
  /// every process that opens the storage opens the same cursor this way.
  /// For an [env, time] storage [E, T] the cursor cycles over its T time
  /// steps. ValueError for a storage with no directory (give a path then);
  /// ShapeError unless the batch size is [C] or [E, T].
  static std::shared_ptr<MappedCursor> beside(const TensorDictBase& storage);
  ~MappedCursor() override;
  MappedCursor(const MappedCursor&) = delete;
  MappedCursor& operator=(const MappedCursor&) = delete;

  std::string where() const override;
  int64_t capacity() const override { return capacity_; }
  Reservation reserve(int64_t count) override;
  int64_t committed() override;
  int64_t reserved() override;
  int64_t recover() override;
  void reset(int64_t write_count) override;
  const std::filesystem::path& path() const noexcept { return path_; }

 protected:
  int64_t try_commit(const Reservation& r) override;

 private:
  std::filesystem::path path_;
  int64_t capacity_ = 0;
  void* map_ = nullptr;
  uint64_t* reserve_word_ = nullptr;
  uint64_t* commit_word_ = nullptr;
};

}  // namespace tensordict::rb
