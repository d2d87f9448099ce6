#pragma once
// The byte-range protocol of the Redis stores, written once: a leaf's bytes
// are one string value, and a selection of its rows (or of a lazy stack's
// elements) is a list of byte runs of it. Reads send, per key, a STRLEN (the
// size its metadata gives, checked before anything is copied) and a GETRANGE
// per run; writes send a SETRANGE per run, or, all-or-nothing, one EVAL that
// checks every key's size before writing any range (CheckedWrite). Everything
// goes into the caller's Batch, so an operation stays one round trip.
// RedisNode, ShardedNode and LazyStackStoreNode plan their runs here.

#include "storage/redis/connection.h"

#include <tensordict/errors.h>
#include <tensordict/row_selection.h>

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensordict::detail::redis {

/// Runs (offset, length) in the order they are read or written.
using ByteRuns = std::vector<std::pair<int64_t, int64_t>>;

/// Appends the run (off, len) to `runs`, merged with the last one when it
/// continues it; an empty run adds nothing.
inline void add_run(ByteRuns& runs, int64_t off, int64_t len) {
  if (len == 0) return;
  if (!runs.empty() && runs.back().first + runs.back().second == off)
    runs.back().second += len;
  else
    runs.emplace_back(off, len);
}

/// The runs of the items `rows` selects over the leading dims of `shape`,
/// each item `item` bytes times the dims of `shape` after the selected ones,
/// in the order of the selected tensor's elements. A Box selects over at
/// most shape.size() dims (the ranges after those are left to the caller).
/// nullopt for a General selection (read whole, selected in memory).
std::optional<ByteRuns> selected_runs(const RowSelection& rows, at::IntArrayRef shape,
                                      int64_t item);
/// selected_runs over a leaf of `shape` and `dtype`: its byte runs.
inline std::optional<ByteRuns> selected_bytes(const RowSelection& rows, at::IntArrayRef shape,
                                              at::ScalarType dtype) {
  return selected_runs(rows, shape, static_cast<int64_t>(c10::elementSize(dtype)));
}

/// The checked reads of one operation, planned into a Batch and read back
/// from its replies. Each leaf reads one or more keys (the blocks of a
/// sharded leaf) into one buffer: per key a STRLEN, then per run a GETRANGE
/// (or a GET of the whole key) copied to its place in the buffer.
class CheckedReads {
 public:
  /// `owner` starts the messages ("Redis store").
  explicit CheckedReads(std::string owner) : owner_(std::move(owner)) {}

  /// Starts the next leaf; returns its number (0, 1, ...).
  std::size_t leaf();
  /// Adds the size check of `key` (STRLEN) to the current leaf: the key
  /// must hold `size` bytes. Returns the key's number within the leaf.
  std::size_t key(Batch& b, std::string_view key, int64_t size);
  /// Adds the read of `len` bytes at `off` of key `k` of the current leaf,
  /// copied to byte `dest` of the leaf's buffer.
  void range(Batch& b, std::size_t k, int64_t off, int64_t len, int64_t dest);
  /// Adds the read of key `k` whole (a GET), copied to byte `dest`.
  void whole(Batch& b, std::size_t k, int64_t dest);
  /// Adds, as one leaf, the size check of `key` and the reads of `runs`
  /// copied one after the other; nothing when `runs` is empty. With
  /// `as_whole`, the one run is read by a GET.
  std::size_t leaf(Batch& b, std::string_view key, int64_t size, const ByteRuns& runs,
                   bool as_whole = false);

  /// True when leaf `i` sends nothing (an empty selection).
  bool empty(std::size_t i) const { return leaves_[i].first_key == leaves_[i].end_key; }
  /// The bytes leaf `i` reads.
  int64_t bytes(std::size_t i) const { return leaves_[i].bytes; }
  /// Checks the size replies of leaf `i` (checked before its buffer is
  /// allocated: changed metadata could ask for any size). Returns the
  /// message of the first key not the size planned; nullopt when all are.
  std::optional<std::string> size_mismatch(std::size_t i, const std::vector<Reply>& replies) const;
  /// Copies the runs of leaf `i` into `out` (bytes(i) bytes). Returns the
  /// message of the first run not the length planned (the key shrank or
  /// vanished between the commands, outside a transaction).
  std::optional<std::string> copy(std::size_t i, const std::vector<Reply>& replies,
                                  char* out) const;

 private:
  struct Key {
    std::string_view key;
    int64_t size;
    std::size_t reply;
  };
  struct Run {
    std::size_t key;  // index in keys_
    int64_t len, dest;
    std::size_t reply;
  };
  struct Leaf {
    std::size_t first_key = 0, end_key = 0, first_run = 0, end_run = 0;
    int64_t bytes = 0;
  };
  std::string owner_;
  std::vector<Key> keys_;
  std::vector<Run> runs_;
  std::vector<Leaf> leaves_;
};

/// A row write made all-or-nothing on the server: one EVAL of a Lua script
/// that checks the length (and type) of every data key against its metadata
/// before it writes any range, so that a key another process replaced or
/// shortened fails the whole write with nothing written, where a MULTI/EXEC
/// would have written the other leaves. Keys must share one cluster slot.
class CheckedWrite {
 public:
  /// Starts the ranges of `data_key`, which must hold `expected` bytes.
  void key(Batch& b, std::string_view data_key, int64_t expected);
  void range(std::string_view offset, std::string_view bytes) {
    ranges_.back().emplace_back(offset, bytes);
  }
  bool empty() const noexcept { return keys_.empty(); }
  /// The EVAL, added to `b` (nothing when no key was started).
  void add_to(Batch& b);

 private:
  std::vector<std::string_view> keys_, expected_;
  std::vector<std::vector<std::pair<std::string_view, std::string_view>>> ranges_;
};

/// The range writes of one operation: SETRANGEs, or with `checked` one
/// CheckedWrite per group (the keys of one cluster slot), added by finish().
class RangeWrites {
 public:
  explicit RangeWrites(bool checked, std::size_t groups = 1)
      : checked_(checked), scripts_(checked ? groups : 0) {}
  /// Starts the runs of `key`, which must hold `size` bytes (checked when
  /// `checked`); its script is that of `group`.
  void key(Batch& b, std::string_view key, int64_t size, std::size_t group = 0);
  /// Writes `bytes` at `off` of the current key. The bytes must outlive
  /// the send (or be own()ed by the batch).
  void range(Batch& b, int64_t off, std::string_view bytes);
  /// Writes the runs of `data` (laid out one after the other) to the current key.
  void runs(Batch& b, const ByteRuns& runs, const char* data);
  /// Adds the scripts (checked); nothing otherwise.
  void finish(Batch& b);

 private:
  bool checked_;
  std::vector<CheckedWrite> scripts_;
  CheckedWrite* script_ = nullptr;
  std::string_view key_;
  // Leaves of one row size share their offsets: each offset's text is made
  // once, not once per leaf.
  int64_t last_off_ = -1;
  std::string_view last_text_;
};

/// Adds the allocation of `key` as `bytes` zero bytes: a SETRANGE at its
/// last byte (the server zero-fills the rest; no zeros sent). Nothing for 0.
void add_zeroed(Batch& b, std::string_view key, int64_t bytes);

/// A leaf's stored value is not the size its metadata gives; `message` says
/// which key and the sizes. Called once the metadata was read again: when it
/// now asks for other bytes (or the leaf is gone), another process replaced
/// the leaf and a retry reads the new value (ConflictError); when it asks for
/// the same, the value itself is truncated, missing or foreign and a retry
/// would fail the same way (FormatError).
[[noreturn]] void throw_size_mismatch(const std::string& message, bool metadata_unchanged);

/// Sends a batch holding RangeWrites (or CheckedWrite scripts). A script's
/// refusal (a TDSIZE error: a leaf not the size its metadata gives; nothing
/// written) is told apart as throw_size_mismatch does, once
/// `reload_unchanged` has read the metadata again and said whether it still
/// gives every written leaf the same bytes. Other failures are thrown as the
/// client threw them.
template <class ReloadUnchanged>
void send_checked(Connection& conn, const Batch& b, const std::string& what,
                  ReloadUnchanged&& reload_unchanged, bool transaction = false) {
  try {
    conn.send(b, what, transaction);
  } catch (const StorageError& e) {
    const std::string refusal = e.what();
    if (refusal.find(": TDSIZE ") == std::string::npos) throw;
    throw_size_mismatch(refusal + "; nothing was written", reload_unchanged());
  }
}

}  // namespace tensordict::detail::redis
