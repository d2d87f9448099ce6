// DQN on CartPole, written the tensordict way: every piece of the training
// loop passes one tensordict along (`data = model(data)`), the replay buffer
// is a memmap tensordict, the target network follows the online one by
// soft updates on parameter tensordicts, and a checkpoint is a directory of
// memmap tensordicts that another run resumes from.
//
//   train_dqn                           train 80'000 frames, evaluate; exit 0
//                                       when the greedy policy beats --threshold
//   train_dqn --seed 3 --frames 120000
//   train_dqn --dir D --stop-at 40000   train until frame 40'000, checkpoint in D
//   train_dqn --dir D --resume          continue from D's checkpoint
//
// The pieces (Mnih et al. 2015, with van Hasselt et al.'s Double DQN target):
//   data = actor(data)       the Q-network, "observation" -> "action_value",
//                            then epsilon-greedy, "action_value" -> "action"
//   data = env.step(data)    "action" -> ("next", ...)           (CartPole)
//   buffer.extend(data)      one row per environment, in a memmap ring
//   loss = loss_fn(batch)    Double DQN's Huber loss on a sampled batch
//   target_params.lerp_(online_params, tau)                      (soft update)
#include "cartpole.h"

#include <tensordict/module.h>
#include <tensordict/nn/sequential.h>
#include <tensordict/nn/tensor_dict_module.h>
#include <tensordict/schema.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/tensordict.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include "../example_support.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {

// ---- settings -------------------------------------------------------------------

// Tuned on seeds 0-9; docs/example_train_dqn.md has the results of 20 seeds.
struct Settings {
  uint64_t seed = 0;
  int64_t frames = 80'000;         // environment steps of the whole training
  std::optional<int64_t> stop_at;  // stop (and checkpoint) at this frame
  int64_t num_envs = 8;            // CartPoles stepped together
  int64_t max_steps = 500;         // episode truncation (CartPole-v1)
  int64_t buffer_size = 100'000;   // replay capacity: the whole run, nothing forgotten
  int64_t batch_size = 128;
  int64_t learning_starts = 1'000;  // frames of random play before learning
  int64_t updates_per_step = 2;     // gradient steps per step of the N envs
  double lr = 5e-4;
  double gamma = 0.99;
  double tau = 0.01;  // soft update: target += tau * (online - target)
  double eps_start = 1.0, eps_end = 0.04;
  double eps_fraction = 0.16;  // of `frames`, over which epsilon decays
  double max_grad_norm = 10.0;
  int64_t hidden = 128;
  int64_t eval_every = 4'000;   // frames between greedy evaluations
  int64_t eval_episodes = 20;   // episodes of the final evaluation
  double threshold = 150;       // the greedy mean return that passes
  std::optional<fs::path> dir;  // where the replay buffer and checkpoints live
  bool resume = false;
};

// ---- modules: read a tensordict, write into it ------------------------------

// Every module of tensordict::nn derives from TensorDictModuleBase: the
// loss and the evaluation take any of them.
using Module = std::shared_ptr<td::nn::TensorDictModuleBase>;

// The Q-network: data["action_value"] = mlp(data["observation"]), one
// Q-value per action. The MLP is the submodule "module" of the wrapper, so
// from_module() keys read {"module", "0", "weight"}.
Module make_qnet(int64_t hidden) {
  namespace nn = torch::nn;
  nn::Sequential mlp(nn::Linear(cartpole::CartPole::kObservationSize, hidden), nn::ReLU(),
                     nn::Linear(hidden, hidden), nn::ReLU(),
                     nn::Linear(hidden, cartpole::CartPole::kActions));
  return std::make_shared<td::nn::TensorDictModule>(mlp, std::vector<td::NestedKey>{"observation"},
                                                    std::vector<td::NestedKey>{"action_value"});
}

