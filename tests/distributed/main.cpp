// The gtest cases of tensordict::distributed: each starts `world` worker
// processes of this very program and checks that all of them exit 0 within
// the time limit (a hang is a failure, and the workers are killed).

#include "harness.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "support/gloo_group.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tdtest {
namespace {

std::map<std::string, Scenario>& registry() {
  static std::map<std::string, Scenario> r;
  return r;
}

int run_worker(const std::string& name, int rank, int world, const std::string& dir) {
  try {
    auto it = registry().find(name);
    if (it == registry().end()) throw std::runtime_error("unknown scenario " + name);
    auto store = c10::make_intrusive<c10d::FileStore>(dir + "/store", world);
    Ctx ctx;
    ctx.rank = rank;
    ctx.world = world;
    ctx.dir = dir;
    ctx.store = store;
    ctx.pg = td_test::make_gloo_group(store, rank, world, std::chrono::seconds(60));
    it->second(ctx);
    // Every rank is done before any exits (a peer closing early is an error
    // for the others).
    if (!ctx.skip_final_barrier) ctx.pg->barrier()->wait();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << " failed: " << e.what() << std::endl;
    return 1;
  }
}

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

// Starts the workers, waits for them (killing all after `limit`), returns
// "" when every one exited 0, else what went wrong with their stderr.
std::string run_scenario(const std::string& name, int world,
                         std::chrono::seconds limit = std::chrono::seconds(120)) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "td-dist-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return "mkdtemp failed";
  const std::string dir = tmpl;
  const std::string exe = self_exe();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args{exe, "--worker", name, std::to_string(r), std::to_string(world),
                                  dir};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir + "/rank" + std::to_string(r) + ".log";
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 2, 1);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return "posix_spawn failed";
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<int> status(world, -1);
  int running = world;
  bool timed_out = false;
  while (running > 0) {
    for (int r = 0; r < world; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --running;
      }
    }
    if (running == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      for (int r = 0; r < world; ++r)
        if (status[r] == -1) kill(pids[r], SIGKILL);
      for (int r = 0; r < world; ++r)
        if (status[r] == -1) waitpid(pids[r], &status[r], 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ostringstream report;
  bool ok = !timed_out;
  for (int r = 0; r < world; ++r) {
    const bool good = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
    ok = ok && good;
    if (!good || timed_out) {
      std::ifstream in(dir + "/rank" + std::to_string(r) + ".log");
      report << "rank " << r << (timed_out ? " (killed after the time limit)" : "") << " status "
             << status[r] << ":\n"
             << in.rdbuf() << "\n";
    }
  }
  std::error_code ec;
  if (ok) fs::remove_all(dir, ec);
  return ok ? std::string() : report.str() + "(files kept in " + dir + ")";
}

}  // namespace

bool register_scenario(const std::string& name, Scenario fn) {
  registry()[name] = std::move(fn);
  return true;
}

}  // namespace tdtest

#define TD_DIST_TEST(name, world) \
  TEST(Distributed, name) { EXPECT_EQ(tdtest::run_scenario(#name, world), ""); }

TD_DIST_TEST(send_recv_every_dtype, 2)
TD_DIST_TEST(send_recv_each_mode, 2)
TD_DIST_TEST(empty_batch_and_empty_leaves, 2)
TD_DIST_TEST(init_remote_builds_the_tensordict, 2)
TD_DIST_TEST(lazy_stack, 2)
TD_DIST_TEST(memmap_data, 2)
TD_DIST_TEST(structure_mismatch_both_sides, 2)
TD_DIST_TEST(mismatch_across_sizes_and_modes, 2)
TD_DIST_TEST(isend_irecv, 2)
TD_DIST_TEST(ring_of_four, 4)
TD_DIST_TEST(broadcast, 3)
TD_DIST_TEST(broadcast_mismatch, 3)
TD_DIST_TEST(all_reduce, 4)
TD_DIST_TEST(all_gather, 3)
TD_DIST_TEST(timeout_and_bad_ranks, 2)
TD_DIST_TEST(protocol_misuse, 2)
TD_DIST_TEST(both_ranks_receive, 2)
TD_DIST_TEST(consolidated_buffer_reuse, 2)
TD_DIST_TEST(reduce_to_one_rank, 3)
TD_DIST_TEST(gather_and_stack_onto_dst, 3)
TD_DIST_TEST(receiver_checks, 2)
TD_DIST_TEST(receiver_checks_against_both_sides, 2)
TD_DIST_TEST(both_sides_against_receiver_checks, 2)
TD_DIST_TEST(auto_threshold_is_2_mib, 2)
TD_DIST_TEST(hostile_eager_messages, 2)
TD_DIST_TEST(hostile_checked_messages, 2)
TD_DIST_TEST(sender_listens_for_the_next_expectation, 2)
TD_DIST_TEST(listening_receive_serves_swapped_roles, 2)
TD_DIST_TEST(listening_receive_goes_with_its_group, 2)
TD_DIST_TEST(own_messages_on_the_tag_stay_apart, 2)
TD_DIST_TEST(leaf_receives_posted_ahead_on_the_wire, 2)
TD_DIST_TEST(leaf_receives_posted_ahead, 2)
TD_DIST_TEST(hostile_received_json, 2)
TD_DIST_TEST(expanded_leaf_refuses_to_receive, 2)
TD_DIST_TEST(expanded_leaf_in_collectives, 2)
TD_DIST_TEST(absurd_leaf_receive_count, 2)
TD_DIST_TEST(slow_peer_filling_leaf_receives, 2)
TD_DIST_TEST(peer_dies_during_staged_recv, 2)
TD_DIST_TEST(peer_dies_during_in_place_recv, 2)
TD_DIST_TEST(oversized_raw_messages, 2)

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--worker")
    return tdtest::run_worker(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), argv[5]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
