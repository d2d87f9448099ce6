// Several processes writing one replay buffer through a shared cursor
// (rb/shared_cursor.h): real child processes (fork) over one memmap
// directory, one POSIX shared-memory tensordict and, when the Redis component
// is built, one store on a redis-server the test starts (writers on separate
// connections, TCP and Unix socket, standing in for hosts). Every row carries
// the (writer, seq) it was written as and a payload made from both, so a row
// read back tells who wrote it and whether it is whole. Checked: every
// acknowledged row present exactly once, wrap-around keeps exactly the newest
// `capacity` rows, a reader running beside the writers never samples an
// unwritten or torn row, and a writer killed between reserve and commit
// behaves as documented (stall, TimeoutError, recover()). [env, time]
// buffers the same way: tickets count time steps, each written to every env.
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/rb/shared_cursor.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>
#ifdef TENSORDICT_RB_TEST_REDIS
#include <tensordict/rb/redis_cursor.h>
#include <tensordict/storage/redis.h>

#include "support/redis_server.h"
#endif

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;
namespace rb = tensordict::rb;
namespace td = tensordict;

namespace {

constexpr int64_t kUnwritten = -1;  // the writer id of a row never written

td::Schema row_schema() {
  return td::Schema{
      {"writer", {{}, at::kLong}}, {"seq", {{}, at::kLong}}, {"payload", {{3}, at::kDouble}}};
}

// Rows seq0 .. seq0+n-1 of `writer`; the payload repeats both ids.
td::TensorDict rows_of(int64_t writer, int64_t seq0, int64_t n) {
  at::Tensor seq = at::arange(seq0, seq0 + n, at::kLong);
  at::Tensor code = seq.to(at::kDouble) + static_cast<double>(writer) * 1e6;
  at::Tensor payload = code.unsqueeze(1).repeat({1, 3}) + at::tensor({0.0, 0.25, 0.5}, at::kDouble);
  return td::TensorDict(
      {{"writer", at::full({n}, writer, at::kLong)}, {"seq", seq}, {"payload", payload}}, {n});
}

// The rows of an [env, time] storage: each element also holds its env's number.
td::Schema env_schema() {
  td::Schema schema = row_schema();
  schema.add("env", {{}, at::kLong});
  return schema;
}

// Steps seq0 .. seq0+t-1 of `writer` for every env, batch [envs, t]: each
// env's row is rows_of(writer, seq0, t) plus the env's number.
td::TensorDict env_steps_of(int64_t writer, int64_t seq0, int64_t t, int64_t envs) {
  const td::TensorDict steps = rows_of(writer, seq0, t);
  auto every_env = [envs](const at::Tensor& x) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.insert(shape.begin(), envs);
    return x.unsqueeze(0).expand(shape).contiguous();
  };
  return td::TensorDict({{"writer", every_env(steps.get("writer"))},
                         {"seq", every_env(steps.get("seq"))},
                         {"payload", every_env(steps.get("payload"))},
                         {"env", at::arange(envs, at::kLong).unsqueeze(1).expand({envs, t})}},
                        {envs, t});
}

// Marks every row (element) of a new storage as never written.
void mark_unwritten(td::TensorDictBase& storage) {
  const int64_t c = storage.batch_size()[0];
  if (storage.batch_dims() == 2)
    storage.index_put_({at::indexing::Slice(0, c)},
                       env_steps_of(kUnwritten, 0, storage.batch_size()[1], c));
  else
    storage.index_put_({at::indexing::Slice(0, c)}, rows_of(kUnwritten, 0, c));
}

// The (writer, seq) of each row, after checking that each row is whole
// (its payload made from its own ids). Empty when a row is torn.
std::vector<std::pair<int64_t, int64_t>> ids_of(const td::TensorDictBase& rows) {
  const at::Tensor w = rows.get("writer").contiguous(), s = rows.get("seq").contiguous();
  const at::Tensor expected =
      (s.to(at::kDouble) + w.to(at::kDouble) * 1e6).unsqueeze(1).repeat({1, 3}) +
      at::tensor({0.0, 0.25, 0.5}, at::kDouble);
  if (!at::equal(rows.get("payload"), expected)) return {};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < w.numel(); ++i)
    out.emplace_back(w.data_ptr<int64_t>()[i], s.data_ptr<int64_t>()[i]);
  return out;
}