// Epsilon-greedy exploration: "action_value" -> "action", the best action or,
// with probability epsilon, a uniformly random one. A module of one's own is
// a subclass of TensorDictModuleBase with a forward_into(). The generator is
// a handle: the caller's copy sees (and checkpoints) the same state.
class EpsilonGreedy : public td::nn::TensorDictModuleBase {
 public:
  explicit EpsilonGreedy(at::Generator generator)
      : TensorDictModuleBase("EpsilonGreedy", {"action_value"}, {"action"}),
        generator_(std::move(generator)) {}
  void forward_into(const td::TensorDictBase& in, td::TensorDictBase& out) override {
    const at::Tensor q = read_inputs(in).at(0);
    const int64_t n = q.size(0);
    const at::Tensor random = at::randint(q.size(1), {n}, generator_, at::kLong);
    const at::Tensor explore = at::rand({n}, generator_).lt(epsilon);
    write_outputs(out, {at::where(explore, random, q.argmax(1))});
  }
  double epsilon = 1.0;

 private:
  at::Generator generator_;
};

// ---- the replay buffer: a ring of transitions in a memmap tensordict ---------

// The transitions in TorchRL's layout: what was seen and done, and under
// "next" what followed. "terminated" (the pole fell) stops bootstrapping;
// "truncated" (time ran out) does not: that state still had a future.
td::Schema transition_schema() {
  const int64_t obs = cartpole::CartPole::kObservationSize;
  return td::Schema{{"observation", {{obs}, at::kFloat}},
                    {"action", {{}, at::kLong}},
                    {{"next", "observation"}, {{obs}, at::kFloat}},
                    {{"next", "reward"}, {{}, at::kFloat}},
                    {{"next", "done"}, {{}, at::kBool}},
                    {{"next", "terminated"}, {{}, at::kBool}},
                    {{"next", "truncated"}, {{}, at::kBool}}};
}

struct ReplayBuffer {
  td::TensorDictBase storage;  // batch size [capacity], one file per entry
  int64_t cursor = 0;          // the next row written
  int64_t size = 0;            // rows holding a transition

  // A zero-filled ring of `capacity` rows in the memmap directory `dir`
  // (files created sparse: nothing is written until a row is).
  static ReplayBuffer create(const fs::path& dir, int64_t capacity) {
    return {td::from_schema(transition_schema(), {capacity},
                            td::storage::Memmap{.prefix = dir.string()})};
  }
  static ReplayBuffer open(const fs::path& dir, int64_t cursor, int64_t size) {
    return {td::load_memmap(dir.string()), cursor, size};
  }
  int64_t capacity() const { return storage.batch_size()[0]; }

  // Writes a batch of transitions (batch size [n], n <= capacity) at the
  // cursor, wrapping around: one index_put_ per entry, straight into the files.
  void extend(const td::TensorDictBase& batch) {
    const int64_t n = batch.batch_size()[0];
    const at::Tensor rows = at::arange(cursor, cursor + n, at::kLong).remainder_(capacity());
    storage.index_put_({rows}, batch);
    cursor = (cursor + n) % capacity();
    size = std::min(size + n, capacity());
  }

  // `n` transitions drawn uniformly with replacement: an in-memory tensordict
  // of batch size [n] (one index_select per entry).
  td::TensorDictBase sample(int64_t n, at::Generator& generator) const {
    return storage.index({at::randint(size, {n}, generator, at::kLong)});
  }
};

// ---- the loss ----------------------------------------------------------------

// Double DQN: the online network picks the next action, the target network
// values it; the Huber loss between Q(s, a) and r + gamma * Q'(s', a*).
struct DQNLoss {
  Module qnet, target;
  double gamma;

  at::Tensor operator()(td::TensorDictBase batch) {
    td::TensorDictBase next = batch.get_tensordict("next");
    at::Tensor y;
    {
      torch::NoGradGuard no_grad;
      const at::Tensor best = (*qnet)(next).get("action_value").argmax(1, true);
      const at::Tensor next_q = (*target)(next).get("action_value").gather(1, best).squeeze(1);
      y = next.get("reward") + gamma * next_q * next.get("terminated").logical_not();
    }
    batch = (*qnet)(batch);
    const at::Tensor q =
        batch.get("action_value").gather(1, batch.get("action").unsqueeze(1)).squeeze(1);
    return at::huber_loss(q, y);
  }
};

