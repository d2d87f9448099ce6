// Reads and writes through the node interface touch only the rows asked for.
// CountingNode is a storage that keeps its data in memory but, like a file or
// server storage, does not hand out its tensors (holds_values() is false): the
// core must come through read_at / write_at_, and every byte it asks for is
// counted.
#include "pch.h"

namespace td = tensordict;
using namespace torch::indexing;

namespace {

class CountingNode final : public td::Node {
 public:
  CountingNode(std::vector<int64_t> batch) : inner_(std::move(batch), std::nullopt) {}

  std::string type_name() const override { return "CountingTensorDict"; }
  at::IntArrayRef batch_size() const override { return inner_.batch_size(); }
  void set_batch_size(std::vector<int64_t> b) override { inner_.set_batch_size(std::move(b)); }
  std::optional<at::Device> device() const override { return inner_.device(); }
  void set_device(std::optional<at::Device> d) override { inner_.set_device(d); }
  std::vector<std::string> keys() const override { return inner_.keys(); }
  std::size_t size() const override { return inner_.size(); }
  std::optional<td::EntryKind> kind(std::string_view key) const override {
    return inner_.kind(key);
  }
  std::optional<td::TensorMeta> tensor_meta(std::string_view key) const override {
    const td::Value* v = inner_.peek(key);
    if (!v || !v->is_tensor()) return std::nullopt;
    const auto& t = v->tensor();
    return td::TensorMeta{t.sizes().vec(), t.scalar_type(), t.device()};
  }
  // A whole-leaf read: counted in full (and cloned, as a file would be read).
  std::optional<td::Value> find(std::string_view key) const override {
    auto v = inner_.find(key);
    if (v && v->is_tensor()) {
      bytes_read += v->tensor().nbytes();
      return td::Value(v->tensor().clone());
    }
    return v;
  }
  at::Tensor read_at(std::string_view key, td::IndexList index) const override {
    at::Tensor rows = inner_.peek(key)->tensor().index(index).clone();
    bytes_read += rows.nbytes();
    return rows;
  }
  void write(std::string_view key, td::Value value) override {
    if (value.is_tensor()) bytes_written += value.tensor().nbytes();
    inner_.write(key, std::move(value));
  }
  void write_at_(std::string_view key, td::IndexList index,
                 const at::Tensor& value) override {
    bytes_written += value.nbytes();
    at::Tensor leaf = inner_.peek(key)->tensor();
    leaf.index_put_(index, value);
  }
  void remove(std::string_view key) override { inner_.remove(key); }

  // Direct access for the test's own checks (not counted).
  at::Tensor raw(const std::string& key) const { return inner_.peek(key)->tensor(); }
  void reset() { bytes_read = bytes_written = 0; }

  mutable int64_t bytes_read = 0;
  int64_t bytes_written = 0;

 private:
  td::detail::MemoryNode inner_;
};

struct StorageReads : ::testing::Test {
  static constexpr int64_t N = 1000;
  std::shared_ptr<CountingNode> node = std::make_shared<CountingNode>(std::vector<int64_t>{N});
  td::TensorDictBase store{node};
  // One row of every leaf, in bytes: 8 floats + 1 int64.
  static constexpr int64_t kRowBytes = 8 * 4 + 8;