// The schema and batch size of a storage of `capacity` rows or, with
// `envs`, of `capacity` time steps of each env.
td::Schema schema_of(int64_t envs) { return envs ? env_schema() : row_schema(); }
std::vector<int64_t> shape_of(int64_t capacity, int64_t envs) {
  return envs ? std::vector<int64_t>{envs, capacity} : std::vector<int64_t>{capacity};
}

// Runs `body` in a child process; returns its exit code (128 + signal when
// killed). fork() copies only this thread: the children run torch on one.
int run_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
      code = 98;
    }
    ::_exit(code);
  }
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What a test needs to open the one buffer again in a child process: the
// storage and the cursor, opened anew there (the process's own handles).
struct Opener {
  std::string name;
  std::function<td::TensorDictBase(int child)> storage;
  std::function<std::shared_ptr<rb::SharedCursor>(int child)> cursor;
};

// Writer `w`: rows 0 .. rows-1 in adds and extends of 3, 7 and 16 rows.
int write_rows(const Opener& open, int w, int64_t rows) {
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(open.storage(w), open.cursor(w));
  const int64_t sizes[] = {1, 3, 7, 16};
  int64_t seq = 0;
  for (int k = 0; seq < rows; ++k) {
    const int64_t n = std::min(sizes[k % 4], rows - seq);
    if (n == 1)
      buffer.add(rows_of(w, seq, 1)[0]);
    else
      buffer.extend(rows_of(w, seq, n));
    seq += n;
  }
  return 0;
}

// A reader beside the writers: samples until the buffer holds `total` rows
// (or 20 s pass); exit 0 when every sampled row was written and whole, 2
// when a row was never written, 3 when torn, 5 when an element of an
// [env, time] buffer is not the env its index says.
int read_while_writing(const Opener& open, int64_t total, int64_t writers) {
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(open.storage(100), open.cursor(100));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int64_t samples = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto cursor = open.cursor(101);
    const bool done = cursor->committed() >= total;
    if (buffer.size() == 0) continue;
    const td::TensorDict sample = buffer.sample(64);
    const auto ids = ids_of(sample);
    if (ids.empty()) return 3;
    for (const auto& [w, s] : ids)
      if (w < 0 || w >= writers) return 2;
    if (sample.contains("env") && !at::equal(sample.get("env"), sample.get("index").select(1, 0)))
      return 5;
    ++samples;
    if (done) break;
  }
  return samples > 0 ? 0 : 4;
}

// Writer `w` of an [env, time] buffer: steps 0 .. steps-1 of every env, in
// adds (one step) and extends of 2, 5 and 3 steps.
int write_env_steps(const Opener& open, int w, int64_t steps, int64_t envs) {
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(open.storage(w), open.cursor(w));
  const int64_t sizes[] = {1, 2, 5, 3};
  int64_t seq = 0;
  for (int k = 0; seq < steps; ++k) {
    const int64_t n = std::min(sizes[k % 4], steps - seq);
    const td::TensorDict data = env_steps_of(w, seq, n, envs);
    if (n == 1)
      buffer.add(data.index({at::indexing::Slice(), 0}));
    else
      buffer.extend(data);
    seq += n;
  }
  return 0;
}

