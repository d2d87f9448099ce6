// The distributed replay buffer: one buffer on a Redis server (or anything
// speaking its protocol), written by N actor processes while a learner
// process samples it.
//
//   learner:  replay_buffer --storage redis --redis HOST:PORT|SOCKET --actors N
//             creates the buffer (from_schema on Redis), starts N actors (this
//             same program with --actor), samples uniformly and by priority
//             while they write, then prints the throughput of every actor and
//             the total, and the td_id to resume from;
//   actor k:  replay_buffer --actor --td-id ID --actor-index k ... attaches to
//             the buffer by id (from_store) and writes batches of transitions
//             into its own segment of rows [k*S, (k+1)*S), circularly;
//   restart:  replay_buffer --storage redis --redis ... --resume ID attaches the
//             learner to the stored buffer (and its progress and priorities)
//             and starts the actors again, which continue where they stopped.
//
// Three stores share the server, all in Python's layout:
//   ID             the transitions (Transition::schema(), batch [capacity]);
//   ID-progress    per actor (batch [N]): written (transitions in total, kept
//                  across runs), run_written and seconds (the last run), so the
//                  learner knows which rows hold data;
//   ID-priorities  the prioritized sampler's state (the leaves of its trees and
//                  the largest priority), saved by the learner.
// The rows are written by the actors with a cursor per segment kept in the
// store, which rb::ReplayBuffer's in-process writer cannot share across
// processes. So the actors write the store themselves, and the learner draws
// uniformly over the filled rows of every segment and by priority through
// the library's rb::PrioritizedSampler, reading the store directly.
// An actor updates its progress row only after its rows are written (one
// MULTI/EXEC each), so the learner samples only complete rows.
#pragma once

#include "../example_support.h"
#include "environment.h"
#include "replay_buffer.h"

#include <tensordict/storage/redis.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace replay {

using at::indexing::Slice;

struct DistributedOptions {
  std::string redis;                 // "host:port" or a Unix socket path
  td::StorageOptions redis_options;  // --redis-option key=value, forwarded to from_schema
  int64_t actors = 2;
  bool actors_given = false;
  bool actor = false;  // this process is actor `actor_index`
  int64_t actor_index = -1;
  std::string td_id;   // --td-id (actors)
  std::string resume;  // --resume (learner)
  int64_t capacity = 4096;
  int64_t steps = 3000;  // transitions per actor
  int64_t batch_size = 256;
  int64_t samples = 200;
  uint64_t seed = 0;
};

// Ids of actor k's transitions start at k * kIdStride (rewards hold ids as
// float32: exact below 2^24).
constexpr int64_t kIdStride = int64_t{1} << 20;
constexpr int64_t kMaxActors = 16;

/// The string options of from_schema(..., "redis", ...) for `o`.
inline td::StorageOptions redis_storage_options(const DistributedOptions& o) {
  td::StorageOptions options = o.redis_options;
  if (o.redis.find('/') != std::string::npos) {
    options["unix_socket"] = o.redis;
  } else {
    const auto colon = o.redis.rfind(':');
    if (colon == std::string::npos)
      throw td::ValueError("--redis: expected HOST:PORT or a Unix socket path, got '" + o.redis +
                           "'");
    options["host"] = o.redis.substr(0, colon);
    try {
      options["port"] = std::stoi(o.redis.substr(colon + 1));
    } catch (const std::exception&) {
      throw td::ValueError("--redis: bad port in '" + o.redis + "'");
    }
  }
  return options;
}

/// The connection of `o` for the store `td_id` (the same options as the
/// learner's from_schema, so a cluster flag reaches the actors too).
inline td::storage::Redis redis_store(const DistributedOptions& o, const std::string& td_id) {
  td::storage::Redis r = td::redis::options_from(redis_storage_options(o));
  r.td_id = td_id;
  return r;
}

