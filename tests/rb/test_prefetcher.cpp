// Prefetcher: batches drawn ahead on a thread, in the order drawn, as the
// buffer was when each was drawn; errors reach next(); clean shutdown; and a
// writer thread beside the consumer.
#include <tensordict/rb/prefetcher.h>
#include <tensordict/rb/replay_buffer.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace rb = tensordict::rb;
namespace td = tensordict;

namespace {

// n rows whose leaves all encode their item id (first + k).
td::TensorDict items(int64_t first, int64_t n) {
  at::Tensor id = at::arange(first, first + n, at::kLong);
  return td::TensorDict({{"id", id}, {"x", id.to(at::kFloat).unsqueeze(1).repeat({1, 3})}}, {n});
}

// The ids of a sampled batch, after checking that every row is whole.
std::vector<int64_t> ids_of(const td::TensorDict& batch) {
  at::Tensor id = batch.get("id");
  EXPECT_TRUE(at::equal(batch.get("x"), id.to(at::kFloat).unsqueeze(1).repeat({1, 3})));
  return std::vector<int64_t>(id.data_ptr<int64_t>(), id.data_ptr<int64_t>() + id.numel());
}

// Waits (up to 10 s) until `p` holds `n` batches.
bool wait_ready(const rb::Prefetcher& p, int64_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (p.ready() < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST(Prefetcher, NextReturnsBatchesOfTheBufferAndKeepsDepthReady) {
  rb::ReplayBuffer buffer(100);
  buffer.extend(items(0, 100));
  rb::Prefetcher batches(buffer, 16, 3);
  EXPECT_EQ(batches.ready(), 0);  // nothing drawn before the first next()
  for (int i = 0; i < 10; ++i) {
    td::TensorDict b = batches.next();
    EXPECT_EQ(b.batch_size().vec(), (std::vector<int64_t>{16}));
    EXPECT_TRUE(at::equal(b.get("index"), b.get("id")));  // row r holds item r
    for (int64_t id : ids_of(b)) EXPECT_TRUE(id >= 0 && id < 100) << id;
  }
  EXPECT_TRUE(wait_ready(batches, 3));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(batches.ready(), 3);  // never more than the depth
}

TEST(Prefetcher, AWaitingBatchWasDrawnBeforeLaterWrites) {
  rb::ReplayBuffer buffer(8);
  buffer.extend(items(0, 8));
  rb::Prefetcher batches(buffer, 4, 2);
  for (int64_t id : ids_of(batches.next())) EXPECT_LT(id, 8);
  ASSERT_TRUE(wait_ready(batches, 2));
  buffer.extend(items(100, 8));  // every row replaced
  // The two waiting batches were drawn before the writes, as in TorchRL.
  for (int i = 0; i < 2; ++i)
    for (int64_t id : ids_of(batches.next())) EXPECT_LT(id, 8) << "batch " << i;
  // Those drawn since see the new rows.
  ASSERT_TRUE(wait_ready(batches, 2));
  for (int i = 0; i < 4; ++i)
    for (int64_t id : ids_of(batches.next())) EXPECT_GE(id, 100) << "batch " << i;
}

TEST(Prefetcher, AFailedSampleIsThrownByNext) {
  rb::ReplayBuffer buffer(4);  // empty: sampling is a ValueError
  rb::Prefetcher batches(buffer, 2, 2);
  EXPECT_THROW(batches.next(), td::ValueError);  // drawn on the caller's thread
  ASSERT_TRUE(wait_ready(batches, 1));           // the thread's draw failed too...
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(batches.ready(), 1);  // ...and it draws nothing more until that is thrown
  buffer.extend(items(0, 4));
  EXPECT_THROW(batches.next(), td::ValueError);  // the error drawn before the writes
  for (int i = 0; i < 5; ++i)
    for (int64_t id : ids_of(batches.next())) EXPECT_LT(id, 4);
}

TEST(Prefetcher, ChecksItsArgumentsAndStopsWithBatchesWaiting) {
  rb::ReplayBuffer buffer(16);
  buffer.extend(items(0, 16));
  EXPECT_THROW(rb::Prefetcher(buffer, 0, 2), td::ValueError);
  EXPECT_THROW(rb::Prefetcher(buffer, 4, 0), td::ValueError);
  for (int round = 0; round < 20; ++round) {
    rb::Prefetcher batches(buffer, 4, 4);
    batches.next();
    if (round % 2) EXPECT_TRUE(wait_ready(batches, 4));
  }  // each destroyed with its thread drawing or its queue full
}

TEST(Prefetcher, AWriterThreadBesideTheConsumer) {
  rb::ReplayBuffer buffer(64);
  buffer.extend(items(0, 64));
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int64_t first = 1000; !done; first += 8) buffer.extend(items(first, 8));
  });
  {
    rb::Prefetcher batches(buffer, 32, 3);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(ids_of(batches.next()).size(), 32u);
  }
  done = true;
  writer.join();
}
