// A policy written and trained in Python, exported by export_policy.py
// (TorchScript, or an AOTInductor package with --aoti), driven from C++ actor
// threads through one BatchingRunner, each actor stepping its own CartPole and
// writing its transitions into a replay buffer: a memory-mapped tensordict
// ring that every actor writes into.
//
//   python examples/policy/export_policy.py MODELS
//   policy_actors --models MODELS [--aoti] [--actors N] [--steps N]
//                 [--capacity N] [--max-batch N] [--buffer DIR]
//
// Then it checks what it wrote, read back from the files: every step is in the
// buffer once; each action is the one the same policy computes when run
// directly, in one call, on the stored observations; each next observation is
// the CartPole step of the stored observation and action. It prints "all
// checks passed" or what failed, and exits non-zero on a failure. See
// docs/nn_batching.md.
#include <tensordict/nn/batching_runner.h>
#include <tensordict/nn/script_module.h>
#include <tensordict/tensordict.h>
#if defined(TENSORDICT_HAVE_AOTI) && __has_include(<tensordict/nn/aoti_module.h>)
#include <tensordict/nn/aoti_module.h>
#define POLICY_ACTORS_WITH_AOTI 1
#endif

#include <torch/torch.h>

#include "example_support.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {

// ---- CartPole (the classic control task's dynamics, Euler steps) --------------

// The state is the observation: cart position and velocity, pole angle and
// angular velocity, in float32, so that a stored observation and action give
// the stored next observation exactly when stepped again.
using State = std::array<float, 4>;

struct StepResult {
  State next;
  bool terminated;
};

StepResult cartpole_step(const State& s, int64_t action) {
  constexpr float kGravity = 9.8f, kCartMass = 1.0f, kPoleMass = 0.1f, kHalfLength = 0.5f;
  constexpr float kForce = 10.0f, kTau = 0.02f;
  constexpr float kTotalMass = kCartMass + kPoleMass, kPoleMoment = kPoleMass * kHalfLength;
  const float force = action == 1 ? kForce : -kForce;
  const float cos_theta = std::cos(s[2]), sin_theta = std::sin(s[2]);
  const float temp = (force + kPoleMoment * s[3] * s[3] * sin_theta) / kTotalMass;
  const float theta_acc =
      (kGravity * sin_theta - cos_theta * temp) /
      (kHalfLength * (4.0f / 3.0f - kPoleMass * cos_theta * cos_theta / kTotalMass));
  const float x_acc = temp - kPoleMoment * theta_acc * cos_theta / kTotalMass;
  State next{s[0] + kTau * s[1], s[1] + kTau * x_acc, s[2] + kTau * s[3], s[3] + kTau * theta_acc};
  constexpr float kMaxAngle = 12.0f * 2.0f * static_cast<float>(M_PI) / 360.0f;
  const bool terminated = std::abs(next[0]) > 2.4f || std::abs(next[2]) > kMaxAngle;
  return {next, terminated};
}

class CartPole {
 public:
  static constexpr int kMaxSteps = 200;  // an episode is truncated there

  explicit CartPole(uint64_t seed) : rng_(seed) { reset(); }
  const State& state() const { return state_; }
  void reset() {
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (float& v : state_) v = u(rng_);
    steps_ = 0;
  }
  // One step; returns (terminated, truncated). The caller resets on either.
  std::pair<bool, bool> step(int64_t action) {
    auto [next, terminated] = cartpole_step(state_, action);
    state_ = next;
    ++steps_;
    return {terminated, !terminated && steps_ >= kMaxSteps};
  }

 private:
  std::mt19937_64 rng_;
  State state_{};
  int steps_ = 0;
};

at::Tensor to_tensor(const State& s) { return torch::tensor({s[0], s[1], s[2], s[3]}); }

// ---- options ----------------------------------------------------------------

