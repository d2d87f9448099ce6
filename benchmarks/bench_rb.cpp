// tensordict::rb next to hand-written floors, on a memory buffer of 100,000
// tiny transitions (5 leaves: obs float[4], action int64, reward float,
// done bool, next/obs float[4]):
//   rb_add            ReplayBuffer::add of one transition  | memcpy of each leaf's bytes
//   rb_extend256      extend of 256                        | memcpy of each leaf's 256 rows
//   rb_sample256      uniform sample of 256 (+ "index")    | randint + index_select per leaf
//   rb_prioritized256 prioritized sample of 256 + priority | flat-array sum/min trees by hand,
//                     update of the 256 rows               | index_select per leaf, the same
//                                                          | weights and updates
//   rb_sumtree256     SumTree set of 256 + find_prefix_sum | a flat-array sum tree by hand
//                     of 256                               |
//   rb_sample256_without_replacement                       | a randperm per epoch, the next
//                     SamplerWithoutReplacement sample of  | 256 of it, index_select per leaf
//                     256                                  |
//   rb_slice256       SliceSampler (slice_len 16, ends at  | trajectories from the done flags
//                     ("next", "done")) sample of 256      | with torch ops, 16 random starts,
//                                                          | index_select per leaf, the
//                                                          | truncated/done/terminated flags
//   rb_maxvalue_extend256                                  | a std heap of (rank, row) and a
//                     TensorDictMaxValueWriter extend of   | memcpy of each kept item's rows
//                     256 (rank ("next", "reward"))        |
// The last three store 7 leaves (the 5 above, next/done and next/reward: one
// episode ends on average every 50 rows). Every buffer is filled before timing.
// The cursor shared by processes (rb/shared_cursor.h), on the same memory
// buffer attached with a MappedCursor in /dev/shm:
//   rb_add_shared     add of one transition                | atomic fetch-add on a mapped
//   rb_extend256_shared extend of 256                      | word, the memcpys, the ordered
//                                                          | commit (compare-exchange)
// With the Redis component: 4 writer processes (forked once, each with its
// own connection) writing one Redis store of 65,536 rows, each 16 extends of
// 64 transitions per iteration (rows/s over the 4):
//   rb_redis_4writers ReplayBuffer::attach + RedisCursor   | hiredis by hand: INCRBY, the
//                     extend                               | SETRANGEs of each leaf in
//                                                          | MULTI/EXEC, the ordered commit
//                                                          | script, into the same keys
#include <benchmark/benchmark.h>
#include "bench_main.h"

#include <tensordict/rb/replay_buffer.h>
#include <tensordict/rb/segment_tree.h>
#include <tensordict/rb/shared_cursor.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#ifdef TENSORDICT_BENCH_RB_REDIS
#include <tensordict/rb/redis_cursor.h>
#include <tensordict/storage/redis.h>

#include "redis_bench_rows.h"
#include "support/redis_server.h"
#endif

namespace td = tensordict;
namespace rb = tensordict::rb;

