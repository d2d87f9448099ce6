#pragma once
/// @file nn/batching_runner.h
/// Many actor threads, one model: BatchingRunner gathers the rows that actor
/// threads submit one at a time, stacks them into one batch, runs the module
/// once on its own thread and hands every caller its own row of the result
/// (component `nn`, docs/nn_batching.md).
///
/// The contract in short:
///  - results: each caller gets exactly the row it submitted, computed as if
///    the module had run on that row alone;
///  - errors: a failure reaches only the caller whose row caused it, as a
///    tensordict::Error (a raw LibTorch or std exception from the module
///    arrives as ModelError, naming the module, the original nested); a batch
///    that throws is re-run row by row to find whose row it was;
///  - shutdown: close() (or the destructor) refuses new rows with
///    RunnerClosedError, then runs or fails every pending row (ClosePolicy),
///    and joins the runner thread. No future is ever left without a value.

#include <tensordict/errors.h>
#include <tensordict/nested_key.h>
#include <tensordict/nn/model_error.h>
#include <tensordict/nn/tensor_dict_module_base.h>
#include <tensordict/tensor_dict_base.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tensordict::nn {

/// submit() or run() after close(), or a pending row failed by
/// ClosePolicy::fail_pending.
class RunnerClosedError : public Error {
 public:
  using Error::Error;
};

/// What the future of a row holds.
enum class RowResult : std::uint8_t {
  /// A new tensordict with the row's batch size holding only the module's
  /// out_keys (the `"_"` ones skipped). The default for a module.
  out_keys,
  /// The whole row of the module's output: the row's own entries and the
  /// outputs, as `module(row)` alone would return it. The only form for a
  /// BatchFn, which has no out_keys.
  whole_row,
};

/// What close() does with rows submitted before it and not yet run.
enum class ClosePolicy : std::uint8_t {
  /// Run them (in batches, as usual) and deliver their results; close()
  /// returns when the last one is delivered.
  drain,
  /// Fail each one with RunnerClosedError; only the batch already running is
  /// finished.
  fail_pending,
};

struct BatchingRunnerOptions {
  /// The most rows stacked into one forward call (>= 1).
  std::size_t max_batch = 32;
  /// How long a batch waits for more rows after its first row was submitted,
  /// before it runs with the rows it has. Zero (the default) runs whatever is
  /// queued as soon as the runner is free: rows that arrive while a batch
  /// runs make the next one, so batches grow with the load and no row waits
  /// on a timer (measured faster than a 100 us wait with 8 actors; see
  /// docs/nn_batching.md). A positive wait gives fuller batches to a model
  /// whose call costs much more than the wait.
  std::chrono::microseconds max_wait{0};
  /// Run the module under torch::NoGradGuard (an actor's inference). Off: the
  /// runner thread records autograd graphs as the module would.
  bool no_grad = true;
  /// What each future holds (RowResult).
  RowResult result = RowResult::out_keys;
  /// What close() and the destructor do with pending rows.
  ClosePolicy on_close = ClosePolicy::drain;
  /// How long a waiting thread keeps checking, yielding its core to other
  /// threads between checks, before it sleeps: a caller of run() / run_all()
  /// waiting for its result, and the runner thread waiting for rows after a
  /// batch. A sleeping thread costs a wake-up (a system call and a context
  /// switch) that on few cores costs about as much as a small model's whole
  /// call (docs/nn_batching.md). While it yields, the thread burns CPU only
  /// when no other thread wants the core. 0: sleep at once. A future from
  /// submit() does not spin: `get()` sleeps.
  std::chrono::microseconds spin{200};
};

/// Counts since construction (each read is a consistent-enough snapshot of
/// atomic counters, for monitoring and tests).
struct BatchingRunnerStats {
  std::uint64_t rows_submitted = 0;
  /// Rows whose future got a result.
  std::uint64_t rows_succeeded = 0;
  /// Rows whose future got an error (their own, or RunnerClosedError).
  std::uint64_t rows_failed = 0;
  /// Calls of the module on a stacked batch.
  std::uint64_t batched_forwards = 0;
  /// Calls of the module on one row alone, after its batch threw.
  std::uint64_t single_forwards = 0;
  /// The most rows one batched forward had.
  std::uint64_t largest_batch = 0;
};