// ---- evaluation ----------------------------------------------------------------

// The returns of `episodes` episodes played at once (the first episode of each
// environment), from initial states drawn with `seed`: greedy in the
// Q-values, or uniformly random when `qnet` is null.
std::vector<double> evaluate(td::nn::TensorDictModuleBase* qnet, int64_t episodes,
                             int64_t max_steps, uint64_t seed) {
  cartpole::CartPole env(episodes, max_steps, at::make_generator<at::CPUGeneratorImpl>(seed));
  at::Generator coin = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  torch::NoGradGuard no_grad;
  td::TensorDictBase data = env.reset();
  at::Tensor returns = at::zeros({episodes}), running = at::ones({episodes}, at::kBool);
  while (running.any().item<bool>()) {
    if (qnet)
      data = (*qnet)(data).set("action", data.get("action_value").argmax(1));
    else
      data.set("action", at::randint(cartpole::CartPole::kActions, {episodes}, coin, at::kLong));
    data = env.step(data);
    returns += data.get({"next", "reward"}) * running;
    running &= data.get({"next", "done"}).logical_not();
    data = env.step_mdp(data);
  }
  at::Tensor r = returns.to(at::kDouble).contiguous();
  return {r.data_ptr<double>(), r.data_ptr<double>() + episodes};
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double mean(const std::deque<double>& v) { return mean(std::vector<double>(v.begin(), v.end())); }

// ---- the state of a run -----------------------------------------------------------

struct Trainer {
  explicit Trainer(const Settings& settings) : s(settings) {}

  Settings s;
  // The networks' initial weights come from the global generator
  // (torch::manual_seed in main); the rest of the randomness from these two.
  at::Generator rng = at::make_generator<at::CPUGeneratorImpl>(s.seed);  // sampling, exploring
  cartpole::CartPole env{s.num_envs, s.max_steps,
                         at::make_generator<at::CPUGeneratorImpl>(s.seed + 1)};
  Module qnet = make_qnet(s.hidden), target = make_qnet(s.hidden);
  // The parameters as tensordicts that share the modules' storage: an
  // in-place change to a leaf is a change to the network.
  td::TensorDictBase online_params = td::from_module(*qnet);
  td::TensorDictBase target_params = td::from_module(*target);
  torch::optim::Adam optimizer{qnet->parameters(), torch::optim::AdamOptions(s.lr)};
  std::shared_ptr<EpsilonGreedy> explore = std::make_shared<EpsilonGreedy>(rng);
  // The policy that plays: Q-values, then an action (Python's
  // TensorDictSequential(qnet, explore)).
  td::nn::TensorDictSequential actor{{qnet, explore}};
  DQNLoss loss_fn{qnet, target, s.gamma};
  ReplayBuffer buffer;
  int64_t frame = 0;
  td::TensorDictBase data;  // the current step of every environment
  at::Tensor episode_return = at::zeros({s.num_envs});
  std::deque<double> recent_returns;  // the last finished training episodes
  double best_return = -1;            // the best greedy evaluation so far
};

// ---- checkpoints ---------------------------------------------------------------
//
//   DIR/replay/               the replay buffer itself (written in place all along)
//   DIR/checkpoint/qnet/      from_module(qnet).memmap(...): a file per parameter
//   DIR/checkpoint/target/    the target network, likewise
//   DIR/checkpoint/progress/  frame count, buffer cursor, generators and
//                             environments: everything to continue exactly
//   DIR/checkpoint/adam.pt    the optimizer's moments (torch::save)
//   DIR/best/                 the Q-network of the best greedy evaluation
// A new checkpoint is written beside the old one, which it then replaces.

void save_checkpoint(Trainer& t, const fs::path& dir) {
  const fs::path next = dir / "checkpoint.new", current = dir / "checkpoint";
  fs::remove_all(next);
  td::from_module(*t.qnet).memmap((next / "qnet").string());
  td::from_module(*t.target).memmap((next / "target").string());
  td::TensorDict progress(
      {{"frame", at::scalar_tensor(t.frame, at::kLong)},
       {"buffer_cursor", at::scalar_tensor(t.buffer.cursor, at::kLong)},
       {"buffer_size", at::scalar_tensor(t.buffer.size, at::kLong)},
       {"rng", t.rng.get_state()},
       {"env_rng", t.env.generator().get_state()},
       {"env", t.env.state()},
       {"episode_return", t.episode_return},
       {"best_return", at::scalar_tensor(t.best_return, at::kDouble)},
       {"recent_returns",
        at::tensor(std::vector<double>(t.recent_returns.begin(), t.recent_returns.end()),
                   at::kDouble)}});
  progress.memmap((next / "progress").string());
  torch::save(t.optimizer, (next / "adam.pt").string());
  fs::remove_all(current);
  fs::rename(next, current);
}

void load_checkpoint(Trainer& t, const fs::path& dir) {
  const fs::path current = dir / "checkpoint";
  if (!fs::exists(current / "progress"))
    throw td::FormatError("train_dqn --resume: no checkpoint in " + dir.string());
  td::to_module(td::load_memmap((current / "qnet").string()), *t.qnet, {.strict = true});
  td::to_module(td::load_memmap((current / "target").string()), *t.target, {.strict = true});
  torch::load(t.optimizer, (current / "adam.pt").string());
  const td::TensorDictBase progress = td::load_memmap((current / "progress").string());
  t.frame = progress.get("frame").item<int64_t>();
  t.buffer = ReplayBuffer::open(dir / "replay", progress.get("buffer_cursor").item<int64_t>(),
                                progress.get("buffer_size").item<int64_t>());
  t.rng.set_state(progress.get("rng").clone());
  t.env.generator().set_state(progress.get("env_rng").clone());
  const td::TensorDictBase env_state = progress.get_tensordict("env");
  if (env_state.get("steps").size(0) != t.s.num_envs)
    throw td::ValueError("train_dqn --resume: the checkpoint in " + current.string() + " ran " +
                         std::to_string(env_state.get("steps").size(0)) +
                         " environments, this run has --envs " + std::to_string(t.s.num_envs) +
                         " (resume with the options of the first run)");
  t.env.load_state(env_state);
  t.data = t.env.observe();
  t.episode_return = progress.get("episode_return").clone();
  t.best_return = progress.get("best_return").item<double>();
  const at::Tensor recent = progress.get("recent_returns").contiguous();
  t.recent_returns.assign(recent.data_ptr<double>(), recent.data_ptr<double>() + recent.numel());
}

// ---- one step of training ----------------------------------------------------------

double epsilon_at(const Settings& s, int64_t frame) {
  const double progress = std::min(1.0, static_cast<double>(frame) / (s.eps_fraction * s.frames));
  return s.eps_start + progress * (s.eps_end - s.eps_start);
}

// Plays one step of every environment, stores the transitions, and learns.
void train_step(Trainer& t) {
  const Settings& s = t.s;
  {
    torch::NoGradGuard no_grad;
    t.explore->epsilon = epsilon_at(s, t.frame);
    t.data = t.actor(t.data);
  }
  t.data = t.env.step(t.data);
  t.buffer.extend(t.data.exclude({"action_value"}));
  t.frame += s.num_envs;

  // Bookkeeping of the training episodes' returns, for the progress lines.
  t.episode_return += t.data.get({"next", "reward"});
  const at::Tensor done = t.data.get({"next", "done"});
  if (done.any().item<bool>()) {
    at::Tensor finished = t.episode_return.masked_select(done).to(at::kDouble).contiguous();
    for (int64_t i = 0; i < finished.numel(); ++i)
      t.recent_returns.push_back(finished.data_ptr<double>()[i]);
    while (t.recent_returns.size() > 20) t.recent_returns.pop_front();
    t.episode_return.masked_fill_(done, 0.0);
  }
  t.data = t.env.step_mdp(t.data);

  if (t.frame < s.learning_starts) return;
  for (int64_t k = 0; k < s.updates_per_step; ++k) {
    at::Tensor loss = t.loss_fn(t.buffer.sample(s.batch_size, t.rng));
    t.optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(t.qnet->parameters(), s.max_grad_norm);
    t.optimizer.step();
    // The target network follows: target += tau * (online - target), every
    // parameter in one fused call (the tensordicts share the networks' storage).
    torch::NoGradGuard no_grad;
    t.target_params.lerp_(t.online_params, s.tau);
  }
}

// ---- the command line ----------------------------------------------------------------

std::optional<Settings> parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    auto next = [&] { return std::string(argv[++i]); };
    if (a == "--seed" && has_value)
      s.seed = std::stoull(next());
    else if (a == "--frames" && has_value)
      s.frames = std::stoll(next());
    else if (a == "--stop-at" && has_value)
      s.stop_at = std::stoll(next());
    else if (a == "--envs" && has_value)
      s.num_envs = std::stoll(next());
    else if (a == "--lr" && has_value)
      s.lr = std::stod(next());
    else if (a == "--tau" && has_value)
      s.tau = std::stod(next());
    else if (a == "--batch" && has_value)
      s.batch_size = std::stoll(next());
    else if (a == "--updates" && has_value)
      s.updates_per_step = std::stoll(next());
    else if (a == "--hidden" && has_value)
      s.hidden = std::stoll(next());
    else if (a == "--eps-fraction" && has_value)
      s.eps_fraction = std::stod(next());
    else if (a == "--eval-every" && has_value)
      s.eval_every = std::stoll(next());
    else if (a == "--buffer" && has_value)
      s.buffer_size = std::stoll(next());
    else if (a == "--eps-end" && has_value)
      s.eps_end = std::stod(next());
    else if (a == "--gamma" && has_value)
      s.gamma = std::stod(next());
    else if (a == "--learning-starts" && has_value)
      s.learning_starts = std::stoll(next());
    else if (a == "--threshold" && has_value)
      s.threshold = std::stod(next());
    else if (a == "--eval-episodes" && has_value)
      s.eval_episodes = std::stoll(next());
    else if (a == "--dir" && has_value)
      s.dir = next();
    else if (a == "--resume")
      s.resume = true;
    else
      return std::nullopt;
  }
  if (s.resume && !s.dir) return std::nullopt;
  return s;
}