struct Options {
  fs::path models;
  bool aoti = false;
  int64_t actors = 4;
  int64_t steps = 250;   // per actor
  int64_t capacity = 0;  // 0: actors * steps (nothing overwritten)
  int64_t max_batch = 32;
  std::optional<fs::path> buffer;
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::cerr << "policy_actors: " << error << "\n";
  std::cerr << "usage: policy_actors --models DIR [--aoti] [--actors N] [--steps N]\n"
               "                     [--capacity N] [--max-batch N] [--buffer DIR]\n"
               "DIR holds what examples/policy/export_policy.py DIR wrote.\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage("");
    if (arg == "--aoti") {
      o.aoti = true;
      continue;
    }
    if (i + 1 >= argc) usage(arg + " needs a value");
    const std::string value = argv[++i];
    auto integer = [&](int64_t min) {
      try {
        const int64_t v = std::stoll(value);
        if (v >= min) return v;
      } catch (const std::exception&) {
      }
      usage(arg + " needs an integer >= " + std::to_string(min) + ", got " + value);
    };
    if (arg == "--models") {
      o.models = value;
    } else if (arg == "--buffer") {
      o.buffer = value;
    } else if (arg == "--actors") {
      o.actors = integer(1);
    } else if (arg == "--steps") {
      o.steps = integer(1);
    } else if (arg == "--capacity") {
      o.capacity = integer(1);
    } else if (arg == "--max-batch") {
      o.max_batch = integer(1);
    } else {
      usage("unknown option " + arg);
    }
  }
  if (o.models.empty()) usage("--models is required");
  if (o.capacity == 0) o.capacity = o.actors * o.steps;
  return o;
}

// ---- the policy ---------------------------------------------------------------

// export_policy.py's policy: {"observation": float[B, 4]} -> {"action":
// int64[B], "policy": {"logits": float[B, 2]}}. TorchScript spells the nested
// key "policy.logits" (its dicts hold one value type); the AOTInductor
// package keeps the nested dict.
std::shared_ptr<td::nn::TensorDictModuleBase> load_policy(const Options& o) {
  const std::vector<td::NestedKey> in_keys{"observation"};
  const std::vector<td::NestedKey> out_keys{"action", {"policy", "logits"}};
  if (o.aoti) {
#ifdef POLICY_ACTORS_WITH_AOTI
    return std::make_shared<td::nn::AOTITensorDictModule>(
        (o.models / "policy.pt2").string(),
        td::nn::DictCall{in_keys, td::nn::KeyLayout::nested(), out_keys});
#else
    usage("--aoti: this build has no AOTInductor support (LibTorch 2.6 or later needed)");
#endif
  }
  return td::nn::ScriptTensorDictModule::load(
      (o.models / "policy_scripted.pt").string(),
      td::nn::DictCall{in_keys, td::nn::KeyLayout::flattened("."), out_keys});
}

// ---- the replay buffer ----------------------------------------------------------

// A fixed-capacity ring of transitions in a memory-mapped tensordict, written
// by many actor threads: a write takes the next slot and copies the
// transition into that row under a lock (a tensordict is not written from two
// threads at once).
class TransitionRing {
 public:
  // `example` is one transition (batch size []): the ring holds `capacity`
  // rows of its structure, zero-filled, in files under `dir`.
  TransitionRing(const td::TensorDictBase& example, int64_t capacity, const fs::path& dir)
      : capacity_(capacity) {
    td::TensorDictBase zeros = example.apply(
        [&](const at::Tensor& leaf) {
          std::vector<int64_t> shape{capacity};
          shape.insert(shape.end(), leaf.sizes().begin(), leaf.sizes().end());
          return at::zeros(shape, leaf.options());
        },
        std::vector<int64_t>{capacity});
    storage_ = zeros.memmap(dir.string());
  }

  void add(const td::TensorDictBase& transition) {
    std::lock_guard lock(mutex_);
    // The slot is taken under the lock: once the ring wraps, a row holds the
    // later of the transitions that share it.
    const int64_t slot = written_.fetch_add(1) % capacity_;
    storage_.index_put_({slot}, transition);
  }
  int64_t written() const { return written_.load(); }
  int64_t size() const { return std::min(written(), capacity_); }

