// Deleting a save that a newer one replaced (include/tensordict/storage/replaced_saves.h).
//
// Deleting a 100 MB save took ~10 ms on the caller's thread, ~90% of it in
// the kernel freeing the files' pages and blocks when their last reference
// goes. So the caller keeps one: it opens the large files, deletes every name
// (the directory is gone when the save returns: nothing for another program
// to trip over) and hands the descriptors to a background thread, whose
// close() does the freeing. A process that dies first frees them as it exits.
#include <tensordict/storage/replaced_saves.h>
#include "storage/memmap/mapped_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace tensordict {
namespace {

namespace fs = std::filesystem;

// Files smaller than this are freed on the spot: there is little to free.
constexpr off_t kDeferFromBytes = off_t{256} << 10;
// Descriptors held for deferred frees, at most (the rest is freed inline).
constexpr std::size_t kMaxHeld = 512;

class Reaper {
 public:
  static Reaper& instance() {
    static Reaper* reaper = [] {
      static Reaper r;
      ::pthread_atfork(&Reaper::before_fork, &Reaper::after_fork_parent, &Reaper::after_fork_child);
      return &r;
    }();
    return *reaper;
  }

  // How many more descriptors may be held now.
  std::size_t room() {
    std::lock_guard lock(mutex_);
    return stopping_ || held_ >= kMaxHeld ? 0 : kMaxHeld - held_;
  }

  void close_later(std::vector<int> fds) {
    if (fds.empty()) return;
    std::unique_lock lock(mutex_);
    if (stopping_) {
      lock.unlock();
      close_all(fds);
      return;
    }
    held_ += fds.size();
    pending_.push_back(std::move(fds));
    if (!worker_) worker_ = std::make_unique<std::thread>([this] { run(); });
    wake_.notify_all();
  }

  bool pending() {
    std::lock_guard lock(mutex_);
    return held_ > 0;
  }

  // Batches of files closed so far: a save compares it before and after a
  // failure, since the space it lacked may have been freed in between.
  std::uint64_t freed() {
    std::lock_guard lock(mutex_);
    return freed_;
  }

  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return held_ == 0; });
  }

  ~Reaper() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (worker_) worker_->join();  // drains the queue first
  }

 private:
  static void close_all(const std::vector<int>& fds) {
    for (int fd : fds) ::close(fd);
  }

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, nothing left
      std::vector<int> fds = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      close_all(fds);
      lock.lock();
      held_ -= fds.size();
      ++freed_;
      if (held_ == 0) idle_.notify_all();
    }
  }

  // fork(): the child gets the mutex in a known state and no worker (threads
  // do not survive fork). Its copies of the held descriptors are closed (the
  // parent still holds the files; the child would keep them for its life).
  static void before_fork() { instance().mutex_.lock(); }
  static void after_fork_parent() { instance().mutex_.unlock(); }
  static void after_fork_child() {
    Reaper& r = instance();
    // The parent's worker may have been waiting on these: glibc's condition
    // variables count their waiters, and one that does not exist here would
    // block every notify. Fresh ones (the old ones are not destroyed: their
    // destructor would wait for that waiter too).
    new (&r.wake_) std::condition_variable();
    new (&r.idle_) std::condition_variable();
    for (const auto& fds : r.pending_) close_all(fds);
    r.pending_.clear();
    r.held_ = 0;
    // The parent's worker does not exist here: forget its handle (destroying
    // a joinable std::thread would terminate the process).
    (void)r.worker_.release();
    r.mutex_.unlock();
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::vector<int>> pending_;
  std::size_t held_ = 0;  // descriptors in pending_ and being closed
  std::uint64_t freed_ = 0;
  bool stopping_ = false;
  std::unique_ptr<std::thread> worker_;
};

}  // namespace

namespace detail {

void remove_replaced_save(const fs::path& dir) {
  Reaper& reaper = Reaper::instance();
  std::size_t room = reaper.room();
  std::vector<int> held;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       room > 0 && !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->is_symlink(ec) ||
        static_cast<off_t>(it->file_size(ec)) < kDeferFromBytes || ec)
      continue;
    // O_NONBLOCK|O_NOFOLLOW: a name swapped for a FIFO or a link since the
    // check above is not waited on or followed.
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      held.push_back(fd);
      --room;
    } else {
      ::close(fd);
    }
  }
  // The save is complete: a failure here only leaves garbage beside it
  // (tensors still mapped from the old files keep their bytes either way).
  fs::remove_all(dir, ec);
  reaper.close_later(std::move(held));
}

bool replaced_saves_pending() { return Reaper::instance().pending(); }
std::uint64_t replaced_saves_freed() { return Reaper::instance().freed(); }

}  // namespace detail

void wait_for_replaced_saves() { Reaper::instance().wait_idle(); }

}  // namespace tensordict