  void SetUp() override {
    node->write("obs", torch::arange(N * 8, torch::kFloat).view({N, 8}));
    node->write("step", torch::arange(N, torch::kLong));
    node->reset();
  }
};

TEST_F(StorageReads, IntegerIndexReadsOneRow) {
  td::TensorDictBase row = store[7];
  EXPECT_EQ(node->bytes_read, kRowBytes);
  EXPECT_EQ(row.get("step").item<int64_t>(), 7);
  EXPECT_TRUE(torch::equal(row.get("obs"), torch::arange(56, 64, torch::kFloat)));
}

TEST_F(StorageReads, SliceReadsOnlyTheSlice) {
  td::TensorDictBase rows = store.index({Slice(10, 20)});
  EXPECT_EQ(node->bytes_read, 10 * kRowBytes);
  EXPECT_EQ(rows.batch_size(), at::IntArrayRef({10}));
  EXPECT_EQ(rows.get("step")[0].item<int64_t>(), 10);
}

TEST_F(StorageReads, LongIndexReadsOnlyThoseRows) {
  auto idx = torch::tensor({5, 900, 3}, torch::kLong);
  td::TensorDictBase rows = store.index({idx});
  EXPECT_EQ(node->bytes_read, 3 * kRowBytes);
  EXPECT_TRUE(torch::equal(rows.get("step"), idx));
}

TEST_F(StorageReads, MaskReadsOnlySelectedRows) {
  auto mask = torch::zeros({N}, torch::kBool);
  mask.index_put_({Slice(0, 4)}, true);
  td::TensorDictBase rows = store.index({mask});
  EXPECT_EQ(node->bytes_read, 4 * kRowBytes);
  EXPECT_EQ(rows.batch_size(), at::IntArrayRef({4}));
}

TEST_F(StorageReads, GetAtReadsOnlyTheRows) {
  at::Tensor obs = store.get_at("obs", {Slice(0, 2)});
  EXPECT_EQ(node->bytes_read, 2 * 8 * 4);
  EXPECT_EQ(obs.sizes(), at::IntArrayRef({2, 8}));
}

TEST_F(StorageReads, IndexPutWritesOnlyTheRowAndReadsNothing) {
  td::TensorDict row({{"obs", torch::full({8}, -1.0)}, {"step", torch::tensor(-1)}}, {});
  store.index_put_({42}, row);
  EXPECT_EQ(node->bytes_read, 0);
  EXPECT_EQ(node->bytes_written, kRowBytes);
  EXPECT_EQ(node->raw("step")[42].item<int64_t>(), -1);
  EXPECT_EQ(node->raw("step")[41].item<int64_t>(), 41);
}

TEST_F(StorageReads, IndexPutWithLongIndexWritesOnlyThoseRows) {
  auto idx = torch::tensor({1, 2, 3}, torch::kLong);
  td::TensorDict rows({{"obs", torch::zeros({3, 8})}, {"step", torch::zeros({3}, torch::kLong)}}, {3});
  store.index_put_({idx}, rows);
  EXPECT_EQ(node->bytes_read, 0);
  EXPECT_EQ(node->bytes_written, 3 * kRowBytes);
  EXPECT_EQ(node->raw("step").sum().item<int64_t>(), N * (N - 1) / 2 - 6);
}

TEST_F(StorageReads, IndexPutWithMaskWritesOnlySelectedRows) {
  auto mask = torch::zeros({N}, torch::kBool);
  mask.index_put_({Slice(100, 105)}, true);
  store.index_put_({mask}, td::TensorDict({{"step", torch::full({5}, 7, torch::kLong)}}, {5}));
  EXPECT_EQ(node->bytes_read, 0);
  EXPECT_EQ(node->bytes_written, 5 * 8);
  EXPECT_EQ(node->raw("step")[102].item<int64_t>(), 7);
}

TEST_F(StorageReads, SetAtWritesOnlyTheSlice) {
  store.set_at_("step", torch::tensor(0), {Slice(0, 10)});
  EXPECT_EQ(node->bytes_read, 0);
  EXPECT_EQ(node->bytes_written, 10 * 8);
  EXPECT_EQ(node->raw("step").index({Slice(0, 10)}).sum().item<int64_t>(), 0);
}

TEST_F(StorageReads, RejectedWriteTouchesNothing) {
  td::TensorDict bad({{"obs", torch::zeros({3})}}, {});  // wrong feature shape
  EXPECT_THROW(store.index_put_({0}, bad), td::ShapeError);
  EXPECT_EQ(node->bytes_written, 0);
  EXPECT_EQ(node->bytes_read, 0);
}

}  // namespace
