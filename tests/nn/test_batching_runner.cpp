// BatchingRunner: rows from many threads run as stacked batches; each caller
// gets its own row, its own error, and every future a value at shutdown
// (docs/nn_batching.md).
#include "pch.h"

#include <tensordict/nn/batching_runner.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace td = tensordict;
using td::nn::BatchingRunner;
using td::nn::BatchingRunnerOptions;
using namespace std::chrono_literals;

namespace {

// A small policy: "action" = Linear(4, 2)("obs"). It records the batch size
// of every call, can be slowed down, and fails for one input value (an obs
// whose first element is `poison`), the way a model fails on one bad input.
class Policy : public td::nn::TensorDictModuleBase {
 public:
  enum class Failure { typed, raw };

  Policy() : TensorDictModuleBase("Policy", {"obs"}, {"action"}) {
    torch::manual_seed(7);
    linear_ = register_module("linear", torch::nn::Linear(4, 2));
  }
  void forward_into(const td::TensorDictBase& in, td::TensorDictBase& out) override {
    auto inputs = read_inputs(in);
    const auto& obs = inputs.at(0);
    {
      std::lock_guard lock(mutex_);
      batch_sizes_.push_back(in.batch_dims() > 0 ? in.size(0) : 0);
    }
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (poison_ && (obs.select(-1, 0) == *poison_).any().item<bool>()) {
      if (failure_ == Failure::typed) throw td::ValueError("Policy: poisoned observation");
      throw std::runtime_error("poisoned observation");
    }
    write_outputs(out, {linear_(obs)});
  }

  // The module alone on one row, as a caller without the runner computes it.
  at::Tensor alone(const td::TensorDictBase& row) {
    torch::NoGradGuard no_grad;
    return linear_(row.get("obs"));
  }

  std::vector<int64_t> batch_sizes() const {
    std::lock_guard lock(mutex_);
    return batch_sizes_;
  }

  std::chrono::milliseconds delay_{0};
  std::optional<float> poison_;
  Failure failure_ = Failure::typed;

 private:
  torch::nn::Linear linear_{nullptr};
  mutable std::mutex mutex_;
  std::vector<int64_t> batch_sizes_;
};

td::TensorDict row(float first) {
  auto obs = torch::randn({4});
  obs[0] = first;
  return td::TensorDict({{"obs", obs}});
}

// Options under which every row submitted before the batch is full waits for
// it: `n` rows make exactly one batch.
BatchingRunnerOptions one_batch_of(std::size_t n) {
  BatchingRunnerOptions options;
  options.max_batch = n;
  options.max_wait = 10s;
  return options;
}

// Options under which the runner takes what is queued, up to `n` rows, as
// soon as it is free.
BatchingRunnerOptions no_wait(std::size_t n) {
  BatchingRunnerOptions options;
  options.max_batch = n;
  options.max_wait = 0us;
  return options;
}

std::shared_ptr<Policy> slow_policy(std::chrono::milliseconds delay) {
  auto policy = std::make_shared<Policy>();
  policy->delay_ = delay;
  return policy;
}

// The runner's result for `input` is what the module computes on it alone.
bool same_as_alone(Policy& policy, const td::TensorDictBase& result,
                   const td::TensorDictBase& input) {
  return torch::allclose(result.get("action"), policy.alone(input), 1e-5, 1e-6);
}

}  // namespace

TEST(NnBatchingRunner, EachCallerGetsItsOwnRowFromManyThreads) {
  auto policy = std::make_shared<Policy>();
  BatchingRunnerOptions options;
  options.max_batch = 8;
  BatchingRunner runner(policy, options);
  constexpr int kThreads = 8;
  constexpr int kRowsPerThread = 60;
  std::atomic<int> mismatches{0};
  std::atomic<int> checked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRowsPerThread; ++i) {
        auto input = row(static_cast<float>(t * 1000 + i));
        auto result = runner.run(input);
        // Only the out_keys, with the row's batch size.
        if (result.keys() != std::vector<td::NestedKey>{"action"} || result.batch_dims() != 0 ||
            !same_as_alone(*policy, result, input)) {
          ++mismatches;
        }
        ++checked;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(checked.load(), kThreads * kRowsPerThread);
  EXPECT_EQ(mismatches.load(), 0);
  auto stats = runner.stats();
  EXPECT_EQ(stats.rows_submitted, static_cast<std::uint64_t>(kThreads * kRowsPerThread));
  EXPECT_EQ(stats.rows_succeeded, stats.rows_submitted);
  EXPECT_EQ(stats.rows_failed, 0u);
}

