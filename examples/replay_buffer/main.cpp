// The README's main example: an RL replay buffer on tensordict.
//
// It pre-allocates a buffer from a typed schema (memmap by default) and keeps
// it in a tensordict::rb::ReplayBuffer (replay_buffer.h), writes
// transitions of a synthetic environment one at a time and in batches,
// samples batches uniformly and with priorities (updating them), checks every
// sampled row against what was written, and reopens the buffer from its
// directory as a restarted process would, with its write position intact.
//
//   replay_buffer [--storage memmap|memory|shared] [--dir DIR] [--fresh]
//                 [--capacity N] [--steps N] [--batches N] [--batch-size B]
//                 [--samples N] [--seed S] [--progress|--no-progress]
//
// With --dir the buffer stays in DIR, and the next run with the same --dir
// resumes it (unless --fresh). Without --dir it lives in a temporary
// directory removed at exit.
#include "environment.h"
#include "replay_buffer.h"
#ifdef TENSORDICT_EXAMPLE_WITH_REDIS
#include "distributed.h"
#endif

#include <tensordict/tensordict.h>

#include "../example_support.h"

#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

namespace td = tensordict;
namespace fs = std::filesystem;
namespace rb = tensordict::rb;
using replay::Buffer;
using replay::Clock;
using replay::make_batch;
using replay::make_transition;
using replay::report;
using replay::seconds_since;
using replay::Transition;

namespace {

struct Options {
  std::string storage = "memmap";
  std::optional<fs::path> dir;
  bool fresh = false;
  int64_t capacity = 4096;
  int64_t steps = 3000;
  int64_t batches = 16;
  int64_t batch_size = 256;
  int64_t samples = 200;
  uint64_t seed = 0;
  bool progress = isatty(STDERR_FILENO) != 0;
  // The distributed buffer (--storage redis, distributed.h).
  std::string redis;
  std::vector<std::string> redis_options;  // key=value
  int64_t actors = 2;
  bool actors_given = false;
  bool actor = false;
  int64_t actor_index = -1;
  std::string td_id;
  std::string resume;
};

[[noreturn]] void usage(const std::string& error) {
  std::cerr << (error.empty() ? "" : "replay_buffer: " + error + "\n")
            << "usage: replay_buffer [--storage NAME] [--dir DIR] [--fresh] [--capacity N]\n"
               "                     [--steps N] [--batches N] [--batch-size B] [--samples N]\n"
               "                     [--seed S] [--progress|--no-progress]\n"
               "distributed (a learner and N actor processes on one Redis buffer):\n"
               "       replay_buffer --storage redis --redis HOST:PORT|SOCKET [--actors N]\n"
               "                     [--redis-option KEY=VALUE]... [--resume TD_ID] [...]\n"
               "storages in this build:";
  for (const auto& s : td::available_storages()) std::cerr << " " << s;
  std::cerr << "\n";
  std::exit(error.empty() ? 0 : 2);
}

Options parse(int argc, char** argv) {
  Options o;
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage("");
    if (arg == "--fresh") {
      o.fresh = true;
      continue;
    }
    if (arg == "--progress") {
      o.progress = true;
      continue;
    }
    if (arg == "--no-progress") {
      o.progress = false;
      continue;
    }
    if (arg == "--actor") {  // started by the learner of a distributed run
      o.actor = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) usage("unexpected argument " + arg);
    std::string value;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(arg + " needs a value");
    }
    if (arg == "--redis-option")
      o.redis_options.push_back(value);
    else
      values[arg] = value;
  }
  auto integer = [&](const char* name, int64_t& out, int64_t min) {
    auto it = values.find(name);
    if (it == values.end()) return;
    try {
      size_t used = 0;
      out = std::stoll(it->second, &used);
      if (used != it->second.size() || out < min) throw std::invalid_argument("");
    } catch (const std::exception&) {
      usage(std::string(name) + " wants an integer >= " + std::to_string(min) + ", got " +
            it->second);
    }
    values.erase(it);
  };
  integer("--capacity", o.capacity, 1);
  integer("--steps", o.steps, 0);
  integer("--batches", o.batches, 0);
  integer("--batch-size", o.batch_size, 1);
  integer("--samples", o.samples, 0);
  int64_t seed = 0;
  integer("--seed", seed, 0);
  o.actors_given = values.count("--actors") > 0;
  integer("--actors", o.actors, 1);
  integer("--actor-index", o.actor_index, 0);
  for (auto [name, field] : {std::pair{"--redis", &o.redis}, std::pair{"--td-id", &o.td_id},
                             std::pair{"--resume", &o.resume}})
    if (auto it = values.find(name); it != values.end()) {
      *field = it->second;
      values.erase(it);
    }
  o.seed = static_cast<uint64_t>(seed);
  if (auto it = values.find("--storage"); it != values.end()) {
    o.storage = it->second;
    values.erase(it);
  }
  if (auto it = values.find("--dir"); it != values.end()) {
    o.dir = fs::path(it->second);
    values.erase(it);
  }
  if (!values.empty()) usage("unknown option " + values.begin()->first);
  if (o.actor) o.storage = "redis";
  const bool distributed = !o.redis.empty() || o.actors_given || o.actor || !o.resume.empty() ||
                           !o.redis_options.empty();
  if (o.storage == "redis" || distributed) {
#ifdef TENSORDICT_EXAMPLE_WITH_REDIS
    if (o.storage != "redis") usage("--redis, --actors and --resume are for --storage redis");
    if (o.redis.empty()) usage("--storage redis needs --redis HOST:PORT or a Unix socket path");
    if (o.actor && (o.td_id.empty() || o.actor_index < 0))
      usage("--actor needs --td-id and --actor-index");
    for (const auto& kv : o.redis_options)
      if (kv.find('=') == std::string::npos || kv.front() == '=')
        usage("--redis-option wants KEY=VALUE, got " + kv);
    return o;
#else
    usage("the redis storage is not in this build (configure with -DTENSORDICT_WITH_REDIS=ON)");
#endif
  }
  const auto names = td::available_storages();
  if (std::find(names.begin(), names.end(), o.storage) == names.end())
    usage("unknown storage " + o.storage);
  if (o.dir && o.storage != "memmap") usage("--dir is for the memmap storage");
  return o;
}