// The prioritized sampler's state as a tensordict any storage can keep, and back.
inline td::TensorDict priorities_state(const rb::PrioritizedSampler& sampler) {
  const rb::PrioritizedSamplerState state = sampler.state();
  return td::TensorDict(
      {{"sum_leaves", state.sum_leaves},
       {"min_leaves", state.min_leaves},
       {"max_priority", at::scalar_tensor(state.max_priority, at::kDouble)},
       {"max_priority_slot", at::scalar_tensor(state.max_priority_slot, at::kLong)}});
}
inline void load_priorities_state(rb::PrioritizedSampler& sampler,
                                  const td::TensorDictBase& saved) {
  rb::PrioritizedSamplerState state = sampler.state();  // alpha, beta, eps, capacity
  state.sum_leaves = saved.get("sum_leaves").contiguous();
  state.min_leaves = saved.get("min_leaves").contiguous();
  state.max_priority = saved.get("max_priority").item<double>();
  state.max_priority_slot = saved.get("max_priority_slot").item<int64_t>();
  sampler.load_state(state);
}

// Seconds since the epoch: actors' clocks compared by the learner (one host,
// or hosts kept in step by NTP).
inline double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// One actor: attaches by id and writes `steps` transitions into its segment.
inline int run_actor(const DistributedOptions& o) {
  Transition buffer = Transition::from_tensordict(td::redis::from_store(redis_store(o, o.td_id)));
  td::TensorDictBase progress = td::redis::from_store(redis_store(o, o.td_id + "-progress"));
  const int64_t n = progress.batch_size()[0], k = o.actor_index;
  if (k < 0 || k >= n)
    throw td::ValueError("actor index " + std::to_string(k) + " out of range for " +
                         std::to_string(n) + " actors");
  const int64_t segment = buffer.batch_size()[0] / n, base = k * segment;
  int64_t written = progress.get("written")[k].item<int64_t>();
  if (written + o.steps > kIdStride)
    throw td::ValueError("actor " + std::to_string(k) + ": more than " + std::to_string(kIdStride) +
                         " transitions in all");
  double busy = 0;
  const double started = epoch_seconds();
  for (int64_t done = 0; done < o.steps;) {
    const int64_t m = std::min(o.batch_size, o.steps - done);
    td::TensorDict batch = make_batch(k * kIdStride + written, m);  // the environment's steps
    auto start = Clock::now();
    // Rows base + (written .. written + m) % segment, wrapping once at most.
    const int64_t first = written % segment, head = std::min(m, segment - first);
    buffer.index_put_({Slice(base + first, base + first + head)}, batch.index({Slice(0, head)}));
    for (int64_t at = head; at < m; at += segment) {  // a batch larger than the segment
      const int64_t len = std::min(segment, m - at);
      buffer.index_put_({Slice(base, base + len)}, batch.index({Slice(at, at + len)}));
    }
    written += m;
    done += m;
    progress.set_at_("written", at::scalar_tensor(written, at::kLong), {k});
    busy += seconds_since(start);
  }
  const double finished = epoch_seconds();
  progress.update_at_(td::TensorDict({{"run_written", at::scalar_tensor(o.steps, at::kLong)},
                                      {"seconds", at::scalar_tensor(busy, at::kDouble)},
                                      {"started", at::scalar_tensor(started, at::kDouble)},
                                      {"finished", at::scalar_tensor(finished, at::kDouble)}}),
                      {k});
  return 0;
}