TEST(NnBatchingRunner, RowsOfOneBatchGetTheirOwnRowsInAnyOrder) {
  // One batch of 6 whose rows differ only by the value the caller put in:
  // each future must hold the output of its own row, not of a neighbour.
  auto policy = std::make_shared<Policy>();
  BatchingRunner runner(policy, one_batch_of(6));
  std::vector<td::TensorDict> inputs;
  std::vector<std::future<td::TensorDictBase>> futures;
  for (int i = 0; i < 6; ++i) {
    inputs.push_back(row(static_cast<float>(i)));
    futures.push_back(runner.submit(inputs.back()));
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(same_as_alone(*policy, futures[i].get(), inputs[i])) << "row " << i;
  }
  EXPECT_EQ(policy->batch_sizes(), std::vector<int64_t>{6});
}

TEST(NnBatchingRunner, WholeRowHoldsTheInputsAndTheOutputs) {
  auto policy = std::make_shared<Policy>();
  auto options = one_batch_of(3);
  options.result = td::nn::RowResult::whole_row;
  BatchingRunner runner(policy, options);
  std::vector<td::TensorDict> inputs{row(1), row(2), row(3)};
  std::vector<std::future<td::TensorDictBase>> futures;
  for (auto& input : inputs) futures.push_back(runner.submit(input));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto result = futures[i].get();
    EXPECT_TRUE(torch::equal(result.get("obs"), inputs[i].get("obs")));
    EXPECT_TRUE(same_as_alone(*policy, result, inputs[i]));
    // The caller's row is never written.
    EXPECT_FALSE(inputs[i].contains("action"));
  }
}

TEST(NnBatchingRunner, BatchesNeverExceedMaxBatchAndAreFewerThanRows) {
  auto policy = slow_policy(2ms);  // rows pile up while a batch runs
  BatchingRunnerOptions options;
  options.max_batch = 4;
  BatchingRunner runner(policy, options);
  constexpr int kThreads = 12;
  constexpr int kRowsPerThread = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRowsPerThread; ++i) runner.run(row(1));
    });
  }
  for (auto& thread : threads) thread.join();
  auto sizes = policy->batch_sizes();
  int64_t rows = 0;
  for (auto size : sizes) {
    EXPECT_GE(size, 1);
    EXPECT_LE(size, 4);
    rows += size;
  }
  EXPECT_EQ(rows, kThreads * kRowsPerThread);
  // 12 threads waiting on a runner that takes 4 rows per 2 ms call: most
  // calls are full.
  EXPECT_LT(sizes.size(), static_cast<std::size_t>(kThreads * kRowsPerThread) / 2);
  auto stats = runner.stats();
  EXPECT_EQ(stats.batched_forwards, sizes.size());
  EXPECT_EQ(stats.largest_batch, 4u);
}

TEST(NnBatchingRunner, ARowWaitsAtMostMaxWaitForCompany) {
  auto policy = std::make_shared<Policy>();
  BatchingRunnerOptions options;
  options.max_batch = 2;
  options.max_wait = 300ms;
  BatchingRunner runner(policy, options);

  // Alone, the row waits for the bound, then runs in a batch of one.
  auto start = std::chrono::steady_clock::now();
  runner.run(row(1));
  auto alone = std::chrono::steady_clock::now() - start;
  EXPECT_GE(alone, 300ms);
  EXPECT_LT(alone, 5s);

  // A full batch does not wait.
  start = std::chrono::steady_clock::now();
  auto first = runner.submit(row(2));
  auto second = runner.submit(row(3));
  first.get();
  second.get();
  auto full = std::chrono::steady_clock::now() - start;
  EXPECT_LT(full, 250ms);
  EXPECT_EQ(policy->batch_sizes(), (std::vector<int64_t>{1, 2}));
}

TEST(NnBatchingRunner, ZeroWaitRunsWhatIsQueued) {
  auto policy = std::make_shared<Policy>();
  BatchingRunnerOptions options;
  options.max_wait = 0us;
  BatchingRunner runner(policy, options);
  auto start = std::chrono::steady_clock::now();
  runner.run(row(1));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 250ms);
}