// Every row of `batch` is a whole transition of the environment, from the
// last `size` written.
bool consistent(const Transition& batch, const Buffer& buffer) {
  at::Tensor ids = batch.reward().to(at::kLong);
  return replay::whole_transitions(batch) &&
         ids.ge(buffer.total_written() - buffer.size()).all().item<bool>() &&
         ids.lt(buffer.total_written()).all().item<bool>();
}

// ---- output -----------------------------------------------------------------

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, bool enabled)
      : label_(std::move(label)), total_(total), enabled_(enabled && total > 0) {}
  void update(int64_t done) {
    if (!enabled_) return;
    auto now = Clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const int width = 30;
    const int filled = static_cast<int>(width * done / total_);
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r  %-16s [%s%s] %3d%% %lld/%lld %8.0f/s", label_.c_str(),
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 static_cast<int>(100 * done / total_), static_cast<long long>(done),
                 static_cast<long long>(total_), secs > 0 ? done / secs : 0.0);
    if (done == total_) std::fprintf(stderr, "\n");
  }

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
};

#ifdef TENSORDICT_EXAMPLE_WITH_REDIS
// A learner or an actor of the distributed buffer (distributed.h).
int run_distributed(const Options& opt, const char* argv0) {
  replay::DistributedOptions d;
  d.redis = opt.redis;
  for (const auto& kv : opt.redis_options) {
    const auto eq = kv.find('=');
    const std::string value = kv.substr(eq + 1);
    // Numbers and booleans as JSON (port=6380, cluster=true), the rest as text.
    nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
    d.redis_options[kv.substr(0, eq)] =
        parsed.is_discarded() || parsed.is_object() || parsed.is_array() ? nlohmann::json(value)
                                                                         : parsed;
  }
  d.actors = opt.actors;
  d.actors_given = opt.actors_given;
  d.actor = opt.actor;
  d.actor_index = opt.actor_index;
  d.td_id = opt.td_id;
  d.resume = opt.resume;
  d.capacity = opt.capacity;
  d.steps = opt.steps;
  d.batch_size = opt.batch_size;
  d.samples = opt.samples;
  d.seed = opt.seed;
  try {
    if (d.actor) return replay::run_actor(d);
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    return replay::run_learner(d, ec ? std::string(argv0) : self.string());
  } catch (const td::Error& e) {
    std::cerr << "replay_buffer" << (d.actor ? " actor " + std::to_string(d.actor_index) : "")
              << ": " << e.what() << "\n";
    return 1;
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef __GLIBC__
  // Every sample allocates its batch (256 transitions: two 5 MiB frame leaves)
  // and frees it a moment later. By default glibc may give such blocks back to
  // the kernel and fault fresh zeroed pages in at the next batch, which made a
  // prioritized sample 3x slower here; keep them in the heap for reuse.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  Options opt = parse(argc, argv);
#ifdef TENSORDICT_EXAMPLE_WITH_REDIS
  if (opt.storage == "redis") return run_distributed(opt, argv[0]);
#endif
  at::manual_seed(static_cast<int64_t>(opt.seed));

  std::unique_ptr<example::TempDir> temp;
  if (opt.storage == "memmap" && !opt.dir) {
    temp = std::make_unique<example::TempDir>("replay_buffer");
    opt.dir = temp->path;
  }

  // ---- create, or resume what an earlier run left ---------------------------
  const bool resume = opt.dir && !opt.fresh && Buffer::exists(*opt.dir);
  Buffer rb = resume ? Buffer::open(*opt.dir) : Buffer::create(opt.capacity, opt.storage, opt.dir);
  rb.buffer().manual_seed(opt.seed);
  // A shared-memory segment outlives the process unless it is unlinked; this
  // one is the example's own, so it goes when the example ends.
  struct UnlinkShared {
    std::string name;
    ~UnlinkShared() {
      try {
        if (!name.empty()) td::unlink_shared(name);
      } catch (const td::Error& e) {
        std::cerr << "replay_buffer: " << e.what() << "\n";
      }
    }
  } const own_segment{opt.storage == "shared" ? rb.buffer().storage().shared_name()
                                              : std::string()};
  // Uniform batches come from a second sampler over the same rows; the
  // buffer's own sampler is the prioritized one.
  rb::RandomSampler uniform;

  const double kb_per_row = 84 * 84 * 3 * 2 / 1024.0 + (4 * 4 + 4 + 1) / 1024.0;
  std::cout << "replay buffer: " << opt.storage << " storage"
            << (opt.dir ? " in " + opt.dir->string() : std::string()) << ", capacity "
            << rb.capacity() << " transitions of " << std::fixed << std::setprecision(1)
            << kb_per_row << " KiB\n";
  if (resume)
    std::cout << "resumed at write position " << rb.cursor() << " (" << rb.size()
              << " transitions stored, " << rb.total_written() << " written so far)\n";
  std::cout << "\n";

  bool ok = true;

  // ---- write one transition at a time ---------------------------------------
  {
    ProgressBar bar("write 1 by 1", opt.steps, opt.progress);
    double busy = 0;
    for (int64_t k = 0; k < opt.steps; ++k) {
      td::TensorDict t = make_transition(rb.total_written());
      auto start = Clock::now();
      rb.buffer().add(t);
      busy += seconds_since(start);
      bar.update(k + 1);
    }
    report("write 1 by 1", opt.steps, "transitions", busy);
  }

  // ---- write batches (vectorised environments) -------------------------------
  {
    ProgressBar bar("write batches", opt.batches, opt.progress);
    double busy = 0;
    for (int64_t k = 0; k < opt.batches; ++k) {
      td::TensorDict batch = make_batch(rb.total_written(), opt.batch_size);
      auto start = Clock::now();
      rb.buffer().extend(batch);
      busy += seconds_since(start);
      bar.update(k + 1);
    }
    report("write batches of " + std::to_string(opt.batch_size), opt.batches * opt.batch_size,
           "transitions", busy);
  }
  ok &= example::check(rb.size() == std::min(rb.capacity(), rb.total_written()), "fill level");

  // ---- uniform sampling --------------------------------------------------------
  if (rb.size() > 0) {
    ProgressBar bar("uniform sample", opt.samples, opt.progress);
    double busy = 0;
    bool rows_ok = true;
    for (int64_t k = 0; k < opt.samples; ++k) {
      auto start = Clock::now();
      Transition batch = rb.at(uniform.sample(rb.size(), opt.batch_size, nullptr).index);
      busy += seconds_since(start);
      rows_ok &= consistent(batch, rb);
      bar.update(k + 1);
    }
    report("uniform sample of " + std::to_string(opt.batch_size), opt.samples, "batches", busy);
    ok &= example::check(rows_ok, "uniformly sampled rows are whole transitions");
  }

  // ---- prioritized sampling: done transitions get a large TD error -------------
  if (rb.size() > 0) {
    ProgressBar bar("prioritized", opt.samples, opt.progress);
    double busy = 0;
    bool rows_ok = true;
    int64_t drawn = 0, done_drawn = 0;
    for (int64_t k = 0; k < opt.samples; ++k) {
      auto start = Clock::now();
      td::TensorDict picked = rb.buffer().sample(opt.batch_size);  // + index, priority_weight
      Transition batch = Transition::from_tensordict(picked);
      busy += seconds_since(start);
      rows_ok &= consistent(batch, rb);
      // A stand-in for the learner's |TD error| (a learner would also scale its
      // loss by picked["priority_weight"], the importance weights).
      picked.set("td_error", batch.done().to(at::kFloat) * 10 + 0.1);
      rb.buffer().update_tensordict_priority(picked);
      if (k >= opt.samples / 2) {  // once most priorities are known
        drawn += opt.batch_size;
        done_drawn += batch.done().sum().item<int64_t>();
      }
      bar.update(k + 1);
    }
    report("prioritized sample+update", opt.samples, "batches", busy);
    ok &= example::check(rows_ok, "prioritized rows are whole transitions");
    if (drawn > 0) {
      const double share = static_cast<double>(done_drawn) / static_cast<double>(drawn);
      std::cout << "  prioritized: " << std::setprecision(1) << 100 * share
                << "% of sampled transitions are episode ends (2.0% of the data)\n";
      if (opt.samples >= 20 && rb.size() >= 200)
        ok &= example::check(share > 0.06, "high-priority transitions are drawn more often");
    }
  }

  // ---- restart: reopen the directory as a new process would --------------------
  if (opt.dir) {
    rb.flush();
    if (rb.size() > 0) {
      at::Tensor probe =
          uniform.sample(rb.size(), std::min<int64_t>(opt.batch_size, rb.size()), nullptr).index;
      Transition before = rb.at(probe);
      auto start = Clock::now();
      Buffer reopened = Buffer::open(*opt.dir);
      const double secs = seconds_since(start);
      Transition after = reopened.at(probe);
      ok &= example::check(reopened.cursor() == rb.cursor() && reopened.size() == rb.size() &&
                               reopened.total_written() == rb.total_written(),
                           "write position survives a restart");
      ok &= example::check((before == after).all(), "stored transitions survive a restart");
      ok &= example::check(
          reopened.priorities().sum_tree().get(probe).equal(rb.priorities().sum_tree().get(probe)),
          "priorities survive a restart");
      std::cout << "\nreopened " << opt.dir->string() << " in " << std::setprecision(2)
                << 1e3 * secs << " ms: write position " << reopened.cursor() << ", "
                << reopened.size() << " stored, " << reopened.total_written()
                << " written in all\n";
      if (!temp) std::cout << "run again with --dir " << opt.dir->string() << " to resume\n";
    }
  }

  std::cout << (ok ? "all checks passed\n" : "SOME CHECKS FAILED\n");
  return ok ? 0 : 1;
}
