#pragma once
// Multi-process test harness: a test names a scenario and a world size; the
// harness starts that many copies of this program as workers, each joins a
// Gloo group (support/gloo_group.h) through a FileStore and runs the scenario for its rank.

#include <tensordict/distributed.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <stdexcept>
#include <string>

namespace tdtest {

struct Ctx {
  int rank = 0;
  int world = 1;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  c10::intrusive_ptr<c10d::Store> store;  // outside the group: survives its failure
  std::string dir;                        // a directory of this run, shared by the ranks
  bool skip_final_barrier = false;        // set when the scenario broke the group
};

using Scenario = std::function<void(Ctx&)>;

/// Registers a scenario under `name` (from a static initializer).
bool register_scenario(const std::string& name, Scenario fn);

/// Throws std::runtime_error naming file:line and the failed condition.
#define TD_CHECK(cond)                                                                  \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                               ": check failed: " #cond);                               \
  } while (0)

/// Runs `stmt`, which must throw E; returns what().
#define TD_EXPECT_THROW(stmt, E)                                                      \
  [&]() -> std::string {                                                              \
    try {                                                                             \
      stmt;                                                                           \
    } catch (const E& e) {                                                            \
      return e.what();                                                                \
    }                                                                                 \
    throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                             ": " #stmt " did not throw " #E);                        \
  }()

#define TD_SCENARIO(name)                                                                  \
  static void scenario_##name(tdtest::Ctx& ctx);                                           \
  static const bool registered_##name = tdtest::register_scenario(#name, scenario_##name); \
  static void scenario_##name(tdtest::Ctx& ctx)

}  // namespace tdtest