 private:
  int64_t capacity_;
  td::TensorDictBase storage_;
  std::atomic<int64_t> written_{0};
  std::mutex mutex_;
};

td::TensorDict transition(const State& obs, const td::TensorDictBase& policy_out, const State& next,
                          float reward, bool terminated, bool truncated, int64_t actor,
                          int64_t step) {
  return td::TensorDict({
      {"observation", to_tensor(obs)},
      {"action", policy_out.get("action")},
      {"policy", td::TensorDict({{"logits", policy_out.get({"policy", "logits"})}})},
      {"reward", torch::tensor(reward)},
      {"done", torch::tensor(terminated || truncated)},
      {"terminated", torch::tensor(terminated)},
      {"next", td::TensorDict({{"observation", to_tensor(next)}})},
      {"actor", torch::tensor(actor)},
      {"step", torch::tensor(step)},
  });
}

// ---- the actors -------------------------------------------------------------------

struct ActorReport {
  int64_t episodes = 0;
  int64_t episode_steps = 0;  // steps of the finished episodes
  std::string error;          // what stopped the actor, if anything did
};

void run_actor(int64_t id, const Options& o, td::nn::BatchingRunner& runner,
               std::optional<TransitionRing>& ring, std::once_flag& ring_made,
               const fs::path& ring_dir, ActorReport& report) {
  CartPole env(1000 + static_cast<uint64_t>(id));
  int64_t episode_steps = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    const State obs = env.state();
    td::TensorDictBase out = runner.run(td::TensorDict({{"observation", to_tensor(obs)}}));
    const int64_t action = out.get("action").item<int64_t>();
    auto [terminated, truncated] = env.step(action);
    auto t = transition(obs, out, env.state(), 1.0f, terminated, truncated, id, step);
    // The ring takes the structure of the first transition.
    std::call_once(ring_made, [&] { ring.emplace(t, o.capacity, ring_dir); });
    ring->add(t);
    ++episode_steps;
    if (terminated || truncated) {
      ++report.episodes;
      report.episode_steps += episode_steps;
      episode_steps = 0;
      env.reset();
    }
  }
}

// ---- the checks ---------------------------------------------------------------------

