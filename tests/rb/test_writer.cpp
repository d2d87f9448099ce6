// RoundRobinWriter: rows of each write, wrap-around, overlong extends, state;
// undo through the Writer interface, and the buffer's path for writers it
// does not know.
#include <tensordict/rb/replay_buffer.h>
#include <tensordict/rb/writer.h>

namespace rb = tensordict::rb;
namespace td = tensordict;

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

TEST(RoundRobinWriter, ThroughTheInterfaceUndoes) {
  rb::RoundRobinWriter w;
  rb::Writer& as_writer = w;
  td::TensorDict batch({{"x", at::zeros({4})}}, {4});
  EXPECT_TRUE(as_writer.write_rows(batch, 3).equal(at::tensor({0, 1, 2, 0}, at::kLong)));
  EXPECT_EQ(w.state(), (rb::WriterState{1, 4}));
  as_writer.undo();
  EXPECT_EQ(w.state(), (rb::WriterState{0, 0}));
  EXPECT_EQ(as_writer.write_row(batch[0], 3), 0);
  as_writer.undo();
  EXPECT_EQ(w.state(), (rb::WriterState{0, 0}));
}

// A writer the buffer does not know (here a RoundRobinWriter subclass) goes
// through Writer::write_rows / write_row and one index_put_ of the kept items:
// the same rows as the built-in round-robin path.
TEST(RoundRobinWriter, GenericWriterPathMatchesTheDirectOne) {
  struct OwnWriter : rb::RoundRobinWriter {
    std::string name() const override { return "OwnWriter"; }
  };
  rb::ReplayBuffer direct(5), generic(5, nullptr, "memory", {}, std::make_shared<OwnWriter>());
  for (int64_t start : {0, 3, 6}) {
    td::TensorDict batch({{"x", at::arange(start, start + 3, at::kFloat)}}, {3});
    EXPECT_TRUE(direct.extend(batch).equal(generic.extend(batch)));
  }
  EXPECT_EQ(direct.add(td::TensorDict({{"x", at::scalar_tensor(9.f)}}, {})),
            generic.add(td::TensorDict({{"x", at::scalar_tensor(9.f)}}, {})));
  EXPECT_TRUE(direct.storage().get("x").equal(generic.storage().get("x")));
  EXPECT_EQ(direct.writer_state(), generic.writer_state());
}