// N writers x M rows (with `envs`: M time steps of every env of an [env,
// time] buffer of `capacity` steps), a reader beside them; then the checks:
// every acknowledged row (step) once, or the newest `capacity` after a wrap;
// in an [env, time] buffer each time step holds one write in every env.
void many_writers(const Opener& open, int64_t capacity, int writers, int64_t rows,
                  int64_t envs = 0) {
  td::TensorDictBase storage = open.storage(-1);
  const auto cursor = open.cursor(-1);
  ASSERT_EQ(cursor->capacity(), capacity);
  std::vector<pid_t> pids;
  for (int w = 0; w < writers; ++w)
    pids.push_back(run_child([&, w] {
      return envs ? write_env_steps(open, w, rows, envs) : write_rows(open, w, rows);
    }));
  const pid_t reader = run_child([&] { return read_while_writing(open, writers * rows, writers); });
  for (const pid_t pid : pids) EXPECT_EQ(wait_child(pid), 0) << open.name;
  EXPECT_EQ(wait_child(reader), 0) << open.name << ": the reader sampled a bad row";

  const int64_t total = writers * rows;
  EXPECT_EQ(cursor->committed(), total);
  EXPECT_EQ(cursor->reserved(), total);
  const rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(storage, cursor);
  EXPECT_EQ(buffer.size(), std::min(total, capacity) * std::max<int64_t>(envs, 1));
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{total % capacity, total}));
  // The write of each row (time step): env 0's steps in an [env, time] buffer.
  const auto ids =
      ids_of(envs ? storage.index({0}) : storage.index({at::indexing::Slice(0, capacity)}));
  ASSERT_EQ(static_cast<int64_t>(ids.size()), capacity) << "a torn row in the storage";
  if (envs) {
    EXPECT_TRUE(at::equal(storage.get("env"),
                          at::arange(envs, at::kLong).unsqueeze(1).expand({envs, capacity})));
    for (int64_t e = 1; e < envs; ++e) EXPECT_EQ(ids_of(storage.index({e})), ids) << "env " << e;
  }
  std::map<int64_t, std::set<int64_t>> seqs;
  int64_t written = 0;
  for (const auto& [w, s] : ids) {
    if (w == kUnwritten) continue;
    ASSERT_TRUE(w >= 0 && w < writers);
    EXPECT_TRUE(seqs[w].insert(s).second) << "row (" << w << ", " << s << ") written twice";
    ++written;
  }
  EXPECT_EQ(written, std::min(total, capacity));
  for (int w = 0; w < writers; ++w) {
    const auto& kept = seqs[w];
    if (total <= capacity) {
      // No wrap: every acknowledged row is there.
      EXPECT_EQ(static_cast<int64_t>(kept.size()), rows) << "writer " << w;
    } else if (!kept.empty()) {
      // Wrapped: the newest `capacity` tickets survive, so each writer keeps
      // a suffix of its rows (its tickets grow with its seq).
      EXPECT_EQ(*kept.rbegin(), rows - 1) << "writer " << w;
      EXPECT_EQ(static_cast<int64_t>(kept.size()), rows - *kept.begin()) << "writer " << w;
    }
  }
}

struct RestoreThreads {
  int n = at::get_num_threads();
  RestoreThreads() { at::set_num_threads(1); }
  ~RestoreThreads() { at::set_num_threads(n); }
};

class SharedWriters : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("td-rb-shared-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    for (const auto& name : shared_) td::unlink_shared(name);
  }

  // A memmap buffer in dir_/storage, its cursor in dir_/storage/rb_cursor;
  // each process loads the directory and opens the cursor file itself.
  // With `envs`, an [env, time] buffer of `capacity` steps of each env.
  Opener memmap(int64_t capacity, int64_t envs = 0) {
    const fs::path root = dir_ / "storage";
    td::TensorDictBase made = td::from_schema(schema_of(envs), shape_of(capacity, envs), "memmap",
                                              {{"prefix", root.string()}});
    mark_unwritten(made);
    return {"memmap", [root](int) { return td::load_memmap(root.string()); },
            [root](int) -> std::shared_ptr<rb::SharedCursor> {
              return rb::MappedCursor::beside(td::load_memmap(root.string()));
            }};
  }

  // A shared-memory buffer; the cursor file in its /dev/shm directory.
  Opener shared(int64_t capacity, int64_t envs = 0) {
    td::TensorDictBase made = td::from_schema(schema_of(envs), shape_of(capacity, envs), "shared");
    mark_unwritten(made);
    const std::string name = made.shared_name();
    shared_.push_back(name);
    return {"shared", [name](int) { return td::attach_shared(name); },
            [name](int) -> std::shared_ptr<rb::SharedCursor> {
              return rb::MappedCursor::beside(td::attach_shared(name));
            }};
  }

  fs::path dir_;
  std::vector<std::string> shared_;
  RestoreThreads one_thread_;
};