namespace {

constexpr int64_t kCapacity = 100'000;
constexpr int64_t kBatch = 256;

td::TensorDict transitions(int64_t n) {
  return td::TensorDict({{"obs", torch::randn({n, 4})},
                         {"action", torch::randint(4, {n}, torch::kLong)},
                         {"reward", torch::randn({n})},
                         {"done", torch::rand({n}).lt(0.02)},
                         {"next", td::TensorDict({{"obs", torch::randn({n, 4})}}, {n})}},
                        {n});
}

std::vector<torch::Tensor> leaves(const td::TensorDictBase& d) {
  return {d.get("obs"), d.get("action"), d.get("reward"), d.get("done"), d.get({"next", "obs"})};
}

// The transitions of the slice and max-value rows: next/done ends an episode,
// next/reward ranks a transition.
td::TensorDict episode_steps(int64_t n) {
  torch::Tensor done = torch::rand({n}).lt(0.02);
  return td::TensorDict({{"obs", torch::randn({n, 4})},
                         {"action", torch::randint(4, {n}, torch::kLong)},
                         {"reward", torch::randn({n})},
                         {"done", done},
                         {"next", td::TensorDict({{"obs", torch::randn({n, 4})},
                                                  {"done", done.clone()},
                                                  {"reward", torch::randn({n})}},
                                                 {n})}},
                        {n});
}

std::vector<torch::Tensor> episode_leaves(const td::TensorDictBase& d) {
  return {d.get("obs"),           d.get("action"),         d.get("reward"),          d.get("done"),
          d.get({"next", "obs"}), d.get({"next", "done"}), d.get({"next", "reward"})};
}

// The raw storage of the floors: the same 5 leaves, filled.
std::vector<torch::Tensor> raw_storage() { return leaves(transitions(kCapacity)); }

// A floor's sample: the rows `idx` of every raw leaf, then `idx` (the "index" entry).
std::vector<torch::Tensor> gather(const std::vector<torch::Tensor>& src, const torch::Tensor& idx) {
  std::vector<torch::Tensor> out;
  out.reserve(src.size() + 4);
  for (const auto& t : src) out.push_back(t.index_select(0, idx));
  out.push_back(idx);
  return out;
}

rb::ReplayBuffer filled(std::shared_ptr<rb::Sampler> sampler = nullptr) {
  rb::ReplayBuffer buffer(kCapacity, std::move(sampler));
  buffer.extend(transitions(kCapacity));
  return buffer;
}

// A flat-array tree by hand: node 1 the root, leaf i at node L + i.
struct FlatTree {
  int64_t leaves = 1;
  std::vector<double> sum, min;
  explicit FlatTree(int64_t capacity) {
    while (leaves < capacity) leaves <<= 1;
    sum.assign(static_cast<size_t>(2 * leaves), 0.0);
    min.assign(static_cast<size_t>(2 * leaves), std::numeric_limits<double>::infinity());
  }
  void set(int64_t i, double w, bool with_min) {
    int64_t n = leaves + i;
    sum[n] = w;
    if (with_min) min[n] = w;
    for (n >>= 1; n >= 1; n >>= 1) {
      sum[n] = sum[2 * n] + sum[2 * n + 1];
      if (with_min) min[n] = std::min(min[2 * n], min[2 * n + 1]);
    }
  }
  int64_t find(double mass) const {
    int64_t n = 1;
    while (n < leaves) {
      const double left = sum[2 * n];
      if (mass < left || sum[2 * n + 1] <= 0.0) {
        n = 2 * n;
      } else {
        mass -= left;
        n = 2 * n + 1;
      }
    }
    return n - leaves;
  }
};

// Times buffer.sample(kBatch), or `floor` (the same work by hand) for the floor row.
template <bool kFloor, class Floor>
void time_samples(benchmark::State& state, rb::ReplayBuffer& buffer, Floor&& floor) {
  for (auto _ : state) {
    if constexpr (kFloor) {
      floor();
    } else {
      td::TensorDict s = buffer.sample(kBatch);
      benchmark::DoNotOptimize(s);
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

template <bool kFloor>
void add_one(benchmark::State& state) {
  rb::ReplayBuffer buffer = filled();
  td::TensorDict one = transitions(1)[0];
  std::vector<torch::Tensor> dst = raw_storage();
  std::vector<torch::Tensor> src = leaves(one);
  int64_t row = 0;
  for (auto _ : state) {
    if constexpr (kFloor) {
      memcpy_rows(dst, src, row, 1);
      row = (row + 1) % kCapacity;
      benchmark::DoNotOptimize(row);
    } else {
      benchmark::DoNotOptimize(buffer.add(one));
    }
  }
  state.SetItemsProcessed(state.iterations());
}

// The floor's copy of an extend: each leaf's kBatch rows from row `cursor`,
// wrapping as the buffer does (a head before the end, the rest at 0).
void memcpy_wrapped(const std::vector<torch::Tensor>& dst, const std::vector<torch::Tensor>& src,
                    int64_t cursor) {
  const int64_t head = std::min(kBatch, kCapacity - cursor);
  for (size_t k = 0; k < dst.size(); ++k) {
    const size_t row = src[k].nbytes() / kBatch;
    char* to = static_cast<char*>(dst[k].data_ptr());
    const char* from = static_cast<const char*>(src[k].data_ptr());
    std::memcpy(to + cursor * row, from, head * row);
    std::memcpy(to, from + head * row, (kBatch - head) * row);
  }
}

template <bool kFloor>
void extend256(benchmark::State& state) {
  rb::ReplayBuffer buffer = filled();
  td::TensorDict batch = transitions(kBatch);
  std::vector<torch::Tensor> dst = raw_storage();
  std::vector<torch::Tensor> src = leaves(batch);
  int64_t cursor = 0;
  for (auto _ : state) {
    if constexpr (kFloor) {
      memcpy_wrapped(dst, src, cursor);
      torch::Tensor rows =
          torch::arange(cursor, cursor + kBatch, torch::kLong).remainder_(kCapacity);
      cursor = (cursor + kBatch) % kCapacity;
      benchmark::DoNotOptimize(rows);
    } else {
      benchmark::DoNotOptimize(buffer.extend(batch));
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

template <bool kFloor>
void sample256(benchmark::State& state) {
  rb::ReplayBuffer buffer = filled();
  std::vector<torch::Tensor> src = raw_storage();
  time_samples<kFloor>(state, buffer, [&] {
    torch::Tensor idx = torch::randint(kCapacity, {kBatch}, torch::kLong);
    benchmark::DoNotOptimize(gather(src, idx));
  });
}

template <bool kFloor>
void prioritized256(benchmark::State& state) {
  const double alpha = 0.6, beta = 0.4, eps = 1e-8;
  rb::ReplayBuffer buffer =
      filled(std::make_shared<rb::PrioritizedSampler>(kCapacity, alpha, beta, eps));
  std::vector<torch::Tensor> src = raw_storage();
  FlatTree tree(kCapacity);
  for (int64_t i = 0; i < kCapacity; ++i) tree.set(i, std::pow(1.0 + eps, alpha), true);
  torch::Tensor priorities = torch::rand({kBatch}, torch::kDouble) * 10;
  for (auto _ : state) {
    if constexpr (kFloor) {
      const double total = tree.sum[1], smallest = tree.min[1];
      torch::Tensor mass = torch::rand({kBatch}, torch::kDouble).mul_(total);
      torch::Tensor idx = torch::empty({kBatch}, torch::kLong);
      torch::Tensor weight = torch::empty({kBatch}, torch::kFloat);
      const double* m = mass.data_ptr<double>();
      int64_t* ix = idx.data_ptr<int64_t>();
      float* w = weight.data_ptr<float>();
      for (int64_t b = 0; b < kBatch; ++b) {
        ix[b] = std::min(tree.find(m[b]), kCapacity - 1);
        w[b] = static_cast<float>(std::pow(tree.sum[tree.leaves + ix[b]] / smallest, -beta));
      }
      std::vector<torch::Tensor> out;
      out.reserve(src.size() + 2);
      for (const auto& t : src) out.push_back(t.index_select(0, idx));
      out.push_back(idx);
      out.push_back(weight);
      const double* p = priorities.data_ptr<double>();
      for (int64_t b = 0; b < kBatch; ++b) tree.set(ix[b], std::pow(p[b] + eps, alpha), true);
      benchmark::DoNotOptimize(out);
    } else {
      td::TensorDict s = buffer.sample(kBatch);
      buffer.update_priority(s.get("index"), priorities);
      benchmark::DoNotOptimize(s);
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

template <bool kFloor>
void sumtree256(benchmark::State& state) {
  rb::SumTree tree(kCapacity);
  FlatTree flat(kCapacity);
  tree.set(torch::arange(kCapacity, torch::kLong), torch::ones({kCapacity}, torch::kDouble));
  for (int64_t i = 0; i < kCapacity; ++i) flat.set(i, 1.0, false);
  torch::Tensor idx = torch::randint(kCapacity, {kBatch}, torch::kLong);
  torch::Tensor val = torch::rand({kBatch}, torch::kDouble) + 0.5;
  torch::Tensor unit = torch::rand({kBatch}, torch::kDouble);
  for (auto _ : state) {
    if constexpr (kFloor) {
      const int64_t* i = idx.data_ptr<int64_t>();
      const double* v = val.data_ptr<double>();
      for (int64_t k = 0; k < kBatch; ++k) flat.set(i[k], v[k], false);
      torch::Tensor out = torch::empty({kBatch}, torch::kLong);
      int64_t* o = out.data_ptr<int64_t>();
      const double* u = unit.data_ptr<double>();
      const double total = flat.sum[1];
      for (int64_t k = 0; k < kBatch; ++k) o[k] = flat.find(u[k] * total);
      benchmark::DoNotOptimize(out);
    } else {
      tree.set(idx, val);
      torch::Tensor out = tree.find_prefix_sum(unit * tree.total());
      benchmark::DoNotOptimize(out);
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

template <bool kFloor>
void sample256_without_replacement(benchmark::State& state) {
  rb::ReplayBuffer buffer = filled(std::make_shared<rb::SamplerWithoutReplacement>());
  std::vector<torch::Tensor> src = raw_storage();
  torch::Tensor order;
  int64_t next = kCapacity;  // a new epoch at the first sample
  time_samples<kFloor>(state, buffer, [&] {
    if (next >= kCapacity) {
      order = torch::randperm(kCapacity, torch::kLong);
      next = 0;
    }
    const int64_t n = std::min(kBatch, kCapacity - next);  // the epoch's last batch is shorter
    torch::Tensor idx = order.slice(0, next, next + n);
    next += n;
    benchmark::DoNotOptimize(gather(src, idx));
  });
}

template <bool kFloor>
void slice256(benchmark::State& state) {
  constexpr int64_t kSliceLen = 16, kSlices = kBatch / kSliceLen;
  rb::SliceSamplerOptions options;
  options.slice_len = kSliceLen;
  options.end_key = td::NestedKey{"next", "done"};
  rb::ReplayBuffer buffer(kCapacity, std::make_shared<rb::SliceSampler>(options));
  td::TensorDict data = episode_steps(kCapacity);
  buffer.extend(data);  // full, the last row written is the last row
  std::vector<torch::Tensor> src = episode_leaves(data);
  const torch::Tensor stored_done = data.get({"next", "done"});
  time_samples<kFloor>(state, buffer, [&] {
    // Trajectories end at each done flag and at the row written last.
    torch::Tensor ends = stored_done.clone();
    ends[kCapacity - 1] = true;
    torch::Tensor stops = ends.nonzero().squeeze(1);
    torch::Tensor starts = torch::cat({torch::zeros({1}, torch::kLong), stops.slice(0, 0, -1) + 1});
    torch::Tensor lengths = stops - starts + 1;
    torch::Tensor fit = lengths.ge(kSliceLen);
    torch::Tensor fit_starts = starts.masked_select(fit), fit_len = lengths.masked_select(fit);
    torch::Tensor pick = torch::randint(fit_starts.numel(), {kSlices}, torch::kLong);
    torch::Tensor room = fit_len.index_select(0, pick) - (kSliceLen - 1);
    torch::Tensor offset = (torch::rand({kSlices}, torch::kDouble) * room).floor().to(torch::kLong);
    torch::Tensor first = fit_starts.index_select(0, pick) + offset;
    torch::Tensor idx =
        (first.unsqueeze(1) + torch::arange(kSliceLen, torch::kLong)).reshape({kBatch});
    std::vector<torch::Tensor> out = gather(src, idx);
    torch::Tensor truncated = torch::zeros({kSlices, kSliceLen}, torch::kBool);
    truncated.select(1, kSliceLen - 1).fill_(true);
    truncated = truncated.reshape({kBatch});
    out[5] = out[5].logical_or(truncated);  // next/done or'ed with the slice end
    out.push_back(truncated);
    out.push_back(torch::zeros({kBatch}, torch::kBool));  // next/terminated: none stored
    benchmark::DoNotOptimize(out);
  });
}

template <bool kFloor>
void maxvalue_extend256(benchmark::State& state) {
  rb::ReplayBuffer buffer(kCapacity, nullptr, "memory", {},
                          std::make_shared<rb::TensorDictMaxValueWriter>());
  td::TensorDict data = episode_steps(kCapacity);
  buffer.extend(data);
  td::TensorDict batch = episode_steps(kBatch);
  // The floor: a min-heap of (rank, row) over the same filled storage.
  std::vector<torch::Tensor> dst = episode_leaves(data.clone());
  std::vector<torch::Tensor> src = episode_leaves(batch);
  using Entry = std::pair<double, int64_t>;
  std::vector<Entry> heap;
  {
    const float* r = dst[6].data_ptr<float>();
    for (int64_t i = 0; i < kCapacity; ++i) heap.emplace_back(r[i], i);
    std::make_heap(heap.begin(), heap.end(), std::greater<>());
  }
  std::vector<size_t> row_bytes;
  row_bytes.reserve(src.size());
  for (const auto& t : src) row_bytes.push_back(t.nbytes() / kBatch);
  for (auto _ : state) {
    if constexpr (kFloor) {
      torch::Tensor rows = torch::full({kBatch}, -1, torch::kLong);
      int64_t* out = rows.data_ptr<int64_t>();
      const float* rank = src[6].data_ptr<float>();
      for (int64_t k = 0; k < kBatch; ++k) {
        if (rank[k] <= heap.front().first) continue;  // ranks too low: dropped
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        const int64_t row = heap.back().second;
        heap.back() = {rank[k], row};
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
        for (int64_t j = 0; j < k; ++j)  // an earlier item of the batch on that row is lost
          if (out[j] == row) out[j] = -1;
        out[k] = row;
        for (size_t leaf = 0; leaf < dst.size(); ++leaf)
          std::memcpy(static_cast<char*>(dst[leaf].data_ptr()) + row * row_bytes[leaf],
                      static_cast<const char*>(src[leaf].data_ptr()) + k * row_bytes[leaf],
                      row_bytes[leaf]);
      }
      benchmark::DoNotOptimize(rows);
    } else {
      benchmark::DoNotOptimize(buffer.extend(batch));
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

// A cursor file in /dev/shm, removed when the benchmark ends.
struct ShmCursorFile {
  std::filesystem::path path = "/dev/shm/td-bench-rb-cursor-" + std::to_string(::getpid());
  ShmCursorFile() { std::filesystem::remove(path); }
  ~ShmCursorFile() { std::filesystem::remove(path); }
};

// The floor of the shared cursor: the two counters in one shared anonymous
// page (as the cursor file), reserved with fetch_add and committed in order
// with compare_exchange, around the same memcpys.
struct RawCursor {
  std::atomic<int64_t>* reserved;
  std::atomic<int64_t>* committed;
  void* page;
  RawCursor() {
    page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    reserved = new (static_cast<char*>(page) + 64) std::atomic<int64_t>(0);
    committed = new (static_cast<char*>(page) + 128) std::atomic<int64_t>(0);
  }
  ~RawCursor() { ::munmap(page, 4096); }
  int64_t reserve(int64_t n) { return reserved->fetch_add(n, std::memory_order_acq_rel); }
  void commit(int64_t first, int64_t n) {
    int64_t expected = first;
    while (!committed->compare_exchange_weak(expected, first + n, std::memory_order_acq_rel))
      expected = first;
  }
};

rb::ReplayBuffer attached_filled(const std::filesystem::path& cursor_file) {
  auto cursor = std::make_shared<rb::MappedCursor>(cursor_file, kCapacity);
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(transitions(kCapacity), cursor);
  cursor->reset(kCapacity);  // filled
  return buffer;
}

template <bool kFloor>
void add_shared(benchmark::State& state) {
  ShmCursorFile file;
  rb::ReplayBuffer buffer = attached_filled(file.path);
  td::TensorDict one = transitions(1)[0];
  std::vector<torch::Tensor> dst = raw_storage();
  std::vector<torch::Tensor> src = leaves(one);
  RawCursor raw;
  for (auto _ : state) {
    if constexpr (kFloor) {
      const int64_t ticket = raw.reserve(1);
      const int64_t row = ticket % kCapacity;
      memcpy_rows(dst, src, row, 1);
      raw.commit(ticket, 1);
      benchmark::DoNotOptimize(row);
    } else {
      benchmark::DoNotOptimize(buffer.add(one));
    }
  }
  state.SetItemsProcessed(state.iterations());
}

template <bool kFloor>
void extend256_shared(benchmark::State& state) {
  ShmCursorFile file;
  rb::ReplayBuffer buffer = attached_filled(file.path);
  td::TensorDict batch = transitions(kBatch);
  std::vector<torch::Tensor> dst = raw_storage();
  std::vector<torch::Tensor> src = leaves(batch);
  RawCursor raw;
  for (auto _ : state) {
    if constexpr (kFloor) {
      const int64_t ticket = raw.reserve(kBatch);
      memcpy_wrapped(dst, src, ticket % kCapacity);
      torch::Tensor rows =
          torch::arange(ticket, ticket + kBatch, torch::kLong).remainder_(kCapacity);
      raw.commit(ticket, kBatch);
      benchmark::DoNotOptimize(rows);
    } else {
      benchmark::DoNotOptimize(buffer.extend(batch));
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

#ifdef TENSORDICT_BENCH_RB_REDIS

constexpr int64_t kRedisCapacity = 65'536;
constexpr int kWriters = 4;
constexpr int64_t kWriterBatch = 64;
constexpr int kWriterExtends = 16;

td_test::RedisServer& redis_server() {
  static auto s = std::make_unique<td_test::RedisServer>();
  return *s;
}

// kWriters processes forked once; each makes its job with make(writer) (its
// own connection) and runs it whenever the parent says so through a pipe.
class WriterProcesses {
 public:
  using Job = std::function<void()>;
  explicit WriterProcesses(const std::function<Job(int)>& make) {
    for (int w = 0; w < kWriters; ++w) {
      int go[2], done[2];
      if (::pipe(go) != 0 || ::pipe(done) != 0) throw std::runtime_error("pipe failed");
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(go[1]);
        ::close(done[0]);
        char answer = 'k';
        Job job;
        try {
          job = make(w);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "writer %d: %s\n", w, e.what());
          answer = 'e';
        }
        char command = 0;
        while (::read(go[0], &command, 1) == 1 && command == 'g') {
          if (answer == 'k') try {
              job();
            } catch (const std::exception& e) {
              std::fprintf(stderr, "writer %d: %s\n", w, e.what());
              answer = 'e';
            }
          if (::write(done[1], &answer, 1) != 1) break;
        }
        ::_exit(0);
      }
      ::close(go[0]);
      ::close(done[1]);
      children_.push_back({pid, go[1], done[0]});
    }
  }
  ~WriterProcesses() {
    for (const Child& c : children_) {
      // 'q', not end of file: the later children hold copies of this pipe.
      [[maybe_unused]] const auto sent = ::write(c.go, "q", 1);
      ::close(c.go);
      ::close(c.done);
      ::waitpid(c.pid, nullptr, 0);
    }
  }
  // Every writer runs its job once, all at the same time; false on an error.
  bool run() {
    bool ok = true;
    for (const Child& c : children_) ok = ::write(c.go, "g", 1) == 1 && ok;
    for (const Child& c : children_) {
      char answer = 'e';
      ok = ::read(c.done, &answer, 1) == 1 && answer == 'k' && ok;
    }
    return ok;
  }

 private:
  struct Child {
    pid_t pid;
    int go, done;
  };
  std::vector<Child> children_;
};

td::storage::Redis redis_options(const std::string& td_id) {
  td::storage::Redis r{.host = "127.0.0.1", .port = redis_server().port()};
  r.td_id = td_id;
  return r;
}

// The commit the floor runs: the commit counter moves from ARGV[1] to
// ARGV[2] only when it is at ARGV[1].
constexpr const char* kFloorCommit =
    "if tonumber(redis.call('GET', KEYS[1]) or '0') == tonumber(ARGV[1]) then "
    "redis.call('SET', KEYS[1], ARGV[2]) return 1 end return 0";

template <bool kFloor>
void redis_4writers(benchmark::State& state) {
  const std::string td_id = kFloor ? "rb-floor" : "rb-tensordict";
  td::TensorDictBase store = td::from_schema(td::Schema{{"obs", {{4}, at::kFloat}},
                                                        {"action", {{}, at::kLong}},
                                                        {"reward", {{}, at::kFloat}},
                                                        {"done", {{}, at::kBool}},
                                                        {{"next", "obs"}, {{4}, at::kFloat}}},
                                             {kRedisCapacity}, redis_options(td_id));
  // Each writer's job: kWriterExtends extends of kWriterBatch transitions.
  std::function<WriterProcesses::Job(int)> make;
  if constexpr (!kFloor) {
    make = [td_id](int) -> WriterProcesses::Job {
      auto buffer = std::make_shared<rb::ReplayBuffer>(rb::ReplayBuffer::attach(
          td::TensorDictStore::from_store(redis_options(td_id)),
          std::make_shared<rb::RedisCursor>(redis_options(td_id), kRedisCapacity)));
      auto batch = std::make_shared<td::TensorDict>(transitions(kWriterBatch));
      return [buffer, batch] {
        for (int i = 0; i < kWriterExtends; ++i) buffer->extend(*batch);
      };
    };
  } else {
    make = [store, td_id](int) -> WriterProcesses::Job {
      std::shared_ptr<redisContext> c(redisConnect("127.0.0.1", redis_server().port()), redisFree);
      if (!c || c->err) throw std::runtime_error("no connection");
      const td::TensorDict batch = transitions(kWriterBatch);
      struct Leaf {
        std::string key;
        std::string bytes;  // the batch's rows
        int64_t row_bytes;
      };
      auto leaves_of = std::make_shared<std::vector<Leaf>>();
      for (const char* path : {"obs", "action", "reward", "done", "next.obs"}) {
        const td::NestedKey key =
            std::string(path) == "next.obs" ? td::NestedKey{"next", "obs"} : td::NestedKey{path};
        const torch::Tensor t = batch.get(key).contiguous();
        leaves_of->push_back({td::redis::server_key(store, std::string("d:") + path),
                              std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()),
                              static_cast<int64_t>(t.nbytes()) / kWriterBatch});
      }
      const std::string reserved = td::redis::server_key(store, "floor_reserved");
      const std::string committed = td::redis::server_key(store, "floor_committed");
      return [c, leaves_of, reserved, committed] {
        for (int i = 0; i < kWriterExtends; ++i) {
          auto* r = static_cast<redisReply*>(redisCommand(
              c.get(), "INCRBY %s %lld", reserved.c_str(), static_cast<long long>(kWriterBatch)));
          const int64_t first = r->integer - kWriterBatch;
          freeReplyObject(r);
          const int64_t row = first % kRedisCapacity;
          const int64_t head = std::min(kWriterBatch, kRedisCapacity - row);
          std::size_t sent = 2;
          redis_bench::append_command(c.get(), {"MULTI"});
          std::vector<std::string> offsets;
          offsets.reserve(2 * leaves_of->size());
          for (const Leaf& leaf : *leaves_of) {
            const std::string_view bytes(leaf.bytes);
            offsets.push_back(std::to_string(row * leaf.row_bytes));
            redis_bench::append_command(
                c.get(), {"SETRANGE", leaf.key, offsets.back(),
                          bytes.substr(0, static_cast<std::size_t>(head * leaf.row_bytes))});
            ++sent;
            if (head < kWriterBatch) {
              redis_bench::append_command(
                  c.get(), {"SETRANGE", leaf.key, "0",
                            bytes.substr(static_cast<std::size_t>(head * leaf.row_bytes))});
              ++sent;
            }
          }
          redis_bench::append_command(c.get(), {"EXEC"});
          for (std::size_t k = 0; k < sent; ++k) {
            void* reply = nullptr;
            redisGetReply(c.get(), &reply);
            freeReplyObject(reply);
          }
          const std::string from = std::to_string(first), to = std::to_string(first + kWriterBatch);
          for (;;) {
            auto* done =
                static_cast<redisReply*>(redisCommand(c.get(), "EVAL %s 1 %s %s %s", kFloorCommit,
                                                      committed.c_str(), from.c_str(), to.c_str()));
            const bool ok = done->integer == 1;
            freeReplyObject(done);
            if (ok) break;
          }
        }
      };
    };
  }
  WriterProcesses writers(make);
  for (auto _ : state)
    if (!writers.run()) {
      state.SkipWithError("a writer process failed");
      break;
    }
  state.SetItemsProcessed(state.iterations() * kWriters * kWriterExtends * kWriterBatch);
  td::redis::clear(store);
}

#endif

void register_all() {
  const NamedBench benchmarks[] = {
      {"BM_rb_add/tensordict", add_one<false>},
      {"BM_rb_add/floor", add_one<true>},
      {"BM_rb_extend256/tensordict", extend256<false>},
      {"BM_rb_extend256/floor", extend256<true>},
      {"BM_rb_sample256/tensordict", sample256<false>},
      {"BM_rb_sample256/floor", sample256<true>},
      {"BM_rb_prioritized256/tensordict", prioritized256<false>},
      {"BM_rb_prioritized256/floor", prioritized256<true>},
      {"BM_rb_sumtree256/tensordict", sumtree256<false>},
      {"BM_rb_sumtree256/floor", sumtree256<true>},
      {"BM_rb_sample256_without_replacement/tensordict", sample256_without_replacement<false>},
      {"BM_rb_sample256_without_replacement/floor", sample256_without_replacement<true>},
      {"BM_rb_slice256/tensordict", slice256<false>},
      {"BM_rb_slice256/floor", slice256<true>},
      {"BM_rb_maxvalue_extend256/tensordict", maxvalue_extend256<false>},
      {"BM_rb_maxvalue_extend256/floor", maxvalue_extend256<true>},
      {"BM_rb_add_shared/tensordict", add_shared<false>},
      {"BM_rb_add_shared/floor", add_shared<true>},
      {"BM_rb_extend256_shared/tensordict", extend256_shared<false>},
      {"BM_rb_extend256_shared/floor", extend256_shared<true>},
  };
  register_min_time(benchmarks, 0.3);
#ifdef TENSORDICT_BENCH_RB_REDIS
  const NamedBench redis[] = {
      {"BM_rb_redis_4writers/tensordict", redis_4writers<false>},
      {"BM_rb_redis_4writers/floor", redis_4writers<true>},
  };
  for (const auto& [name, fn] : redis)
    run_length(benchmark::RegisterBenchmark(name, fn), 0.5)->UseRealTime();
#endif
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  return run_benchmarks(argc, argv, register_all);
}
