// Shared helpers of the reliability tests (issue #19): a fresh directory per
// test, files written byte by byte, calls bounded in time.
#pragma once

#include <gtest/gtest.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

extern char** environ;

namespace td_rel {

namespace fs = std::filesystem;

/// A fresh directory per test, removed afterwards.
class Reliability : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root = fs::temp_directory_path() / ("td-rel-" + std::to_string(::getpid()) + "-" +
                                        info->name() + "-" + std::to_string(counter++));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void TearDown() override {
    std::error_code ec;
    // Directories made unwritable by a test are made writable again first.
    for (auto it = fs::recursive_directory_iterator(root, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec))
        fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root, ec);
  }
  fs::path root;
};

inline void write_text(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// `depth` nested JSON lists around `inner`.
inline std::string nested_lists(std::size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

/// Runs `f` on a thread and waits at most `seconds`. A call still blocked
/// then is reported as a hang; `unblock` (e.g. opening a FIFO's other end) is
/// run so that the thread can finish before the test ends.
inline ::testing::AssertionResult finishes_within(double seconds, std::function<void()> f,
                                                  std::function<void()> unblock = {}) {
  auto fut = std::async(std::launch::async, std::move(f));
  if (fut.wait_for(std::chrono::duration<double>(seconds)) == std::future_status::ready) {
    fut.get();  // rethrows
    return ::testing::AssertionSuccess();
  }
  if (unblock) unblock();
  fut.wait();
  return ::testing::AssertionFailure() << "the call hung for more than " << seconds << " s";
}

/// Opens and closes the write end of a FIFO without blocking (unblocks a
/// reader stuck in open()).
inline void poke_fifo(const fs::path& fifo) {
  int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
}

/// Starts tensordict_reliability_child with `args`; -1 when it cannot start.
inline pid_t spawn_child(const std::vector<std::string>& args) {
  std::string exe = TD_RELIABILITY_CHILD;
  std::vector<std::string> copy = args;
  std::vector<char*> argv{exe.data()};
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

/// The exit status of a child (1000 + the signal that killed it).
inline int wait_child(pid_t pid) {
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFSIGNALED(status) ? 1000 + WTERMSIG(status) : WEXITSTATUS(status);
}

/// Runs the child to its end.
inline int run_child(const std::vector<std::string>& args) { return wait_child(spawn_child(args)); }

/// The earlier save of the save tests: a leaf, a nested leaf, a non-tensor.
inline tensordict::TensorDict first_save() {
  tensordict::TensorDict t(std::vector<int64_t>{4});
  t.set("a", torch::arange(4, torch::kFloat));
  t.set({"sub", "b"}, torch::ones({4, 2}, torch::kLong));
  t.set("s", tensordict::NonTensorData("old"));
  return t;
}

}  // namespace td_rel