TEST_F(SharedWriters, MemmapFourProcessesEveryRowOnce) {
  many_writers(memmap(8192), 8192, 4, 2000);
}

TEST_F(SharedWriters, MemmapFourProcessesWrapAround) { many_writers(memmap(37), 37, 4, 1500); }

TEST_F(SharedWriters, SharedMemoryFourProcessesEveryRowOnce) {
  many_writers(shared(8000), 8000, 4, 1900);
}

TEST_F(SharedWriters, SharedMemoryFourProcessesWrapAround) {
  many_writers(shared(50), 50, 4, 1500);
}

TEST_F(SharedWriters, MemmapEnvTimeThreeProcessesEveryStepOnce) {
  many_writers(memmap(600, 3), 600, 3, 200, 3);
}

TEST_F(SharedWriters, MemmapEnvTimeWrapAround) { many_writers(memmap(17, 3), 17, 3, 300, 3); }

TEST_F(SharedWriters, SharedMemoryEnvTimeThreeProcessesEveryStepOnce) {
  many_writers(shared(600, 2), 600, 3, 200, 2);
}

TEST_F(SharedWriters, SharedMemoryEnvTimeWrapAround) { many_writers(shared(23, 4), 23, 3, 300, 4); }

// An attached [env, time] buffer: tickets are time steps, the cursor beside
// the storage cycles over them, samples are elements ([n], index (env,
// time)), the samplers of a 1-D attached buffer, the state calls and
// checkpoints in time steps.
TEST_F(SharedWriters, EnvTimeTicketsAreTimeSteps) {
  const int64_t envs = 3, steps = 4;
  const Opener open = memmap(steps, envs);
  auto cursor = open.cursor(0);
  EXPECT_EQ(cursor->capacity(), steps);
  // A cursor over envs * steps rows is another buffer's.
  auto elements = std::make_shared<rb::MappedCursor>(dir_ / "elements", envs * steps);
  EXPECT_THROW(rb::ReplayBuffer::attach(open.storage(0), elements), td::ValueError);
  EXPECT_THROW(
      rb::ReplayBuffer::attach(open.storage(0), cursor,
                               std::make_shared<rb::PrioritizedSampler>(envs * steps, 0.6, 0.4)),
      td::UnsupportedError);
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(
      open.storage(0), cursor, std::make_shared<rb::SamplerWithoutReplacement>());
  EXPECT_THROW(buffer.sample(2), td::ValueError);  // empty
  // Bad steps reserve nothing.
  EXPECT_THROW(buffer.extend(env_steps_of(0, 0, 2, envs + 1)), td::ShapeError);
  EXPECT_THROW(buffer.extend(rows_of(0, 0, 2)), td::ShapeError);
  EXPECT_EQ(cursor->reserved(), 0);

  const at::Tensor pairs = buffer.extend(env_steps_of(0, 0, 3, envs));  // tickets 0..2
  EXPECT_EQ(pairs.sizes().vec(), (std::vector<int64_t>{envs * 3, 2}));
  EXPECT_EQ(buffer.add(env_steps_of(0, 3, 1, envs).index({at::indexing::Slice(), 0})), 3);
  EXPECT_EQ(cursor->committed(), 4);
  EXPECT_EQ(buffer.size(), envs * steps);
  // Without replacement: every element once per epoch.
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int b = 0; b < 4; ++b) {
    const td::TensorDict s = buffer.sample(3);
    const at::Tensor index = s.get("index");
    EXPECT_TRUE(at::equal(s.get("env"), index.select(1, 0)));
    EXPECT_TRUE(at::equal(s.get("seq"), index.select(1, 1)));  // step t holds seq t
    for (int64_t k = 0; k < 3; ++k)
      seen.emplace(index[k][0].item<int64_t>(), index[k][1].item<int64_t>());
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), envs * steps);

  // Two more steps (tickets 4, 5) from another process's handle wrap to
  // time steps 0 and 1 of every env.
  rb::ReplayBuffer other = rb::ReplayBuffer::attach(open.storage(1), open.cursor(1));
  const at::Tensor wrapped = other.extend(env_steps_of(1, 0, 2, envs));
  EXPECT_TRUE(at::equal(wrapped.select(1, 1), at::tensor({0, 1, 0, 1, 0, 1}, at::kLong)));
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{2, 6}));
  const td::TensorDictBase storage = open.storage(2);
  EXPECT_TRUE(
      at::equal(storage.get("writer"), at::tensor({1, 1, 0, 0}, at::kLong).expand({envs, 4})));

  EXPECT_THROW(buffer.load_writer_state({1, 6}), td::ValueError);  // cursor != 6 % steps
  buffer.load_writer_state({1, 5});
  EXPECT_EQ(other.size(), envs * steps);
  EXPECT_EQ(cursor->reserved(), 5);
  const fs::path saved = dir_ / "checkpoint";
  buffer.dumps(saved);
  rb::ReplayBuffer loaded(td::from_schema(env_schema(), {envs, steps}),
                          std::make_shared<rb::SamplerWithoutReplacement>());
  loaded.loads(saved);
  EXPECT_EQ(loaded.writer_state(), (rb::WriterState{1, 5}));
  EXPECT_TRUE(at::equal(loaded.storage().get("seq"), storage.get("seq")));

  other.empty();
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_TRUE(at::equal(buffer.extend(env_steps_of(2, 0, 1, envs)).select(1, 1),
                        at::zeros({envs}, at::kLong)));
  EXPECT_EQ(other.size(), envs);
}