/// The learner: creates or resumes the buffer, runs the actors, samples.
inline int run_learner(const DistributedOptions& o, const std::string& self) {
  const td::StorageOptions storage = redis_storage_options(o);
  Transition buffer;
  td::TensorDictBase progress;
  std::string id;
  const bool resume = !o.resume.empty();
  if (!resume) {
    if (o.actors < 1 || o.actors > kMaxActors)
      throw td::ValueError("--actors: expected 1 to " + std::to_string(kMaxActors) + ", got " +
                           std::to_string(o.actors));
    if (o.capacity < o.actors) throw td::ValueError("--capacity must be at least --actors");
    buffer = Transition::from_schema(Transition::schema(), {o.capacity}, "redis", storage);
    id = td::redis::td_id(buffer);
    const int64_t n = o.actors;
    progress =
        td::redis::from_tensordict(td::TensorDict({{"written", at::zeros({n}, at::kLong)},
                                                   {"run_written", at::zeros({n}, at::kLong)},
                                                   {"seconds", at::zeros({n}, at::kDouble)},
                                                   {"started", at::zeros({n}, at::kDouble)},
                                                   {"finished", at::zeros({n}, at::kDouble)}},
                                                  {n}),
                                   redis_store(o, id + "-progress"));
  } else {
    id = o.resume;
    buffer = Transition::from_tensordict(td::redis::from_store(redis_store(o, id)));
    progress = td::redis::from_store(redis_store(o, id + "-progress"));
    if (o.actors_given && o.actors != progress.batch_size()[0])
      throw td::ValueError("--resume: the buffer " + id + " was written by " +
                           std::to_string(progress.batch_size()[0]) + " actors, not " +
                           std::to_string(o.actors));
  }
  const int64_t n = progress.batch_size()[0];
  const int64_t capacity = buffer.batch_size()[0], segment = capacity / n;
  at::Tensor before = progress.get("written").clone();
  const int64_t written_before = before.sum().item<int64_t>();

  std::shared_ptr<rb::PrioritizedSampler> prioritized_sampler = make_prioritized_sampler(capacity);
  rb::PrioritizedSampler& sampler = *prioritized_sampler;
  std::vector<int64_t> known(static_cast<std::size_t>(n), 0);  // rows the sampler knows, per actor
  bool priorities_loaded = false;
  if (resume) {
    try {
      auto saved = td::redis::from_store(redis_store(o, id + "-priorities"));
      load_priorities_state(sampler, saved);
      priorities_loaded = true;
      for (int64_t k = 0; k < n; ++k) known[k] = before[k].item<int64_t>();
    } catch (const td::KeyError&) {  // never saved: the rows start with equal priorities
    }
  }
  // Tells the sampler about rows written since it last looked.
  auto catch_up = [&](const at::Tensor& written) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t now = written[k].item<int64_t>();
      const int64_t from = std::max(known[k], now - segment);
      if (now > from)
        sampler.on_write(at::arange(from, now, at::kLong).remainder_(segment) + k * segment);
      known[k] = now;
    }
  };

  std::cout << "distributed replay buffer: redis storage at " << o.redis << ", td_id " << id
            << "\n  capacity " << capacity << " transitions, " << n << " actors writing " << segment
            << " rows each\n";
  if (resume)
    std::cout << "resumed: " << written_before << " transitions already written"
              << (priorities_loaded ? ", priorities restored" : "") << "\n";
  std::cout << "\n";

  // ---- start the actors: this program again, attached by id ----------------
  std::vector<pid_t> pids;
  std::vector<int> status;  // exit status per actor, -1 while it runs
  // If the learner fails (the server went away, ...), its actors go too.
  struct StopActors {
    const std::vector<pid_t>& pids;
    const std::vector<int>& status;
    ~StopActors() {
      for (std::size_t k = 0; k < pids.size(); ++k)
        if (k >= status.size() || status[k] == -1) {
          kill(pids[k], SIGTERM);
          waitpid(pids[k], nullptr, 0);
        }
    }
  } stop_actors{pids, status};
  const auto spawn_start = Clock::now();
  for (int64_t k = 0; k < n; ++k) {
    std::vector<std::string> args{self,
                                  "--actor",
                                  "--redis",
                                  o.redis,
                                  "--td-id",
                                  id,
                                  "--actor-index",
                                  std::to_string(k),
                                  "--steps",
                                  std::to_string(o.steps),
                                  "--batch-size",
                                  std::to_string(o.batch_size)};
    for (const auto& [key, value] : o.redis_options)
      args.insert(args.end(),
                  {"--redis-option",
                   key + "=" + (value.is_string() ? value.get<std::string>() : value.dump())});
    std::cout.flush();
    const pid_t pid = fork();
    if (pid < 0) throw td::StorageError("cannot fork an actor");
    if (pid == 0) {
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(self.c_str(), argv.data());
      std::perror("execv");
      _exit(127);
    }
    pids.push_back(pid);
  }

  // ---- sample while they write --------------------------------------------
  at::manual_seed(static_cast<int64_t>(o.seed));
  bool ok = true, rows_ok = true;
  int64_t uniform = 0, prioritized = 0;
  double uniform_busy = 0, prioritized_busy = 0;
  status.assign(static_cast<std::size_t>(n), -1);
  auto running = [&] {
    bool any = false;
    for (int64_t k = 0; k < n; ++k) {
      if (status[k] != -1) continue;
      int st = 0;
      if (waitpid(pids[k], &st, WNOHANG) == pids[k])
        status[k] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      else
        any = true;
    }
    return any;
  };
  int64_t samples_during = 0;
  for (bool alive = true; alive || uniform < o.samples;) {
    alive = running();
    at::Tensor written = progress.get("written");  // one round trip
    catch_up(written);
    // Rows holding data: the first min(written, segment) of every segment.
    at::Tensor filled = written.clamp_max(segment);
    const int64_t total = filled.sum().item<int64_t>();
    if (total == 0) {
      if (!alive) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    auto start = Clock::now();
    // Uniform over the filled rows: draw a rank, map it into its segment.
    at::Tensor rank = at::randint(total, {o.batch_size}, at::kLong);
    at::Tensor ends = filled.cumsum(0), owner = at::searchsorted(ends, rank, false, true);
    at::Tensor rows = owner * segment + rank - (ends - filled).index_select(0, owner);
    Transition batch = Transition::from_tensordict(buffer.index({rows}));  // one round trip
    uniform_busy += seconds_since(start);
    start = Clock::now();
    const at::Tensor pick = sampler.sample(capacity, o.batch_size, nullptr).index;
    Transition picked = Transition::from_tensordict(buffer.index({pick}));
    // A stand-in for the learner's |TD error|: episode ends matter more.
    sampler.update_priority(pick, picked.done().to(at::kFloat) * 10 + 0.1);
    prioritized_busy += seconds_since(start);
    rows_ok &= whole_transitions(batch) && whole_transitions(picked);
    ++uniform;
    ++prioritized;
    if (alive) ++samples_during;
  }
  const double wall = seconds_since(spawn_start);
  for (int64_t k = 0; k < n; ++k)
    ok &= example::check(status[k] == 0, "actor " + std::to_string(k) + " exited with status " +
                                             std::to_string(status[k]));

  // ---- throughput per actor and in total ------------------------------------
  at::Tensor written = progress.get("written"), run = progress.get("run_written");
  at::Tensor secs = progress.get("seconds");
  // From the first actor's first write to the last actor's last one.
  const double span =
      (progress.get("finished").max() - progress.get("started").min()).item<double>();
  std::cout << "actors (each: write its batches of " << o.batch_size
            << " transitions + its progress row)\n";
  for (int64_t k = 0; k < n; ++k)
    report("actor " + std::to_string(k), run[k].item<int64_t>(), "transitions",
           secs[k].item<double>());
  const int64_t run_total = run.sum().item<int64_t>();
  std::cout << "  total: " << run_total << " transitions written by " << n << " actors in "
            << std::fixed << std::setprecision(2) << span
            << " s: " << rate(static_cast<double>(run_total), span) << " transitions/s (" << wall
            << " s with the actors' start-up)\n";
  std::cout << "learner (while the actors wrote: " << samples_during << " rounds)\n";
  report("uniform sample of " + std::to_string(o.batch_size), uniform, "batches", uniform_busy);
  report("prioritized sample+update", prioritized, "batches", prioritized_busy);
  std::cout << "  in the store: " << written.sum().item<int64_t>()
            << " transitions written in all\n";

  ok &= example::check(run_total == n * o.steps, "every actor wrote all its transitions");
  ok &= example::check(written.sum().item<int64_t>() == written_before + n * o.steps,
                       "the progress counts add up");
  ok &= example::check(rows_ok, "sampled rows are whole transitions, also during the writes");
  // The newest rows of every segment hold the newest transitions of its actor.
  for (int64_t k = 0; k < n; ++k) {
    const int64_t w = written[k].item<int64_t>(), m = std::min({w, segment, int64_t{512}});
    if (m == 0) continue;
    at::Tensor ids = at::arange(w - m, w, at::kLong);
    Transition last =
        Transition::from_tensordict(buffer.index({ids.remainder(segment) + k * segment}));
    ok &= example::check(
        last.reward().to(at::kLong).equal(ids + k * kIdStride) && whole_transitions(last),
        "actor " + std::to_string(k) + "'s newest rows are in the store");
  }

  // ---- what a restarted learner needs ---------------------------------------
  td::redis::from_tensordict(priorities_state(sampler), redis_store(o, id + "-priorities"));
  std::cout
      << "\nrestart the learner from the store with:\n  replay_buffer --storage redis --redis "
      << o.redis << " --resume " << id << "\n";
  std::cout << (ok ? "all checks passed\n" : "SOME CHECKS FAILED\n");
  return ok ? 0 : 1;
}

}  // namespace replay
