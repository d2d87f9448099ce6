#include <tensordict/detail/progress.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include <unistd.h>

namespace tensordict::detail {

Progress::Progress(std::string label, int64_t total, bool enabled, std::ostream* out)
    : label_(std::move(label)), total_(total) {
  if (out != nullptr)
    out_ = out;
  else if (enabled && stderr_is_terminal())
    out_ = &std::cerr;
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (out_) draw(0, false);
}

Progress::~Progress() {
  try {
    finish();
  } catch (...) {  // a destructor must not throw (a closed stream)
  }
}

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void Progress::advance(int64_t n) {
  const int64_t done = done_.fetch_add(n, std::memory_order_relaxed) + n;
  if (!out_) return;
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  // Another thread is drawing, or drew less than 100 ms ago: skip.
  if (!lock.owns_lock() || finished_ || now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(done, false);
}

void Progress::finish() {
  if (!out_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  draw(done_.load(), true);
}

void Progress::draw(int64_t done, bool final) {
  constexpr int kWidth = 30;
  const double fraction =
      total_ > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total_)) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::ostringstream line;
  line << '\r' << label_ << " [" << std::string(filled, '#') << std::string(kWidth - filled, '.')
       << "] " << done << '/' << total_ << " (" << static_cast<int>(fraction * 100) << "%) ";
  line.precision(1);
  line << std::fixed << seconds << 's';
  if (final) line << '\n';
  *out_ << line.str() << std::flush;
}

}  // namespace tensordict::detail