// Dies on its first commit: a writer killed between reserve and commit
// (its rows are copied, the commit never happens).
template <class Cursor>
struct DiesBeforeCommit : Cursor {
  using Cursor::Cursor;
  int64_t try_commit(const rb::Reservation&) override {
    ::kill(::getpid(), SIGKILL);
    return 0;
  }
};

// The documented failure rule, on any cursor: `open_dying` opens the cursor
// of a writer that dies between reserve and commit.
void killed_writer(const Opener& open,
                   const std::function<std::shared_ptr<rb::SharedCursor>()>& open_dying) {
  td::TensorDictBase storage = open.storage(-1);
  auto cursor = open.cursor(-1);
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(storage, cursor);
  buffer.extend(rows_of(0, 0, 5));
  const pid_t dying = run_child([&] {
    rb::ReplayBuffer mine = rb::ReplayBuffer::attach(open.storage(1), open_dying());
    mine.extend(rows_of(1, 0, 4));  // reserves tickets 5..8, writes them, dies
    return 0;
  });
  EXPECT_EQ(wait_child(dying), 128 + SIGKILL);
  EXPECT_EQ(cursor->reserved(), 9);
  EXPECT_EQ(cursor->committed(), 5);
  // The dead writer's rows are in the storage but never sampled.
  const auto stored = ids_of(storage.index({at::indexing::Slice(5, 9)}));
  ASSERT_EQ(stored.size(), 4u);
  EXPECT_EQ(stored[0].first, 1);
  EXPECT_EQ(buffer.size(), 5);
  for (const auto& [w, s] : ids_of(buffer.sample(200))) EXPECT_EQ(w, 0);

  // A later writer's commit waits for the stalled ticket, then fails: its
  // rows are not acknowledged and the size does not move.
  cursor->set_commit_timeout(std::chrono::milliseconds(200));
  EXPECT_THROW(buffer.extend(rows_of(2, 0, 2)), td::TimeoutError);
  EXPECT_EQ(cursor->committed(), 5);
  EXPECT_EQ(cursor->reserved(), 11);
  EXPECT_EQ(buffer.size(), 5);

  // recover(): the uncommitted tickets are given out again.
  EXPECT_EQ(cursor->recover(), 6);
  EXPECT_EQ(cursor->reserved(), 5);
  EXPECT_EQ(cursor->recover(), 0);
  const at::Tensor rows = buffer.extend(rows_of(3, 0, 3));
  EXPECT_TRUE(at::equal(rows, at::arange(5, 8, at::kLong)));
  EXPECT_EQ(buffer.size(), 8);
  std::set<int64_t> sampled;
  for (const auto& [w, s] : ids_of(buffer.sample(500))) sampled.insert(w);
  EXPECT_EQ(sampled, (std::set<int64_t>{0, 3}));
  // Every acknowledged row once: writer 0's five and writer 3's three.
  const auto now = ids_of(storage.index({at::indexing::Slice(0, 8)}));
  ASSERT_EQ(now.size(), 8u);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(now[i], std::make_pair(int64_t{0}, i));
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(now[5 + i], std::make_pair(int64_t{3}, i));
}

