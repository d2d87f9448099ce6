// Several processes writing rows of one memmap directory or one shared-memory
// tensordict (issue #19): no acknowledged write is lost or torn. Each writer
// is a tensordict_reliability_child process; every test is bounded in time.
#include "reliability/reliability.h"

#include <tensordict/tensordict.h>

#include <torch/torch.h>

#include <signal.h>

#include <atomic>
#include <set>
#include <thread>

namespace td = tensordict;
using namespace td_rel;

namespace {

constexpr int64_t kRows = 48;

// Waits for every child, at most `seconds` in all (then kills them): the
// exit statuses, 1000 + signal for a killed one.
std::vector<int> wait_all(const std::vector<pid_t>& pids, double seconds = 120) {
  std::vector<int> out(pids.size(), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::size_t left = pids.size();
  while (left > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (out[i] != -1) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        out[i] = WIFSIGNALED(status) ? 1000 + WTERMSIG(status) : WEXITSTATUS(status);
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (out[i] == -1) ::kill(pids[i], SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return out;
}

td::TensorDict rows_td(bool nontensor) {
  td::TensorDict t(std::vector<int64_t>{kRows});
  t.set("x", torch::zeros({kRows, 4}));
  if (nontensor) {
    std::vector<std::string> none(kRows, "none");
    t.set("tag", td::NonTensorStack(nlohmann::json(none)));
  }
  return t;
}

std::vector<std::string> tags_of(const td::TensorDictBase& t) {
  return t.get_non_tensor("tag").get<std::vector<std::string>>();
}

// `writers` processes, writer w owning rows [w * n, (w + 1) * n) with value w + 1.
void disjoint_rows(const std::string& where, int writers, bool nontensor) {
  const int64_t n = kRows / writers;
  std::vector<pid_t> pids;
  for (int w = 0; w < writers; ++w) {
    std::vector<std::string> args{"rows", where, std::to_string(w * n), std::to_string(n),
                                  std::to_string(w + 1)};
    if (nontensor) args.push_back("nontensor");
    pids.push_back(spawn_child(args));
    ASSERT_GT(pids.back(), 0);
  }
  for (int rc : wait_all(pids)) ASSERT_EQ(rc, 0);
}

void expect_disjoint(const td::TensorDictBase& back, int writers, bool nontensor) {
  const int64_t n = kRows / writers;
  const auto tags = nontensor ? tags_of(back) : std::vector<std::string>();
  for (int64_t r = 0; r < kRows; ++r) {
    const double v = static_cast<double>(r / n + 1);
    EXPECT_TRUE(back.get("x")[r].equal(torch::full({4}, v))) << "row " << r;
    if (nontensor) EXPECT_EQ(tags[r], "v" + std::to_string(r / n + 1)) << "row " << r;
  }
}

// Every element written by one of the writers (values 1..writers; rows of
// tensors written at once may mix writers, docs/errors.md); every
// non-tensor value whole.
void expect_whole_values(const td::TensorDictBase& back, int writers, bool nontensor) {
  const auto tags = nontensor ? tags_of(back) : std::vector<std::string>();
  for (int64_t r = 0; r < kRows; ++r) {
    const auto row = back.get("x")[r];
    EXPECT_TRUE((row >= 1).all().item<bool>() && (row <= writers).all().item<bool>() &&
                row.equal(row.round()))
        << "row " << r;
    if (nontensor) {
      std::set<std::string> allowed;
      for (int w = 1; w <= writers; ++w) allowed.insert("v" + std::to_string(w));
      EXPECT_TRUE(allowed.count(tags[r])) << "row " << r << ": " << tags[r];
    }
  }
}

}  // namespace

TEST_F(Reliability, FourProcessesWritingDisjointRowsOfOneMemmapLoseNothing) {
  const std::string prefix = (root / "p").string();
  rows_td(true).memmap(prefix);
  disjoint_rows(prefix, 4, true);
  expect_disjoint(td::load_memmap(prefix), 4, true);
}

TEST_F(Reliability, TwoProcessesWritingNonTensorRowsOfOneMemmapLoseNothing) {
  const std::string prefix = (root / "p").string();
  rows_td(true).memmap(prefix);
  disjoint_rows(prefix, 2, true);
  expect_disjoint(td::load_memmap(prefix), 2, true);
}

TEST_F(Reliability, ThreeProcessesWritingTheSameRowsOfOneMemmapWriteWholeValues) {
  const std::string prefix = (root / "p").string();
  rows_td(true).memmap(prefix);
  std::vector<pid_t> pids;
  for (int w = 0; w < 3; ++w)
    pids.push_back(spawn_child(
        {"rows", prefix, "0", std::to_string(kRows), std::to_string(w + 1), "nontensor"}));
  for (int rc : wait_all(pids)) ASSERT_EQ(rc, 0);
  expect_whole_values(td::load_memmap(prefix), 3, true);
}

TEST_F(Reliability, ProcessesWritingRowsOfOneSharedTensordictLoseNothing) {
  auto shared = rows_td(false);
  shared.share_memory_();
  const std::string name = "shm:" + shared.shared_name();
  disjoint_rows(name, 4, false);
  expect_disjoint(shared, 4, false);
  std::vector<pid_t> pids;
  for (int w = 0; w < 3; ++w)
    pids.push_back(spawn_child({"rows", name, "0", std::to_string(kRows), std::to_string(w + 1)}));
  for (int rc : wait_all(pids)) ASSERT_EQ(rc, 0);
  expect_whole_values(shared, 3, false);
  td::unlink_shared(shared.shared_name());
}

// The threads promise (docs/errors.md): const operations from many threads at
// once on one tensordict, none writing, see consistent data.
TEST_F(Reliability, ConstOperationsFromManyThreadsAgree) {
  td::TensorDict t(std::vector<int64_t>{8});
  t.set("x", torch::arange(32, torch::kFloat).reshape({8, 4}));
  t.set({"sub", "y"}, torch::arange(8, torch::kLong));
  t.set("tag", td::NonTensorStack(nlohmann::json(std::vector<std::string>(8, "t"))));
  const td::TensorDict& shared = t;
  // What one thread sees, the reference for all.
  const auto keys = shared.keys(true, true);
  const auto tags = shared.get_non_tensor("tag");
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int n = 0; n < 200; ++n) {
        const int64_t r = (i + n) % 8;
        auto row = shared.index({r});
        if (!row.get("x").equal(torch::arange(4 * r, 4 * r + 4, torch::kFloat))) ++bad;
        if (row.get({"sub", "y"}).item<int64_t>() != r) ++bad;
        if (shared.keys(true, true) != keys) ++bad;
        if (shared.get_non_tensor("tag") != tags) ++bad;
        if (!shared.clone().get("x").equal(shared.get("x"))) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}
