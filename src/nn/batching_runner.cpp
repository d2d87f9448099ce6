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

#include <algorithm>
#include <atomic>
#include <exception>
#include <utility>

namespace tensordict::nn {

namespace {

bool is_skipped(const NestedKey& key) { return key.size() == 1 && key.front() == "_"; }

void append_sizes(std::string& out, at::IntArrayRef sizes) {
  out += '[';
  for (int64_t s : sizes) {
    out += std::to_string(s);
    out += ',';
  }
  out += ']';
}

// Rows with equal strings stack into one batch: the batch size, then every
// entry's key and kind, and a tensor's dtype, device and shape. Built on the
// submitting thread, so the runner thread only compares strings.
std::string structure_of(const TensorDictBase& row) {
  std::string out;
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
          out += c10::toString(t.scalar_type());
          out += t.device().str();
          append_sizes(out, t.sizes());
        }
        out += '\x1e';
      },
      all);
  return out;
}

}  // namespace

struct BatchingRunner::Request {
  TensorDictBase row;
  std::string structure;
  std::promise<TensorDictBase> promise;
  std::chrono::steady_clock::time_point submitted;
  bool done = false;
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

std::future<TensorDictBase> BatchingRunner::submit(TensorDictBase row) {
  if (!row.defined()) throw ValueError(name_ + ": BatchingRunner::submit got a null tensordict");
  auto request = std::make_unique<Request>();
  auto future = request->promise.get_future();
  request->row = std::move(row);
  try {
    request->structure = structure_of(request->row);
  } catch (...) {
    // A row whose storage cannot even list its entries fails alone, through
    // its future, like every error of a row.
    counters_->rows_submitted.fetch_add(1, std::memory_order_relaxed);
    fail(*request, std::current_exception());
    return future;
  }
  std::size_t queued = 0;
  {
    std::lock_guard lock(mutex_);
    if (closing_) {
      throw RunnerClosedError(name_ + ": BatchingRunner is closed; submit() refused the row");
    }
    request->submitted = std::chrono::steady_clock::now();
    queue_.push_back(std::move(request));
    queued = queue_.size();
    counters_->rows_submitted.fetch_add(1, std::memory_order_relaxed);
  }
  // The runner waits for the first row of a batch, then for a full batch.
  if (queued == 1 || queued == options_.max_batch) wake_runner_.notify_one();
  return future;
}

TensorDictBase BatchingRunner::run(TensorDictBase row) { return submit(std::move(row)).get(); }

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
  for (;;) {
    Requests batch;
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
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (refuse) {
      for (auto& request : batch) {
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
      for (auto& request : batch) {
        if (!request->done) fail(*request, error);
      }
    }
  }
}

void BatchingRunner::run_batch(Requests& requests) {
  // Groups of equal structure, in the order of their first row.
  std::vector<std::vector<Request*>> groups;
  for (auto& request : requests) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& group) {
      return group.front()->structure == request->structure;
    });
    if (same == groups.end()) {
      groups.push_back({request.get()});
    } else {
      same->push_back(request.get());
    }
  }
  for (const auto& group : groups) run_group(group, false);
}

void BatchingRunner::run_group(const std::vector<Request*>& group, bool rerun) {
  const auto n = static_cast<int64_t>(group.size());
  std::vector<TensorDictBase> results;
  results.reserve(group.size());
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
    TensorDictBase source =
        options_.result == RowResult::whole_row ? output : output.select(out_keys_);
    for (int64_t i = 0; i < n; ++i) results.push_back(source[i]);
  } catch (...) {
    if (n == 1) {
      fail(*group.front(), typed(std::current_exception()));
      return;
    }
    // Whose row was it? Run each alone; only the row(s) that fail alone get
    // an error, the others get their results.
    for (Request* request : group) run_group({request}, true);
    return;
  }
  for (int64_t i = 0; i < n; ++i) succeed(*group[i], std::move(results[i]));
}

TensorDictBase BatchingRunner::call(TensorDictBase input) {
  if (options_.no_grad) {
    c10::NoGradGuard no_grad;
    return fn_(std::move(input));
  }
  return fn_(std::move(input));
}

void BatchingRunner::succeed(Request& request, TensorDictBase result) {
  // Counted first: a caller whose future is ready sees itself in stats().
  counters_->rows_succeeded.fetch_add(1);
  request.done = true;
  request.promise.set_value(std::move(result));
}

void BatchingRunner::fail(Request& request, std::exception_ptr error) {
  counters_->rows_failed.fetch_add(1);
  request.done = true;
  request.promise.set_exception(std::move(error));
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