// ---- the program ---------------------------------------------------------------------

int run(const Settings& s) {
  // One thread: the matrices are tiny, so threads would cost more than they
  // save, and one thread makes a seeded run reproducible bit for bit.
  at::set_num_threads(1);
  torch::manual_seed(s.seed);  // the networks' initial weights

  example::TempDir tmp("train_dqn");
  const fs::path dir = s.dir.value_or(tmp.path);
  const fs::path best_dir = dir / "best";
  Trainer t(s);
  if (s.resume) {
    load_checkpoint(t, dir);
    std::printf("resumed from %s at frame %lld (%lld transitions in the replay buffer)\n",
                (dir / "checkpoint").string().c_str(), static_cast<long long>(t.frame),
                static_cast<long long>(t.buffer.size));
  } else {
    for (const char* part : {"replay", "checkpoint", "best"}) fs::remove_all(dir / part);
    t.buffer = ReplayBuffer::create(dir / "replay", s.buffer_size);
    t.data = t.env.reset();
    // The target network starts as a copy of the online one.
    torch::NoGradGuard no_grad;
    t.target_params.copy_(t.online_params);
  }
  for (const auto& p : t.target->parameters()) p.set_requires_grad(false);

  const double random_return = mean(evaluate(nullptr, s.eval_episodes, s.max_steps, s.seed + 7));
  std::printf("seed %llu: random policy, mean return %.1f over %lld episodes\n",
              static_cast<unsigned long long>(s.seed), random_return,
              static_cast<long long>(s.eval_episodes));

  // DQN's greedy policy swings while it learns (a network that balances
  // for 500 steps can forget it a few thousand frames later), so the run
  // keeps the best Q-network of its periodic evaluations, in DIR/best.
  const auto start = std::chrono::steady_clock::now();
  const int64_t last = std::min(s.frames, s.stop_at.value_or(s.frames));
  int64_t next_eval = (t.frame / s.eval_every + 1) * s.eval_every;
  while (t.frame < last) {
    train_step(t);
    if (t.frame < next_eval) continue;
    next_eval += s.eval_every;
    const double greedy = mean(evaluate(t.qnet.get(), 10, s.max_steps, s.seed + 5));
    const bool best = greedy >= t.best_return;  // a tie: the later, more trained
    if (best) {
      t.best_return = greedy;
      td::from_module(*t.qnet).memmap(best_dir.string());
    }
    std::printf(
        "frame %6lld  epsilon %.2f  training return %5.1f  greedy return %5.1f%s  %5.1f s\n",
        static_cast<long long>(t.frame), epsilon_at(s, t.frame), mean(t.recent_returns), greedy,
        best ? " (best)" : "       ",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::fflush(stdout);
  }
  if (s.dir) {
    save_checkpoint(t, dir);
    std::printf("checkpoint at frame %lld in %s\n", static_cast<long long>(t.frame),
                (dir / "checkpoint").string().c_str());
  }
  if (t.frame < s.frames) return 0;  // --stop-at: the rest is for a --resume run

  // The final evaluation: fresh episodes (another seed than the periodic
  // evaluations'), the last network and the best one loaded from its files.
  const uint64_t fresh = s.seed + 1'000'003;
  const double last_return = mean(evaluate(t.qnet.get(), s.eval_episodes, s.max_steps, fresh));
  if (!fs::exists(best_dir)) {
    std::printf("FAILED: no evaluation during training (--eval-every > --frames?)\n");
    return 1;
  }
  Module best = make_qnet(s.hidden);
  td::to_module(td::load_memmap(best_dir.string()), *best, {.strict = true});
  const std::vector<double> returns = evaluate(best.get(), s.eval_episodes, s.max_steps, fresh);
  const double greedy = mean(returns);
  std::printf(
      "after %lld frames, %lld fresh episodes: last network mean return %.1f; best "
      "network mean return %.1f (min %.0f, max %.0f); random policy %.1f\n",
      static_cast<long long>(t.frame), static_cast<long long>(s.eval_episodes), last_return, greedy,
      *std::min_element(returns.begin(), returns.end()),
      *std::max_element(returns.begin(), returns.end()), random_return);
  if (random_return >= s.threshold) {
    std::printf("FAILED: the random policy reaches the threshold %.0f: it proves nothing\n",
                s.threshold);
    return 1;
  }
  if (greedy < s.threshold) {
    std::printf("FAILED: mean greedy return %.1f is below the threshold %.0f\n", greedy,
                s.threshold);
    return 1;
  }
  std::printf("PASSED: mean greedy return %.1f >= threshold %.0f (random policy: %.1f)\n", greedy,
              s.threshold, random_return);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Settings> parsed;
  try {
    parsed = parse(argc, argv);
  } catch (const std::exception&) {  // a number that does not parse
  }
  if (!parsed) {
    std::cerr << "usage: train_dqn [--seed N] [--frames N] [--dir DIR [--stop-at N] [--resume]]\n"
                 "                 [--threshold R] [--eval-every N] [--eval-episodes N]\n"
                 "                 [--envs N] [--lr X] [--tau X] [--batch N] [--updates N]\n"
                 "                 [--hidden N] [--buffer N] [--gamma X] [--eps-fraction X]\n";
    return 2;
  }
  try {
    return run(*parsed);
  } catch (const std::exception& e) {  // tensordict:: errors name what was wrong
    std::cerr << "train_dqn: " << e.what() << "\n";
    return 1;
  }
}