bool check_buffer(const Options& o, const td::TensorDictBase& stored,
                  td::nn::TensorDictModuleBase& policy) {
  bool ok = true;
  const int64_t total = o.actors * o.steps;
  const int64_t rows = std::min(total, o.capacity);
  ok &= example::check(stored.batch_size()[0] == o.capacity, "the buffer has its capacity");

  // Every (actor, step) once: the last `rows` steps written are all there.
  at::Tensor id = stored.get("actor") * o.steps + stored.get("step");
  at::Tensor distinct = std::get<0>(at::_unique(id));
  ok &= example::check(distinct.numel() == rows, "each stored row is a different step (" +
                                                     std::to_string(distinct.numel()) +
                                                     " distinct of " + std::to_string(rows) + ")");

  // The actions: the policy run directly, in one call, on the stored
  // observations (no runner, no batching by threads) gives the same.
  td::TensorDictBase direct;
  {
    torch::NoGradGuard no_grad;
    direct = policy.forward(
        td::TensorDict({{"observation", stored.get("observation")}}, {stored.batch_size()[0]}));
  }
  ok &= example::check(torch::equal(direct.get("action"), stored.get("action")),
                       "stored actions equal the policy run directly on the stored observations");
  ok &= example::check(torch::allclose(direct.get({"policy", "logits"}),
                                       stored.get({"policy", "logits"}), 1e-5, 1e-6),
                       "stored logits equal the policy's");
  ok &= example::check(
      torch::equal(stored.get({"policy", "logits"}).argmax(-1), stored.get("action")),
      "each action is the argmax of its logits");

  // The environment: each next observation is the CartPole step of the
  // stored observation and action, bit for bit.
  const at::Tensor obs_t = stored.get("observation"), next_t = stored.get({"next", "observation"});
  const at::Tensor actions_t = stored.get("action"), terminated_t = stored.get("terminated");
  auto obs = obs_t.accessor<float, 2>();
  auto next = next_t.accessor<float, 2>();
  auto actions = actions_t.accessor<int64_t, 1>();
  auto terminated = terminated_t.accessor<bool, 1>();
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const State s{obs[r][0], obs[r][1], obs[r][2], obs[r][3]};
    auto [n, term] = cartpole_step(s, actions[r]);
    bool same = term == terminated[r];
    for (int k = 0; k < 4; ++k) same = same && n[k] == next[r][k];
    wrong += same ? 0 : 1;
  }
  ok &= example::check(wrong == 0,
                       "next observations are the CartPole steps of the stored "
                       "observations and actions (" +
                           std::to_string(wrong) + " wrong)");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  at::set_num_threads(1);  // the actors and the runner already use the cores
  std::optional<example::TempDir> temp;
  fs::path ring_dir;
  if (o.buffer) {
    ring_dir = *o.buffer;
    fs::remove_all(ring_dir);
  } else {
    temp.emplace("policy_actors");
    ring_dir = temp->path / "buffer";
  }

  try {
    auto policy = load_policy(o);
    policy->eval();
    td::nn::BatchingRunnerOptions runner_options;
    runner_options.max_batch = static_cast<std::size_t>(o.max_batch);
    td::nn::BatchingRunner runner(policy, runner_options);

    std::optional<TransitionRing> ring;
    std::once_flag ring_made;
    std::vector<ActorReport> reports(static_cast<std::size_t>(o.actors));
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> actors;
    for (int64_t a = 0; a < o.actors; ++a) {
      actors.emplace_back([&, a] {
        at::init_num_threads();
        auto& report = reports[static_cast<std::size_t>(a)];
        try {
          run_actor(a, o, runner, ring, ring_made, ring_dir, report);
        } catch (const td::Error& e) {
          report.error = e.what();
        }
      });
    }
    for (auto& actor : actors) actor.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    runner.close();

    const auto stats = runner.stats();
    int64_t episodes = 0, episode_steps = 0;
    bool ok = true;
    for (const auto& r : reports) {
      episodes += r.episodes;
      episode_steps += r.episode_steps;
      ok &= example::check(r.error.empty(), "an actor stopped: " + r.error);
    }
    if (!ring) {
      std::cerr << "policy_actors: no transition was written\n";
      return 1;
    }
    std::cout << (o.aoti ? "AOTInductor" : "TorchScript") << " policy, " << o.actors << " actors x "
              << o.steps << " steps: " << ring->written() << " transitions written in " << seconds
              << " s (" << static_cast<double>(ring->written()) / seconds << " steps/s)\n"
              << "runner: " << stats.batched_forwards << " forward calls, "
              << static_cast<double>(stats.rows_succeeded) /
                     static_cast<double>(std::max<std::uint64_t>(stats.batched_forwards, 1))
              << " rows per call (largest " << stats.largest_batch << "), " << stats.rows_failed
              << " failed\n"
              << "episodes finished: " << episodes << ", mean length "
              << (episodes ? static_cast<double>(episode_steps) / static_cast<double>(episodes) : 0)
              << " steps\n";

    const int64_t total = o.actors * o.steps;
    ok &= example::check(ring->written() == total, "every step wrote one transition");
    ok &= example::check(
        stats.rows_succeeded == static_cast<std::uint64_t>(total) && stats.rows_failed == 0,
        "every policy call succeeded");
    ok &= example::check(o.actors == 1 || stats.batched_forwards < static_cast<uint64_t>(total),
                         "the runner batched rows of several actors");
    ok &= example::check(stats.largest_batch <= static_cast<uint64_t>(o.max_batch),
                         "no batch exceeded --max-batch");
    // What is on disk, not what is in this process's tensordict.
    td::TensorDictBase stored = td::load_memmap(ring_dir.string());
    ok &= check_buffer(o, stored, *policy);
    std::cout << (ok ? "all checks passed" : "SOME CHECKS FAILED") << "\n";
    return ok ? 0 : 1;
  } catch (const td::Error& e) {
    std::cerr << "policy_actors: " << e.what() << "\n";
    return 1;
  }
}
