#include <tensordict/errors.h>
#include <tensordict/rb/shared_cursor.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace tensordict::rb {

namespace {

// The cursor file: a header and the two counters, each on its own cache
// line so that reserving writers and committing writers do not share one.
constexpr char kMagic[8] = {'T', 'D', 'R', 'B', 'C', 'U', 'R', '1'};
constexpr std::size_t kFileBytes = 4096;
constexpr std::size_t kCapacityOffset = 8;
constexpr std::size_t kReserveOffset = 64;
constexpr std::size_t kCommitOffset = 128;

// A counter word: epoch in the top 16 bits, tickets in the low 48.
constexpr int kTicketBits = 48;
constexpr uint64_t kTicketMask = (uint64_t{1} << kTicketBits) - 1;

int64_t tickets(uint64_t word) { return static_cast<int64_t>(word & kTicketMask); }
int64_t epoch(uint64_t word) { return static_cast<int64_t>(word >> kTicketBits); }
uint64_t make_word(int64_t epoch, int64_t tickets) {
  return (static_cast<uint64_t>(epoch) << kTicketBits) | static_cast<uint64_t>(tickets);
}

std::atomic_ref<uint64_t> counter(uint64_t* word) { return std::atomic_ref<uint64_t>(*word); }

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw StorageError("MappedCursor: " + what + " " + path.string() + ": " + std::strerror(errno));
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedCursor::MappedCursor(const std::filesystem::path& path, int64_t capacity)
    : path_(path), capacity_(capacity) {
  static_assert(std::atomic_ref<uint64_t>::is_always_lock_free,
                "the counters are shared between processes: lock-free atomics only");
  if (capacity <= 0)
    throw ValueError("MappedCursor: the capacity must be positive, got " +
                     std::to_string(capacity));
  Fd f;
  f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f.fd < 0) fail(path, "cannot open");
  // The first process to open the file writes its header; the lock makes the
  // others wait for it instead of reading a half-written one.
  if (::flock(f.fd, LOCK_EX) != 0) fail(path, "cannot lock");
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail(path, "cannot stat");
  if (st.st_size == 0) {
    if (::ftruncate(f.fd, kFileBytes) != 0) fail(path, "cannot size");
    char header[16] = {};
    std::memcpy(header, kMagic, sizeof kMagic);
    std::memcpy(header + kCapacityOffset, &capacity, sizeof capacity);
    if (::pwrite(f.fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
      fail(path, "cannot write");
  } else if (st.st_size != static_cast<off_t>(kFileBytes)) {
    throw FormatError("MappedCursor: " + path.string() + " is " + std::to_string(st.st_size) +
                      " bytes, not a replay buffer cursor file (" + std::to_string(kFileBytes) +
                      " bytes)");
  }
  void* map = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (map == MAP_FAILED) fail(path, "cannot map");
  ::flock(f.fd, LOCK_UN);
  const char* bytes = static_cast<const char*>(map);
  int64_t stored = 0;
  std::memcpy(&stored, bytes + kCapacityOffset, sizeof stored);
  if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    ::munmap(map, kFileBytes);
    throw FormatError("MappedCursor: " + path.string() +
                      " does not start with the cursor file's magic bytes");
  }
  if (stored != capacity) {
    ::munmap(map, kFileBytes);
    throw ValueError("MappedCursor: " + path.string() + " is the cursor of a buffer of " +
                     std::to_string(stored) + " rows, opened for " + std::to_string(capacity));
  }
  map_ = map;
  reserve_word_ = reinterpret_cast<uint64_t*>(static_cast<char*>(map) + kReserveOffset);
  commit_word_ = reinterpret_cast<uint64_t*>(static_cast<char*>(map) + kCommitOffset);
}

std::shared_ptr<MappedCursor> MappedCursor::beside(const TensorDictBase& storage) {
  const int64_t dims = storage.batch_dims();
  if (dims != 1 && dims != 2)
    throw ShapeError(
        "MappedCursor::beside: the storage must have batch size [capacity] or [envs, steps] (an "
        "[env, time] storage), got " +
        std::to_string(dims) + " batch dims");
  const std::optional<std::string> dir = storage.saved_path();
  if (!dir)
    throw ValueError(
        "MappedCursor::beside: the storage is neither memory-mapped nor in shared memory (it "
        "has no directory to put the cursor file in); open MappedCursor(path, capacity)");
  // An [env, time] buffer's tickets count its time steps.
  return std::make_shared<MappedCursor>(std::filesystem::path(*dir) / "rb_cursor",
                                        storage.batch_size()[dims - 1]);
}

MappedCursor::~MappedCursor() {
  if (map_) ::munmap(map_, kFileBytes);
}

std::string MappedCursor::where() const { return "mapped file " + path_.string(); }

Reservation MappedCursor::reserve(int64_t count) {
  if (count < 0)
    throw ValueError("MappedCursor::reserve: cannot reserve " + std::to_string(count) + " rows");
  const uint64_t before =
      counter(reserve_word_).fetch_add(static_cast<uint64_t>(count), std::memory_order_acq_rel);
  if (tickets(before) + count > static_cast<int64_t>(kTicketMask))
    throw StorageError("MappedCursor::reserve: " + where() + " ran out of tickets (2^48 rows)");
  return {tickets(before), count, epoch(before)};
}

int64_t MappedCursor::try_commit(const Reservation& r) {
  uint64_t seen = counter(commit_word_).load(std::memory_order_acquire);
  if (epoch(seen) != r.epoch) return kDiscarded;
  if (tickets(seen) != r.first) return tickets(seen);
  // Release: the rows written before are visible to whoever reads the counter.
  return counter(commit_word_)
                 .compare_exchange_strong(seen, make_word(r.epoch, r.first + r.count),
                                          std::memory_order_acq_rel)
             ? kCommitted
             : (epoch(seen) != r.epoch ? kDiscarded : tickets(seen));
}

int64_t MappedCursor::committed() {
  return tickets(counter(commit_word_).load(std::memory_order_acquire));
}

int64_t MappedCursor::reserved() {
  return tickets(counter(reserve_word_).load(std::memory_order_acquire));
}

int64_t MappedCursor::recover() {
  uint64_t commit = counter(commit_word_).load(std::memory_order_acquire);
  const uint64_t reserve = counter(reserve_word_).load(std::memory_order_acquire);
  const int64_t pending = tickets(reserve) - tickets(commit);
  if (pending <= 0) return 0;
  const int64_t next = std::max(epoch(commit), epoch(reserve)) + 1;
  // The commit counter first: a commit racing with this one either landed
  // (nothing is stalled any more: give up) or now sees the new epoch.
  if (!counter(commit_word_)
           .compare_exchange_strong(commit, make_word(next, tickets(commit)),
                                    std::memory_order_acq_rel))
    return 0;
  counter(reserve_word_).store(make_word(next, tickets(commit)), std::memory_order_release);
  return pending;
}

void MappedCursor::reset(int64_t write_count) {
  if (write_count < 0 || write_count > static_cast<int64_t>(kTicketMask))
    throw ValueError("MappedCursor::reset: write_count " + std::to_string(write_count) +
                     " is not in [0, 2^48)");
  const uint64_t commit = counter(commit_word_).load(std::memory_order_acquire);
  const uint64_t reserve = counter(reserve_word_).load(std::memory_order_acquire);
  const int64_t next = std::max(epoch(commit), epoch(reserve)) + 1;
  counter(commit_word_).store(make_word(next, write_count), std::memory_order_release);
  counter(reserve_word_).store(make_word(next, write_count), std::memory_order_release);
}

}  // namespace tensordict::rb