TEST(NnBatchingRunner, RowsOfAnotherStructureFailAloneWithTheirOwnError) {
  auto policy = std::make_shared<Policy>();
  BatchingRunner runner(policy, one_batch_of(6));
  std::vector<td::TensorDict> good{row(1), row(2), row(3)};
  auto missing_key = td::TensorDict({{"observation", torch::randn({4})}});
  auto wrong_shape = td::TensorDict({{"obs", torch::randn({5})}});
  auto wrong_dtype = td::TensorDict({{"obs", torch::randn({4}, torch::kFloat64)}});
  std::vector<std::future<td::TensorDictBase>> futures;
  // Interleaved, so that a bad row sits between good ones in the queue.
  futures.push_back(runner.submit(good[0]));
  auto missing_future = runner.submit(missing_key);
  futures.push_back(runner.submit(good[1]));
  auto shape_future = runner.submit(wrong_shape);
  auto dtype_future = runner.submit(wrong_dtype);
  futures.push_back(runner.submit(good[2]));

  for (std::size_t i = 0; i < good.size(); ++i) {
    EXPECT_TRUE(same_as_alone(*policy, futures[i].get(), good[i]));
  }
  try {
    missing_future.get();
    ADD_FAILURE() << "a row without the input key ran";
  } catch (const td::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("obs"), std::string::npos) << e.what();
  }
  // LibTorch's own errors arrive typed, naming the module.
  EXPECT_THROW(shape_future.get(), td::nn::ModelError);
  try {
    dtype_future.get();
    ADD_FAILURE() << "a float64 row ran through a float32 Linear";
  } catch (const td::nn::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("Policy"), std::string::npos) << e.what();
  }
  // The good rows ran together; each bad row alone.
  auto sizes = policy->batch_sizes();
  EXPECT_EQ(std::count(sizes.begin(), sizes.end(), 3), 1);
  auto stats = runner.stats();
  EXPECT_EQ(stats.rows_succeeded, 3u);
  EXPECT_EQ(stats.rows_failed, 3u);
}

TEST(NnBatchingRunner, AForwardThatThrowsForOneValueFailsOnlyThatCaller) {
  for (auto failure : {Policy::Failure::typed, Policy::Failure::raw}) {
    auto policy = std::make_shared<Policy>();
    policy->poison_ = 13.0f;
    policy->failure_ = failure;
    BatchingRunner runner(policy, one_batch_of(5));
    std::vector<td::TensorDict> inputs{row(1), row(2), row(13), row(4), row(5)};
    std::vector<std::future<td::TensorDictBase>> futures;
    for (auto& input : inputs) futures.push_back(runner.submit(input));
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (i == 2) {
        try {
          futures[i].get();
          ADD_FAILURE() << "the poisoned row got a result";
        } catch (const td::nn::ModelError& e) {
          // A raw exception is wrapped, the original kept as the nested one.
          EXPECT_EQ(failure, Policy::Failure::raw);
          EXPECT_NE(std::string(e.what()).find("poisoned observation"), std::string::npos);
          EXPECT_THROW(std::rethrow_if_nested(e), std::runtime_error);
        } catch (const td::ValueError& e) {
          // A tensordict error passes through as it was thrown.
          EXPECT_EQ(failure, Policy::Failure::typed);
          EXPECT_STREQ(e.what(), "Policy: poisoned observation");
        }
      } else {
        EXPECT_TRUE(same_as_alone(*policy, futures[i].get(), inputs[i])) << "row " << i;
      }
    }
    // One batched call that threw, then each row alone to find whose it was.
    EXPECT_EQ(policy->batch_sizes(), (std::vector<int64_t>{5, 1, 1, 1, 1, 1}));
    auto stats = runner.stats();
    EXPECT_EQ(stats.batched_forwards, 1u);
    EXPECT_EQ(stats.single_forwards, 5u);
    EXPECT_EQ(stats.rows_failed, 1u);
    EXPECT_EQ(stats.rows_succeeded, 4u);
  }
}

TEST(NnBatchingRunner, CloseDrainsPendingRows) {
  auto policy = slow_policy(30ms);
  BatchingRunner runner(policy, no_wait(2));
  std::vector<td::TensorDict> inputs;
  std::vector<std::future<td::TensorDictBase>> futures;
  for (int i = 0; i < 10; ++i) {
    inputs.push_back(row(static_cast<float>(i)));
    futures.push_back(runner.submit(inputs.back()));
  }
  runner.close();
  EXPECT_TRUE(runner.closed());
  for (std::size_t i = 0; i < futures.size(); ++i) {
    ASSERT_EQ(futures[i].wait_for(0s), std::future_status::ready) << "row " << i;
    EXPECT_TRUE(same_as_alone(*policy, futures[i].get(), inputs[i]));
  }
  EXPECT_EQ(runner.stats().rows_succeeded, 10u);
}

