#pragma once
// A small progress reporter for long operations (map over many chunks,
// memmap saves and loads of many leaves, the examples): one line on stderr,
// redrawn at most ten times a second, and only when stderr is a terminal (so
// logs and CI output stay clean). Internal, but usable by any code of the
// library or its examples. No progress-bar library is packaged in Debian 12.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>

namespace tensordict::detail {

class Progress {
 public:
  /// Reports `total` steps under `label`. Draws on `out` when given (tests),
  /// else on stderr when `enabled` and stderr is a terminal, else nothing.
  Progress(std::string label, int64_t total, bool enabled = true, std::ostream* out = nullptr);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// Calls finish().
  ~Progress();

  /// `n` more steps done. Thread-safe; cheap when nothing is drawn.
  void advance(int64_t n = 1);
  /// Draws the final state and ends the line (once).
  void finish();
  /// True when something is drawn.
  bool active() const noexcept { return out_ != nullptr; }
  int64_t done() const noexcept { return done_.load(std::memory_order_relaxed); }

  /// isatty(stderr).
  static bool stderr_is_terminal();

 private:
  void draw(int64_t done, bool final);

  std::string label_;
  int64_t total_;
  std::ostream* out_ = nullptr;
  std::atomic<int64_t> done_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool finished_ = false;
};

}  // namespace tensordict::detail
