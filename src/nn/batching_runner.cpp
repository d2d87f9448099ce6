// BatchingRunner: single-row calls from many threads, run as stacked batches
// on one runner thread (docs/nn_batching.md).
#include "nn/messages.h"

#include <tensordict/nn/batching_runner.h>

#include <tensordict/stack.h>
#include <tensordict/tensor_dict.h>

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <fmt/format.h>

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <exception>
#include <optional>
#include <utility>

namespace tensordict::nn {

namespace {

bool is_skipped(const NestedKey& key) { return key.size() == 1 && key.front() == "_"; }

// Raw bytes, not text: the structure is only compared, never shown, and
// building it runs once per row.
template <class T>
void append_raw(std::string& out, const T& value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void append_sizes(std::string& out, at::IntArrayRef sizes) {
  append_raw(out, static_cast<int64_t>(sizes.size()));
  out.append(reinterpret_cast<const char*>(sizes.data()), sizes.size() * sizeof(int64_t));
}

// Rows with equal strings stack into one batch: the batch size, then every
// entry's key and kind, and a tensor's dtype, device and shape. Built on the
// submitting thread, so the runner thread only compares strings.
std::string structure_of(const TensorDictBase& row) {
  std::string out;
  out.reserve(64);
  append_sizes(out, row.batch_size());
  KeysOptions all;
  all.include_nested = true;
  row.for_each(
      [&](const NestedKey& key, const Value& value) {
        for (const auto& part : key.parts()) {
          out += part;
          out += '\x1f';  // parts cannot be confused with a "."-joined key
        }
        out += static_cast<char>('0' + static_cast<int>(value.kind()));
        if (value.is_tensor()) {
          const at::Tensor& t = value.tensor();
          append_raw(out, t.scalar_type());
          append_raw(out, t.device().type());
          append_raw(out, t.device().index());
          append_sizes(out, t.sizes());
        }
        out += '\x1e';
      },
      all);
  return out;
}

// A caller of run() / run_all() waits here for its rows: one word holding
// the rows not yet delivered and a flag set once the caller sleeps. The
// runner touches the word once per row; only a caller that sleeps costs it a
// wake-up. Linux futexes directly (not std::atomic::wait): the caller may
// return, and its frame go, as soon as it reads 0, and a futex wake on a
// stale address is harmless where notifying a destroyed atomic is not.
class CallerWait {
 public:
  explicit CallerWait(std::size_t rows) : word_(static_cast<std::uint32_t>(rows)) {}

  // On the runner thread, once per delivered row.
  void arrive() {
    const std::uint32_t before = word_.fetch_sub(1, std::memory_order_acq_rel);
    if ((before & ~kSleeping) == 1 && (before & kSleeping) != 0) {
      syscall(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
    }
  }

  // On the caller's thread: yields its core until `spin_until`, then sleeps.
  void wait(std::chrono::steady_clock::time_point spin_until) {
    while (pending(word_.load(std::memory_order_acquire))) {
      if (std::chrono::steady_clock::now() >= spin_until) break;
      std::this_thread::yield();
    }
    for (;;) {
      std::uint32_t word = word_.load(std::memory_order_acquire);
      if (!pending(word)) return;
      if ((word & kSleeping) == 0) {
        if (!word_.compare_exchange_weak(word, word | kSleeping, std::memory_order_acq_rel))
          continue;
        word |= kSleeping;
      }
      // Returns at once when the word changed since it was read.
      syscall(SYS_futex, &word_, FUTEX_WAIT_PRIVATE, word, nullptr, nullptr, 0);
    }
  }

 private:
  static constexpr std::uint32_t kSleeping = 1U << 31;
  static bool pending(std::uint32_t word) { return (word & ~kSleeping) != 0; }
  std::atomic<std::uint32_t> word_;
};

}  // namespace

struct BatchingRunner::Request {
  TensorDictBase row;
  std::string structure;
  std::chrono::steady_clock::time_point submitted;
  // The request's place in the batch being run (runner thread only).
  std::size_t slot = 0;
  // submit(): the runner fulfils the promise and deletes the request.
  std::optional<std::promise<TensorDictBase>> promise;
  // run() / run_all(): the caller cuts its row from `source` (the batch's
  // output, out_keys selected) on its own thread, or rethrows `error`.
  CallerWait* caller = nullptr;
  TensorDictBase source;
  int64_t index = -1;
  std::exception_ptr error;
};

struct BatchingRunner::Counters {
  std::atomic<std::uint64_t> rows_submitted{0};
  std::atomic<std::uint64_t> rows_succeeded{0};
  std::atomic<std::uint64_t> rows_failed{0};
  std::atomic<std::uint64_t> batched_forwards{0};
  std::atomic<std::uint64_t> single_forwards{0};
  std::atomic<std::uint64_t> largest_batch{0};
};

BatchingRunner::BatchingRunner(std::shared_ptr<TensorDictModuleBase> module,
                               BatchingRunnerOptions options)
    : options_(options), counters_(std::make_unique<Counters>()) {
  if (!module) throw ValueError("BatchingRunner: the module is null");
  name_ = module->name();
  for (const auto& key : module->out_keys()) {
    if (!is_skipped(key)) out_keys_.push_back(key);
  }
  if (out_keys_.empty() && options_.result == RowResult::out_keys) {
    throw ValueError(name_ +
                     ": the module declares no out_keys, so RowResult::out_keys would hand out "
                     "empty rows; use RowResult::whole_row");
  }
  fn_ = [module = std::move(module)](TensorDictBase batch) {
    return module->forward(std::move(batch));
  };
  if (options_.max_batch == 0) throw ValueError(name_ + ": BatchingRunner max_batch must be >= 1");
  worker_ = std::thread([this] { worker_loop(); });
}

BatchingRunner::BatchingRunner(BatchFn fn, std::string name, BatchingRunnerOptions options)
    : fn_(std::move(fn)),
      name_(std::move(name)),
      options_(options),
      counters_(std::make_unique<Counters>()) {
  if (!fn_) throw ValueError(name_ + ": BatchingRunner needs a function, got an empty one");
  if (options_.result == RowResult::out_keys) {
    throw ValueError(name_ +
                     ": a BatchingRunner over a function has no out_keys; use "
                     "RowResult::whole_row");
  }
  if (options_.max_batch == 0) throw ValueError(name_ + ": BatchingRunner max_batch must be >= 1");
  worker_ = std::thread([this] { worker_loop(); });
}

BatchingRunner::~BatchingRunner() {
  // Destroying the runner from inside its own module cannot join; that is a
  // programming error close() reports, and std::thread terminates on it.
  try {
    close();
  } catch (const Error&) {
  }
}

bool BatchingRunner::prepare(Request& request) {
  try {
    request.structure = structure_of(request.row);
    return true;
  } catch (...) {
    // A row whose storage cannot even list its entries fails alone, through
    // its future, like every error of a row.
    counters_->rows_submitted.fetch_add(1, std::memory_order_relaxed);
    fail(request, std::current_exception());
    return false;
  }
}

void BatchingRunner::enqueue(Request* const* requests, std::size_t count) {
  if (count == 0) return;
  std::size_t before = 0;
  {
    std::lock_guard lock(mutex_);
    if (closing_) {
      throw RunnerClosedError(name_ + ": BatchingRunner is closed; it refused the row");
    }
    const auto now = std::chrono::steady_clock::now();
    before = queue_.size();
    for (std::size_t i = 0; i < count; ++i) {
      requests[i]->submitted = now;
      queue_.push_back(requests[i]);
    }
    queued_.store(queue_.size(), std::memory_order_release);
    counters_->rows_submitted.fetch_add(count, std::memory_order_relaxed);
  }
  // The runner waits for the first row of a batch, then for a full batch.
  const std::size_t after = before + count;
  if (before == 0 || (before < options_.max_batch && after >= options_.max_batch))
    wake_runner_.notify_one();
}

std::future<TensorDictBase> BatchingRunner::submit(TensorDictBase row) {
  if (!row.defined()) throw ValueError(name_ + ": BatchingRunner::submit got a null tensordict");
  auto request = std::make_unique<Request>();
  auto future = request->promise.emplace().get_future();
  request->row = std::move(row);
  if (!prepare(*request)) return future;
  Request* queued = request.get();
  enqueue(&queued, 1);
  // Queued: the runner thread owns it now and deletes it once its promise is
  // kept.
  static_cast<void>(request.release());
  return future;
}

TensorDictBase BatchingRunner::run(TensorDictBase row) {
  if (!row.defined()) throw ValueError(name_ + ": BatchingRunner::run got a null tensordict");
  std::vector<TensorDictBase> rows{std::move(row)};
  return std::move(run_all(rows).front());
}

std::vector<TensorDictBase> BatchingRunner::run_all(const std::vector<TensorDictBase>& rows) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].defined())
      throw ValueError(
          fmt::format("{}: BatchingRunner::run_all got a null tensordict at row {}", name_, i));
  }
  if (rows.empty()) return {};
  // The requests live here until every row is delivered: the runner thread
  // writes into them, and the wait below outlasts its last write.
  CallerWait wait(rows.size());
  std::vector<Request> requests(rows.size());
  std::vector<Request*> queued;
  queued.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Request& request = requests[i];
    request.row = rows[i];
    request.caller = &wait;
    if (prepare(request)) queued.push_back(&request);
  }
  enqueue(queued.data(), queued.size());
  wait.wait(std::chrono::steady_clock::now() + options_.spin);
  // Each caller cuts its own rows from the batch's output: the runner
  // thread, which every batch passes through, only hands it over.
  std::vector<TensorDictBase> results;
  results.reserve(rows.size());
  std::exception_ptr first_error;
  for (Request& request : requests) {
    if (request.error) {
      if (!first_error) first_error = request.error;
      results.emplace_back();
    } else {
      results.push_back(request.source[request.index]);
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  return results;
}

void BatchingRunner::close() {
  if (std::this_thread::get_id() == worker_.get_id()) {
    throw ValueError(name_ +
                     ": BatchingRunner::close() called from its own module; it would wait "
                     "for itself");
  }
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  stop_spinning_.store(true, std::memory_order_release);
  wake_runner_.notify_all();
  std::lock_guard join_lock(join_mutex_);
  if (worker_.joinable()) worker_.join();
}

bool BatchingRunner::closed() const {
  std::lock_guard lock(mutex_);
  return closing_;
}

BatchingRunnerStats BatchingRunner::stats() const {
  BatchingRunnerStats out;
  out.rows_submitted = counters_->rows_submitted.load();
  out.rows_succeeded = counters_->rows_succeeded.load();
  out.rows_failed = counters_->rows_failed.load();
  out.batched_forwards = counters_->batched_forwards.load();
  out.single_forwards = counters_->single_forwards.load();
  out.largest_batch = counters_->largest_batch.load();
  return out;
}

void BatchingRunner::worker_loop() {
  // A new thread gets LibTorch's thread settings (at::set_num_threads) only
  // when it asks: without this, OpenMP and MKL give the runner a team of one
  // thread per core whose spinning starves the actors.
  at::init_num_threads();
  // Named for profilers and debuggers (at most 15 characters).
  pthread_setname_np(pthread_self(), "td-batch-runner");
  for (;;) {
    if (options_.spin.count() > 0 && queued_.load(std::memory_order_acquire) == 0) {
      // Between batches the runner yields its core rather than sleep at
      // once: a sleeping runner costs the next submitter a wake-up.
      const auto deadline = std::chrono::steady_clock::now() + options_.spin;
      while (queued_.load(std::memory_order_acquire) == 0 &&
             !stop_spinning_.load(std::memory_order_acquire) &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    }
    Requests batch;
    // The requests of submit(), deleted once the batch is done. Those of
    // run() and run_all() belong to their callers, who may free them as soon
    // as their last row is delivered: the runner never touches a delivered
    // request again.
    std::vector<std::unique_ptr<Request>> owned;
    bool refuse = false;
    {
      std::unique_lock lock(mutex_);
      wake_runner_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) return;  // closing, nothing pending
      if (!closing_ && queue_.size() < options_.max_batch && options_.max_wait.count() > 0) {
        // The wait is bounded from the first row's arrival, not from now: a
        // row that queued while the last batch ran does not wait again.
        auto deadline = queue_.front()->submitted + options_.max_wait;
        wake_runner_.wait_until(lock, deadline,
                                [&] { return queue_.size() >= options_.max_batch || closing_; });
      }
      refuse = closing_ && options_.on_close == ClosePolicy::fail_pending;
      std::size_t take = refuse ? queue_.size() : std::min(queue_.size(), options_.max_batch);
      batch.reserve(take);
      for (std::size_t i = 0; i < take; ++i) {
        Request* request = queue_.front();
        queue_.pop_front();
        request->slot = i;
        batch.push_back(request);
        if (request->promise) owned.emplace_back(request);
      }
      queued_.store(queue_.size(), std::memory_order_release);
    }
    delivered_.assign(batch.size(), 0);
    if (refuse) {
      for (Request* request : batch) {
        fail(*request, std::make_exception_ptr(RunnerClosedError(
                           name_ + ": BatchingRunner was closed before this row ran (ClosePolicy::"
                                   "fail_pending)")));
      }
      continue;
    }
    try {
      run_batch(batch);
    } catch (...) {
      // Nothing above is meant to throw past run_group; should anything (an
      // allocation) do so, no future is left without a value.
      auto error = typed(std::current_exception());
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (!delivered_[i]) fail(*batch[i], error);
      }
    }
  }
}