TEST(NnBatchingRunner, CloseCanFailPendingRows) {
  auto policy = slow_policy(100ms);
  auto options = no_wait(2);
  options.on_close = td::nn::ClosePolicy::fail_pending;
  BatchingRunner runner(policy, options);
  std::vector<std::future<td::TensorDictBase>> futures;
  futures.push_back(runner.submit(row(0)));
  // The first row is running (its forward sleeps) before the others queue.
  while (policy->batch_sizes().empty()) std::this_thread::sleep_for(1ms);
  for (int i = 1; i < 8; ++i) futures.push_back(runner.submit(row(static_cast<float>(i))));
  runner.close();
  int succeeded = 0;
  int refused = 0;
  for (auto& future : futures) {
    ASSERT_EQ(future.wait_for(0s), std::future_status::ready);
    try {
      future.get();
      ++succeeded;
    } catch (const td::nn::RunnerClosedError&) {
      ++refused;
    }
  }
  EXPECT_EQ(succeeded, 1);  // the batch already running finishes
  EXPECT_EQ(refused, 7);
  EXPECT_EQ(policy->batch_sizes().size(), 1u);
}

TEST(NnBatchingRunner, SubmitAfterCloseIsARunnerClosedError) {
  auto policy = std::make_shared<Policy>();
  BatchingRunner runner(policy);
  runner.close();
  runner.close();  // idempotent
  EXPECT_THROW(runner.submit(row(1)), td::nn::RunnerClosedError);
  EXPECT_THROW(runner.run(row(1)), td::nn::RunnerClosedError);
  EXPECT_THROW(runner.run(row(1)), td::Error);
  EXPECT_EQ(runner.stats().rows_submitted, 0u);
}

TEST(NnBatchingRunner, DestructorWithoutCloseDeliversEveryPendingRow) {
  auto policy = slow_policy(20ms);
  std::vector<std::future<td::TensorDictBase>> futures;
  {
    BatchingRunner runner(policy, no_wait(3));
    for (int i = 0; i < 9; ++i) futures.push_back(runner.submit(row(static_cast<float>(i))));
  }
  for (auto& future : futures) {
    ASSERT_EQ(future.wait_for(0s), std::future_status::ready);
    EXPECT_EQ(future.get().get("action").sizes(), (std::vector<int64_t>{2}));
  }
}

TEST(NnBatchingRunner, ConcurrentSubmitAndCloseLeaveNoFutureWithoutAValue) {
  auto policy = slow_policy(1ms);
  auto runner = std::make_unique<BatchingRunner>(policy);
  std::atomic<int> results{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        try {
          runner->run(row(1));
          ++results;
        } catch (const td::nn::RunnerClosedError&) {
          ++refused;
        }
      }
    });
  }
  std::this_thread::sleep_for(20ms);
  runner->close();
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(results.load() + refused.load(), 6 * 200);
  EXPECT_GT(refused.load(), 0);
  EXPECT_EQ(runner->stats().rows_succeeded, static_cast<std::uint64_t>(results.load()));
}

TEST(NnBatchingRunner, CloseFromInsideTheModuleIsAnErrorForThatRow) {
  std::shared_ptr<BatchingRunner> runner;
  BatchingRunnerOptions options;
  options.result = td::nn::RowResult::whole_row;
  runner = std::make_shared<BatchingRunner>(
      [&](td::TensorDictBase batch) {
        runner->close();
        return batch;
      },
      "closer", options);
  EXPECT_THROW(runner->run(row(1)), td::ValueError);
  runner->close();
}

TEST(NnBatchingRunner, NoGradIsAnOption) {
  auto policy = std::make_shared<Policy>();
  {
    BatchingRunner runner(policy);
    EXPECT_FALSE(runner.run(row(1)).get("action").requires_grad());
  }
  BatchingRunnerOptions options;
  options.no_grad = false;
  BatchingRunner runner(policy, options);
  EXPECT_TRUE(runner.run(row(1)).get("action").requires_grad());
}