TEST_F(SharedWriters, MemmapWriterKilledBetweenReserveAndCommit) {
  const Opener open = memmap(32);
  const fs::path file = dir_ / "storage" / "rb_cursor";
  killed_writer(open,
                [&] { return std::make_shared<DiesBeforeCommit<rb::MappedCursor>>(file, 32); });
}

// The failure rule in time steps: a writer of an [env, time] buffer killed
// between reserve and commit stalls the steps after its own; recover()
// gives its tickets out again.
TEST_F(SharedWriters, EnvTimeWriterKilledBetweenReserveAndCommit) {
  const int64_t envs = 2, steps = 8;
  const Opener open = memmap(steps, envs);
  const fs::path file = dir_ / "storage" / "rb_cursor";
  auto cursor = open.cursor(0);
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(open.storage(0), cursor);
  buffer.extend(env_steps_of(0, 0, 3, envs));
  const pid_t dying = run_child([&] {
    rb::ReplayBuffer mine = rb::ReplayBuffer::attach(
        open.storage(1), std::make_shared<DiesBeforeCommit<rb::MappedCursor>>(file, steps));
    mine.extend(env_steps_of(1, 0, 2, envs));  // reserves steps 3 and 4, writes them, dies
    return 0;
  });
  EXPECT_EQ(wait_child(dying), 128 + SIGKILL);
  EXPECT_EQ(cursor->reserved(), 5);
  EXPECT_EQ(cursor->committed(), 3);
  EXPECT_EQ(buffer.size(), 3 * envs);
  for (const auto& [w, s] : ids_of(buffer.sample(200))) EXPECT_EQ(w, 0);
  cursor->set_commit_timeout(std::chrono::milliseconds(200));
  EXPECT_THROW(buffer.extend(env_steps_of(2, 0, 1, envs)), td::TimeoutError);
  EXPECT_EQ(buffer.size(), 3 * envs);
  EXPECT_EQ(cursor->recover(), 3);
  const at::Tensor pairs = buffer.extend(env_steps_of(3, 0, 2, envs));
  EXPECT_TRUE(at::equal(pairs.select(1, 1), at::tensor({3, 4, 3, 4}, at::kLong)));
  EXPECT_EQ(buffer.size(), 5 * envs);
  std::set<int64_t> sampled;
  for (const auto& [w, s] : ids_of(buffer.sample(300))) sampled.insert(w);
  EXPECT_EQ(sampled, (std::set<int64_t>{0, 3}));
}