void BatchingRunner::run_batch(Requests& requests) {
  // Groups of equal structure, in the order of their first row.
  std::vector<std::vector<Request*>> groups;
  for (Request* request : requests) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& group) {
      return group.front()->structure == request->structure;
    });
    if (same == groups.end()) {
      groups.push_back({request});
    } else {
      same->push_back(request);
    }
  }
  for (const auto& group : groups) run_group(group, false);
}

void BatchingRunner::run_group(const std::vector<Request*>& group, bool rerun) {
  const auto n = static_cast<int64_t>(group.size());
  TensorDictBase source;
  try {
    std::vector<TensorDictBase> rows;
    rows.reserve(group.size());
    for (const Request* request : group) rows.push_back(request->row);
    TensorDictBase batch = stack(rows, 0);
    (rerun ? counters_->single_forwards : counters_->batched_forwards)
        .fetch_add(1, std::memory_order_relaxed);
    auto largest = counters_->largest_batch.load(std::memory_order_relaxed);
    while (static_cast<std::uint64_t>(n) > largest &&
           !counters_->largest_batch.compare_exchange_weak(largest, n)) {
    }
    TensorDictBase output = call(std::move(batch));
    if (!output.defined() || output.batch_dims() < 1 || output.size(0) != n) {
      throw ValueError(fmt::format(
          "{}: BatchingRunner ran a batch of {} row(s) and the module returned a tensordict "
          "whose batch size does not start with {}",
          name_, n, n));
    }
    // The out_keys are selected once (entries shared, nested tensordicts and
    // non-tensors included); each caller gets its row by the library's index.
    source = options_.result == RowResult::whole_row ? output : output.select(out_keys_);
  } catch (...) {
    if (n == 1) {
      delivered_[group.front()->slot] = 1;
      fail(*group.front(), typed(std::current_exception()));
      return;
    }
    // Whose row was it? Run each alone; only the row(s) that fail alone get
    // an error, the others get their results.
    for (Request* request : group) run_group({request}, true);
    return;
  }
  for (int64_t i = 0; i < n; ++i) succeed(*group[i], source, i);
}

