// RoundRobinWriter: rows of each write, wrap-around, overlong extends, state.
#include <tensordict/rb/writer.h>

namespace rb = tensordict::rb;

TEST(RoundRobinWriter, WrapsAndCounts) {
  rb::RoundRobinWriter w;
  EXPECT_TRUE(torch::equal(w.next_rows(3, 5), torch::tensor({0, 1, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(w.next_rows(4, 5), torch::tensor({3, 4, 0, 1}, torch::kLong)));
  EXPECT_EQ(w.state(), (rb::WriterState{2, 7}));
  EXPECT_EQ(w.next_row(5), 2);
  EXPECT_EQ(w.state(), (rb::WriterState{3, 8}));
}

TEST(RoundRobinWriter, OverlongExtendAsTorchRL) {
  rb::RoundRobinWriter w;
  w.next_row(4);
  // 6 items into 4 rows from cursor 1: item k -> row (1 + k) % 4.
  EXPECT_TRUE(torch::equal(w.next_rows(6, 4), torch::tensor({1, 2, 3, 0, 1, 2}, torch::kLong)));
  EXPECT_EQ(w.state(), (rb::WriterState{3, 7}));
}

TEST(RoundRobinWriter, LoadStateChecks) {
  rb::RoundRobinWriter w;
  w.load_state({2, 10}, 4);
  EXPECT_EQ(w.next_row(4), 2);
  EXPECT_THROW(w.load_state({4, 10}, 4), tensordict::ValueError);
  EXPECT_THROW(w.load_state({-1, 10}, 4), tensordict::ValueError);
  EXPECT_THROW(w.load_state({0, -1}, 4), tensordict::ValueError);
  EXPECT_THROW(w.next_rows(-1, 4), tensordict::ValueError);
  EXPECT_THROW(w.next_rows(1, 0), tensordict::ValueError);
  EXPECT_EQ(w.state(), (rb::WriterState{3, 11}));
  w.reset();
  EXPECT_EQ(w.state(), (rb::WriterState{}));
}