TEST_F(SharedWriters, DiscardedReservationCannotCommit) {
  rb::MappedCursor cursor(dir_ / "cursor", 8);
  const rb::Reservation first = cursor.reserve(2);
  const rb::Reservation second = cursor.reserve(3);
  EXPECT_EQ(second.first, 2);
  EXPECT_EQ(cursor.recover(), 5);
  EXPECT_THROW(cursor.commit(second), td::ConflictError);
  EXPECT_THROW(cursor.commit(first), td::ConflictError);
  const rb::Reservation again = cursor.reserve(2);
  EXPECT_EQ(again.first, 0);
  cursor.commit(again);
  EXPECT_EQ(cursor.committed(), 2);
  // Commits land in ticket order whatever order they are called in.
  const rb::Reservation a = cursor.reserve(1), b = cursor.reserve(1);
  cursor.set_commit_timeout(std::chrono::milliseconds(50));
  EXPECT_THROW(cursor.commit(b), td::TimeoutError);
  cursor.commit(a);
  cursor.commit(b);
  EXPECT_EQ(cursor.committed(), 4);
  cursor.reset(0);
  EXPECT_EQ(cursor.committed(), 0);
  EXPECT_EQ(cursor.reserved(), 0);
}

TEST_F(SharedWriters, RefusedInputs) {
  EXPECT_THROW(rb::MappedCursor(dir_ / "c", 0), td::ValueError);
  rb::MappedCursor cursor(dir_ / "c", 8);
  EXPECT_THROW(rb::MappedCursor(dir_ / "c", 9), td::ValueError);
  EXPECT_THROW(cursor.reserve(-1), td::ValueError);
  { std::ofstream(dir_ / "not-a-cursor") << "hello"; }
  EXPECT_THROW(rb::MappedCursor(dir_ / "not-a-cursor", 8), td::FormatError);
  td::TensorDictBase storage = td::from_schema(row_schema(), {8});
  auto other = std::make_shared<rb::MappedCursor>(dir_ / "c9", 9);
  EXPECT_THROW(rb::ReplayBuffer::attach(storage, other), td::ValueError);
  auto mine = std::make_shared<rb::MappedCursor>(dir_ / "c8", 8);
  EXPECT_THROW(rb::ReplayBuffer::attach(storage, mine,
                                        std::make_shared<rb::PrioritizedSampler>(8, 0.6, 0.4)),
               td::UnsupportedError);
  EXPECT_THROW(rb::ReplayBuffer::attach(storage, nullptr), td::ValueError);
  EXPECT_THROW(rb::MappedCursor::beside(storage), td::ValueError);  // in memory: no directory
  // Bad rows change nothing: no ticket is reserved.
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(storage, mine);
  EXPECT_THROW(buffer.extend(td::TensorDict({{"writer", at::zeros({2}, at::kLong)}}, {2})),
               td::KeyError);
  EXPECT_EQ(mine->reserved(), 0);
}

// The calls that set the counters, and checkpoints, on an attached buffer.
TEST_F(SharedWriters, StateCallsMoveTheSharedCounters) {
  const Opener open = memmap(16);
  auto cursor = open.cursor(0);
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(open.storage(0), cursor);
  EXPECT_EQ(buffer.shared_cursor(), cursor);
  EXPECT_THROW(buffer.sample(4), td::ValueError);  // empty
  buffer.extend(rows_of(0, 0, 20));                // wraps: tickets 0..19
  EXPECT_EQ(buffer.writer_state(), (rb::WriterState{4, 20}));
  EXPECT_EQ(buffer.size(), 16);
  // Another process's view of the same counters.
  rb::ReplayBuffer other = rb::ReplayBuffer::attach(open.storage(1), open.cursor(1));
  EXPECT_EQ(other.writer_state(), (rb::WriterState{4, 20}));
  EXPECT_THROW(buffer.load_writer_state({1, 3}), td::ValueError);
  EXPECT_EQ(cursor->committed(), 20);
  buffer.load_writer_state({3, 3});
  EXPECT_EQ(other.size(), 3);
  EXPECT_EQ(cursor->reserved(), 3);

  const fs::path saved = dir_ / "checkpoint";
  buffer.dumps(saved);
  rb::ReplayBuffer loaded(16);
  loaded.loads(saved);
  EXPECT_EQ(loaded.writer_state(), (rb::WriterState{3, 3}));
  EXPECT_THROW(buffer.loads(saved), td::UnsupportedError);

  other.empty();
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_EQ(cursor->reserved(), 0);
  EXPECT_TRUE(at::equal(buffer.extend(rows_of(1, 0, 2)), at::arange(0, 2, at::kLong)));
}