TensorDictBase BatchingRunner::call(TensorDictBase input) {
  if (options_.no_grad) {
    c10::NoGradGuard no_grad;
    return fn_(std::move(input));
  }
  return fn_(std::move(input));
}

void BatchingRunner::succeed(Request& request, const TensorDictBase& source, int64_t index) {
  if (request.promise) {
    TensorDictBase row;
    try {
      row = source[index];
    } catch (...) {
      delivered_[request.slot] = 1;
      fail(request, typed(std::current_exception()));
      return;
    }
    // Counted first: a caller whose result is there sees itself in stats().
    counters_->rows_succeeded.fetch_add(1);
    delivered_[request.slot] = 1;
    request.promise->set_value(std::move(row));
    return;
  }
  counters_->rows_succeeded.fetch_add(1);
  delivered_[request.slot] = 1;
  request.source = source;
  request.index = index;
  request.caller->arrive();  // the last touch: the caller may free it now
}

void BatchingRunner::fail(Request& request, std::exception_ptr error) {
  counters_->rows_failed.fetch_add(1);
  if (request.promise) {
    request.promise->set_exception(std::move(error));
    return;
  }
  request.error = std::move(error);
  request.caller->arrive();  // the last touch: the caller may free it now
}

std::exception_ptr BatchingRunner::typed(std::exception_ptr error) const {
  try {
    std::rethrow_exception(error);
  } catch (const Error&) {
    return error;
  } catch (const std::exception& e) {
    try {
      std::throw_with_nested(ModelError(name_ + ": " + detail::runtime_message(e)));
    } catch (...) {
      return std::current_exception();
    }
  } catch (...) {
    return std::make_exception_ptr(ModelError(name_ + ": the module threw a non-exception"));
  }
}

}  // namespace tensordict::nn