/// Batches single-row calls of a module from many threads.
///
/// Thread safety: submit(), run(), stats() and close() may be called from any
/// number of threads at once. The module is called only from the runner's own
/// thread, one call at a time; the runner does not lock it against other
/// users, so callers must not train or modify it while the runner runs.
///
/// Rows: any tensordict (in memory, memory-mapped, a lazy stack, ...) of any
/// batch size; actors usually submit batch size []. Rows of the same
/// structure (the same leaf keys, and for each tensor leaf the same dtype,
/// device and shape, and the same batch size) are stacked along a new first
/// dim with tensordict::stack() and run together; a row of a different
/// structure runs in its own group, so it cannot make the others fail. The
/// runner copies the rows into the batch and never writes into them.
class BatchingRunner {
 public:
  /// The function form: takes a stacked batch, returns a tensordict whose
  /// first batch dim is the batch's (row i of it goes to the i-th caller).
  using BatchFn = std::function<TensorDictBase(TensorDictBase)>;

  /// Runs `module->forward(batch)` (in place on the stacked batch). ValueError
  /// for a null module, max_batch 0, or RowResult::out_keys with a module that
  /// declares no out_keys.
  explicit BatchingRunner(std::shared_ptr<TensorDictModuleBase> module,
                          BatchingRunnerOptions options = {});
  /// Runs `fn(batch)`; results are whole rows (ValueError when
  /// options.result is RowResult::out_keys, or for an empty fn). `name` names
  /// the function in errors.
  BatchingRunner(BatchFn fn, std::string name, BatchingRunnerOptions options = {});

  /// close() with the configured policy.
  ~BatchingRunner();
  BatchingRunner(const BatchingRunner&) = delete;
  BatchingRunner& operator=(const BatchingRunner&) = delete;

  /// Queues `row` and returns the future of its result (RowResult). Throws
  /// RunnerClosedError after close() and ValueError for a null handle; every
  /// other error arrives through the future, typed (tensordict::Error).
  std::future<TensorDictBase> submit(TensorDictBase row);
  /// submit(row).get(): waits until the row's result is there (spinning
  /// first, BatchingRunnerOptions::spin); rethrows its error.
  TensorDictBase run(TensorDictBase row);
  /// Submits every row, then waits for all of them (an actor stepping several
  /// environments): result i is row i's. When rows fail, the first failing
  /// row's error is rethrown once every row is done, so the rows may be
  /// reused when the call returns. A null row is a ValueError before any row
  /// is queued.
  std::vector<TensorDictBase> run_all(const std::vector<TensorDictBase>& rows);

  /// Stops accepting rows, runs or fails the pending ones (options().on_close)
  /// and joins the runner thread. Idempotent; concurrent calls all return
  /// after the thread is joined. ValueError when called from the runner's
  /// thread (from inside the module), which would wait for itself.
  void close();
  /// True once close() has begun.
  bool closed() const;

  BatchingRunnerStats stats() const;
  const BatchingRunnerOptions& options() const noexcept { return options_; }
  /// The module or function name used in errors.
  const std::string& name() const noexcept { return name_; }

 private:
  struct Request;
  struct Counters;
  // Requests of submit() are owned by the queue and then the runner thread;
  // those of run() and run_all() live in the caller's frame until it has its
  // results.
  using Requests = std::vector<Request*>;

  void worker_loop();
  void run_batch(Requests& requests);
  void run_group(const std::vector<Request*>& group, bool rerun);
  TensorDictBase call(TensorDictBase input);
  // Prepares `request` (its structure) on the caller's thread; false when
  // that already failed it.
  bool prepare(Request& request);
  // Queues the requests, all or none (RunnerClosedError after close()).
  void enqueue(Request* const* requests, std::size_t count);
  void succeed(Request& request, const TensorDictBase& source, int64_t index);
  void fail(Request& request, std::exception_ptr error);
  std::exception_ptr typed(std::exception_ptr error) const;

  BatchFn fn_;
  std::vector<NestedKey> out_keys_;
  std::string name_;
  BatchingRunnerOptions options_;
  std::unique_ptr<Counters> counters_;

  mutable std::mutex mutex_;
  std::condition_variable wake_runner_;
  std::deque<Request*> queue_;
  bool closing_ = false;
  // Read without the mutex by the runner thread while it spins between
  // batches: the queue's length and closing_.
  std::atomic<std::size_t> queued_{0};
  std::atomic<bool> stop_spinning_{false};
  // Which requests of the running batch got their result or error, by slot
  // (runner thread only).
  std::vector<char> delivered_;
  std::mutex join_mutex_;
  std::thread worker_;
};

}  // namespace tensordict::nn