TEST(NnBatchingRunner, FunctionFormAndItsErrors) {
  BatchingRunnerOptions options;
  options.result = td::nn::RowResult::whole_row;
  BatchingRunner doubler(
      [](td::TensorDictBase batch) {
        batch.set("y", batch.get("x") * 2);
        return batch;
      },
      "doubler", options);
  auto result = doubler.run(td::TensorDict({{"x", torch::tensor({1.0f, 2.0f})}}, {}));
  EXPECT_TRUE(torch::equal(result.get("y"), torch::tensor({2.0f, 4.0f})));

  // A function that loses the batch dim: every row gets a ValueError.
  BatchingRunner loses_batch(
      [](td::TensorDictBase) { return td::TensorDictBase(td::TensorDict(std::vector<int64_t>{})); },
      "loses", options);
  try {
    loses_batch.run(row(1));
    ADD_FAILURE() << "a result without the batch dim was handed out";
  } catch (const td::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("loses"), std::string::npos) << e.what();
  }

  EXPECT_THROW(BatchingRunner([](td::TensorDictBase b) { return b; }, "f"), td::ValueError);
  EXPECT_THROW(BatchingRunner(BatchingRunner::BatchFn{}, "empty", options), td::ValueError);
  EXPECT_THROW(BatchingRunner(std::shared_ptr<td::nn::TensorDictModuleBase>{}), td::ValueError);
  // A module without declared out_keys (a dict model that writes what it
  // returns) has no out_keys rows to hand out.
  class WritesWhatItReturns : public td::nn::TensorDictModuleBase {
   public:
    WritesWhatItReturns() : TensorDictModuleBase("WritesWhatItReturns", {"x"}, {}) {}
    void forward_into(const td::TensorDictBase& in, td::TensorDictBase& out) override {
      out.set("y", in.get("x"));
    }
  };
  EXPECT_THROW(BatchingRunner(std::make_shared<WritesWhatItReturns>()), td::ValueError);
  BatchingRunner whole(std::make_shared<WritesWhatItReturns>(), options);
  EXPECT_TRUE(whole.run(td::TensorDict({{"x", torch::ones({2})}})).contains("y"));

  BatchingRunnerOptions zero;
  zero.max_batch = 0;
  EXPECT_THROW(BatchingRunner(std::make_shared<Policy>(), zero), td::ValueError);
}

TEST(NnBatchingRunner, RowsWithABatchDimStackAlongANewFirstDim) {
  auto policy = std::make_shared<Policy>();
  BatchingRunner runner(policy, one_batch_of(2));
  auto a = td::TensorDict({{"obs", torch::randn({3, 4})}}, {3});
  auto b = td::TensorDict({{"obs", torch::randn({3, 4})}}, {3});
  auto fa = runner.submit(a);
  auto fb = runner.submit(b);
  auto ra = fa.get();
  EXPECT_EQ(ra.batch_size().vec(), (std::vector<int64_t>{3}));
  EXPECT_TRUE(same_as_alone(*policy, ra, a));
  EXPECT_TRUE(same_as_alone(*policy, fb.get(), b));
  EXPECT_EQ(policy->batch_sizes(), std::vector<int64_t>{2});
}

TEST(NnBatchingRunner, OutKeysMayNameNestedTensordictsAndNonTensors) {
  // out_keys that name a whole nested tensordict and a non-tensor entry: each
  // caller gets its row of both.
  class Summary : public td::nn::TensorDictModuleBase {
   public:
    Summary() : TensorDictModuleBase("Summary", {"obs"}, {"stats", "label"}) {}
    void forward_into(const td::TensorDictBase& in, td::TensorDictBase& out) override {
      auto obs = in.get("obs");
      out.set("stats", td::TensorDict({{"mean", obs.mean(-1)}, {"max", std::get<0>(obs.max(-1))}},
                                      in.batch_size()));
      out.set_non_tensor("label", "summary");
    }
  };
  BatchingRunner runner(std::make_shared<Summary>(), one_batch_of(3));
  std::vector<td::TensorDict> inputs{row(1), row(2), row(3)};
  std::vector<std::future<td::TensorDictBase>> futures;
  for (auto& input : inputs) futures.push_back(runner.submit(input));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto result = futures[i].get();
    EXPECT_FALSE(result.contains("obs"));
    EXPECT_TRUE(torch::allclose(result.get({"stats", "mean"}), inputs[i].get("obs").mean()));
    EXPECT_TRUE(torch::equal(result.get({"stats", "max"}), inputs[i].get("obs").max()));
    EXPECT_EQ(result.get_non_tensor("label"), "summary");
  }
}