#ifdef TENSORDICT_RB_TEST_REDIS

class SharedRedisWriters : public ::testing::Test {
 protected:
  // A store on the test's server; child k connects on its own, over TCP
  // (even k) or the Unix socket (odd k): separate connections for "hosts".
  // With `envs`, an [env, time] store of `capacity` steps of each env.
  Opener redis(int64_t capacity, int64_t envs = 0) {
    td::storage::Redis tcp{.host = "127.0.0.1", .port = server_.port()};
    td::TensorDictBase made = td::from_schema(schema_of(envs), shape_of(capacity, envs), tcp);
    mark_unwritten(made);
    tcp.td_id = td::redis::td_id(made);
    td::storage::Redis unix_socket = tcp;
    unix_socket.unix_socket = server_.socket();
    auto where = [tcp, unix_socket](int child) { return child % 2 ? unix_socket : tcp; };
    return {"redis",
            [where](int child) -> td::TensorDictBase {
              return td::TensorDictStore::from_store(where(child));
            },
            [where, capacity](int child) -> std::shared_ptr<rb::SharedCursor> {
              return std::make_shared<rb::RedisCursor>(where(child), capacity);
            }};
  }

  td_test::RedisServer server_;
  RestoreThreads one_thread_;
};

TEST_F(SharedRedisWriters, FourProcessesEveryRowOnce) { many_writers(redis(4000), 4000, 4, 900); }

TEST_F(SharedRedisWriters, TwoHostsWrapAround) { many_writers(redis(29), 29, 2, 800); }

TEST_F(SharedRedisWriters, EnvTimeThreeHostsEveryStepOnce) {
  many_writers(redis(400, 3), 400, 3, 120, 3);
}

TEST_F(SharedRedisWriters, EnvTimeTwoHostsWrapAround) { many_writers(redis(13, 2), 13, 2, 150, 2); }

TEST_F(SharedRedisWriters, CursorKeysBesideTheStore) {
  const Opener open = redis(16);
  const auto cursor = open.cursor(0);
  rb::ReplayBuffer buffer = rb::ReplayBuffer::attach(open.storage(0), cursor);
  server_.reset_stats();
  buffer.extend(rows_of(0, 0, 5));
  // Two round trips of the cursor beside the store's one row write: MULTI,
  // INCRBY, GET (the epoch), EXEC; the row write's script; the commit script.
  auto calls = server_.command_calls();
  EXPECT_EQ(calls["incrby"], 1);
  EXPECT_EQ(calls["multi"], 1);
  EXPECT_EQ(calls["eval"], 2);
  auto* redis_cursor = dynamic_cast<rb::RedisCursor*>(cursor.get());
  ASSERT_NE(redis_cursor, nullptr);
  EXPECT_EQ(server_.command({"GET", redis_cursor->key("__rb_reserved__")}), "5");
  EXPECT_EQ(server_.command({"GET", redis_cursor->key("__rb_committed__")}), "5");
  EXPECT_EQ(server_.command({"GET", redis_cursor->key("__rb_capacity__")}), "16");
  td::storage::Redis other{.host = "127.0.0.1", .port = server_.port(), .td_id = "x"};
  other.td_id = redis_cursor->key("").substr(redis_cursor->key("").find('{') + 1);
  other.td_id = other.td_id.substr(0, other.td_id.find('}'));
  EXPECT_THROW(rb::RedisCursor(other, 17), td::ValueError);
}

TEST_F(SharedRedisWriters, WriterKilledBetweenReserveAndCommit) {
  td::storage::Redis tcp{.host = "127.0.0.1", .port = server_.port()};
  const Opener open = redis(32);
  tcp.td_id = td::redis::td_id(open.storage(0));
  killed_writer(open, [&] { return std::make_shared<DiesBeforeCommit<rb::RedisCursor>>(tcp, 32); });
}

#endif

}  // namespace