TEST(NnBatchingRunner, RunAllGivesEachRowItsOwnResultInOrder) {
  auto policy = std::make_shared<Policy>();
  BatchingRunner runner(policy, one_batch_of(3));
  std::vector<td::TensorDictBase> inputs{row(1), row(2), row(3)};
  auto results = runner.run_all(inputs);
  ASSERT_EQ(results.size(), 3u);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(results[i].keys(), std::vector<td::NestedKey>{"action"}) << "row " << i;
    EXPECT_TRUE(same_as_alone(*policy, results[i], inputs[i])) << "row " << i;
  }
  EXPECT_EQ(policy->batch_sizes(), (std::vector<int64_t>{3}));  // all three queued at once
  EXPECT_TRUE(runner.run_all({}).empty());
}

TEST(NnBatchingRunner, RunAllRethrowsTheFirstErrorOnceEveryRowIsDone) {
  auto policy = std::make_shared<Policy>();
  policy->poison_ = 13.0f;
  BatchingRunner runner(policy, one_batch_of(4));
  std::vector<td::TensorDictBase> inputs{row(1), row(13), row(3), row(13)};
  EXPECT_THROW(runner.run_all(inputs), td::ValueError);
  // Every row ran (the batch, then each alone) before the call returned.
  EXPECT_EQ(policy->batch_sizes(), (std::vector<int64_t>{4, 1, 1, 1, 1}));
  auto stats = runner.stats();
  EXPECT_EQ(stats.rows_failed, 2u);
  EXPECT_EQ(stats.rows_succeeded, 2u);
}

TEST(NnBatchingRunner, RunAllRefusesANullRowOrAClosedRunnerBeforeQueueingAny) {
  auto policy = std::make_shared<Policy>();
  BatchingRunner runner(policy, no_wait(4));
  std::vector<td::TensorDictBase> with_null{row(1), td::TensorDictBase(), row(3)};
  try {
    runner.run_all(with_null);
    ADD_FAILURE() << "a null row was accepted";
  } catch (const td::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(runner.run(td::TensorDictBase()), td::ValueError);
  EXPECT_EQ(runner.stats().rows_submitted, 0u);
  runner.close();
  EXPECT_THROW(runner.run_all({row(1), row(2)}), td::nn::RunnerClosedError);
  EXPECT_EQ(runner.stats().rows_submitted, 0u);
  EXPECT_TRUE(policy->batch_sizes().empty());
}

// Callers that sleep at once (spin 0), spin through short batches, or spin
// longer than any batch all get their own rows; no call is left waiting.
TEST(NnBatchingRunner, CallersGetTheirRowsWhetherTheySleepOrSpin) {
  for (auto spin : {0us, 200us, 50000us}) {
    auto policy = std::make_shared<Policy>();
    auto options = no_wait(8);
    options.spin = spin;
    BatchingRunner runner(policy, options);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 40; ++i) {
          std::vector<td::TensorDictBase> inputs{row(static_cast<float>(t * 100 + i)),
                                                 row(static_cast<float>(-t * 100 - i))};
          auto results = runner.run_all(inputs);
          for (std::size_t k = 0; k < inputs.size(); ++k)
            if (!same_as_alone(*policy, results[k], inputs[k])) ++mismatches;
          if (!same_as_alone(*policy, runner.run(inputs[0]), inputs[0])) ++mismatches;
        }
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(mismatches.load(), 0) << "spin " << spin.count() << " us";
    EXPECT_EQ(runner.stats().rows_succeeded, 6u * 40u * 3u) << "spin " << spin.count() << " us";
  }
}

TEST(NnBatchingRunner, RunAllCallersAcrossACloseThatFailsPendingRowsAllReturn) {
  auto policy = slow_policy(1ms);
  auto options = no_wait(4);
  options.on_close = td::nn::ClosePolicy::fail_pending;
  auto runner = std::make_unique<BatchingRunner>(policy, options);
  std::atomic<int> calls_done{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        try {
          runner->run_all({row(1), row(2), row(3)});
        } catch (const td::nn::RunnerClosedError&) {
          ++refused;
        }
        ++calls_done;
      }
    });
  }
  std::this_thread::sleep_for(20ms);
  runner->close();
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(calls_done.load(), 6 * 100);
  EXPECT_GT(refused.load(), 0);
  auto stats = runner->stats();
  EXPECT_EQ(stats.rows_succeeded + stats.rows_failed, stats.rows_submitted);
}
