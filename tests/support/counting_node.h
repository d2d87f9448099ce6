// CountingNode: a storage wrapper that counts what the core asks of a storage.
//
// It wraps the node of any tensordict (in memory, memmap, shared memory, lazy
// stack, or a storage added later) and presents it to the core as a storage
// that keeps its data outside the process: holds_values() is false, so the
// core must come through metadata (kind, tensor_meta), batched reads and
// writes (read_leaves, write_leaves_, create_leaves) and whole-leaf reads
// (find). Every call and every byte is counted, which is how the storage
// contract suite (tests/unit/test_storage_contract.cpp) pins "one call per
// operation" and "metadata only".
#pragma once
#include "pch.h"

#include <map>
#include <memory>
#include <string>

namespace td_test {

namespace td = tensordict;

/// What the core asked of a wrapped storage (all levels share one Counters).
struct StorageCounters {
  int64_t read_leaves_calls = 0;    // batched reads (one per operation)
  int64_t write_leaves_calls = 0;   // batched writes (one per operation)
  int64_t create_leaves_calls = 0;  // batched pre-allocations
  int64_t per_leaf_calls = 0;       // read_at / write_at_ / write_ / create_leaf from the core
  int64_t leaves_read = 0;
  int64_t leaves_written = 0;
  int64_t whole_leaf_reads = 0;  // find() of a tensor: the whole leaf
  int64_t bytes_read = 0;        // through read_leaves and find
  int64_t bytes_written = 0;
  int64_t metadata_calls = 0;  // keys / kind / tensor_meta
  /// The selection of the last batched call, as the storage received it.
  struct Selection {
    td::RowSelection::Kind kind = td::RowSelection::Kind::All;
    std::vector<td::RowRange> ranges;
    at::Tensor rows;
    bool rows_sorted = false, rows_unique = false;
    std::vector<int64_t> batch;
  } last;
  void record(const td::RowSelection& s) {
    last.kind = s.kind();
    last.ranges.assign(s.ranges().begin(), s.ranges().end());
    last.rows = s.rows().defined() ? s.rows().clone() : at::Tensor();
    last.rows_sorted = s.rows_sorted();
    last.rows_unique = s.rows_unique();
    last.batch = s.batch().vec();
  }
  /// When set, the next batched write throws this storage error (once).
  std::function<void()> fail_next_write;

  void reset() {
    auto keep = std::move(fail_next_write);
    *this = StorageCounters{};
    fail_next_write = std::move(keep);
  }
  int64_t data_calls() const {
    return read_leaves_calls + write_leaves_calls + per_leaf_calls + whole_leaf_reads;
  }
};

class CountingNode final : public td::Node {
 public:
  CountingNode(std::shared_ptr<td::Node> inner, std::shared_ptr<StorageCounters> counters)
      : inner_(std::move(inner)), c_(std::move(counters)) {}

  /// `td` seen through a counting wrapper sharing `counters`.
  static td::TensorDictBase wrap(const td::TensorDictBase& td,
                                 std::shared_ptr<StorageCounters> counters) {
    return td::TensorDictBase(std::make_shared<CountingNode>(td.node_ptr(), std::move(counters)));
  }

  const td::Node& inner() const { return *inner_; }

  std::string type_name() const override { return "CountingTensorDict"; }
  at::IntArrayRef batch_size() const override { return inner_->batch_size(); }
  void set_batch_size(std::vector<int64_t> b) override { inner_->set_batch_size(std::move(b)); }
  std::optional<at::Device> device() const override { return inner_->device(); }
  void set_device(std::optional<at::Device> d) override { inner_->set_device(d); }

  std::vector<std::string> keys() const override {
    ++c_->metadata_calls;
    return inner_->keys();
  }
  std::size_t size() const override { return inner_->size(); }
  std::optional<td::EntryKind> kind(std::string_view key) const override {
    ++c_->metadata_calls;
    return inner_->kind(key);
  }
  std::optional<td::TensorMeta> tensor_meta(std::string_view key) const override {
    ++c_->metadata_calls;
    return inner_->tensor_meta(key);
  }

  std::optional<td::Value> find(std::string_view key) const override {
    auto v = inner_->find(key);
    if (!v) return v;
    if (v->is_tensor()) {
      ++c_->whole_leaf_reads;
      c_->bytes_read += v->tensor().nbytes();
      return td::Value(v->tensor().clone());  // as a file or a server would
    }
    if (v->is_tensordict()) return td::Value(child(key, v->tensordict()));
    return v;
  }

  at::Tensor read_at(std::string_view key, const td::RowSelection& rows) const override {
    ++c_->per_leaf_calls;
    return read_one(key, rows);
  }
  void read_leaves(const td::RowSelection& rows, std::span<td::LeafRead> leaves) const override {
    ++c_->read_leaves_calls;
    c_->record(rows);
    for (auto& l : leaves) {
      auto* owner = dynamic_cast<const CountingNode*>(l.node);
      if (!owner) throw td::StorageError("read_leaves: a leaf of another storage");
      l.out = owner->read_one(l.key(), rows);
    }
  }

  void write(std::string_view key, td::Value value) override {
    if (value.is_tensor()) c_->bytes_written += value.tensor().nbytes();
    children_.erase(std::string(key));
    inner_->write(key, std::move(value));
  }
  void write_(std::string_view key, const at::Tensor& value) override {
    ++c_->per_leaf_calls;
    write_one(key, td::RowSelection::all(batch_size()), value);
  }
  void write_at_(std::string_view key, const td::RowSelection& rows,
                 const at::Tensor& value) override {
    ++c_->per_leaf_calls;
    write_one(key, rows, value);
  }
  void write_leaves_(const td::RowSelection& rows, std::span<const td::LeafWrite> leaves) override {
    ++c_->write_leaves_calls;
    c_->record(rows);
    if (c_->fail_next_write) {
      auto fail = std::move(c_->fail_next_write);
      c_->fail_next_write = nullptr;
      fail();
    }
    for (const auto& l : leaves) {
      auto* owner = dynamic_cast<CountingNode*>(l.node);
      if (!owner) throw td::StorageError("write_leaves_: a leaf of another storage");
      owner->write_one(l.key(), rows, l.value);
    }
  }
  void create_leaf(std::string_view key, at::IntArrayRef shape,
                   const at::TensorOptions& options) override {
    ++c_->per_leaf_calls;
    inner_->create_leaf(key, shape, options);
  }
  void create_leaves(std::span<const td::LeafCreate> leaves) override {
    ++c_->create_leaves_calls;
    for (const auto& l : leaves) {
      auto* owner = dynamic_cast<CountingNode*>(l.node);
      if (!owner) throw td::StorageError("create_leaves: a leaf of another storage");
      owner->inner_->create_leaf(l.key(), l.shape, l.options);
    }
  }
  td::TensorDictBase create_nested(std::string_view key, at::IntArrayRef batch_size,
                                   std::optional<at::Device> device) override {
    return child(key, inner_->create_nested(key, batch_size, device));
  }
  void remove(std::string_view key) override {
    children_.erase(std::string(key));
    inner_->remove(key);
  }

 private:
  // Nested levels are wrapped once, so that a level keeps its identity.
  td::TensorDictBase child(std::string_view key, const td::TensorDictBase& inner) const {
    auto& slot = children_[std::string(key)];
    if (!slot || &slot->inner() != &inner.node())
      slot = std::make_shared<CountingNode>(inner.node_ptr(), c_);
    return td::TensorDictBase(slot);
  }

  at::Tensor read_one(std::string_view key, const td::RowSelection& rows) const {
    at::Tensor out = inner_->holds_values() ? rows.apply(inner_->peek(key)->tensor()).clone()
                                            : inner_->read_at(key, rows);
    ++c_->leaves_read;
    c_->bytes_read += out.nbytes();
    return out;
  }
  void write_one(std::string_view key, const td::RowSelection& rows, const at::Tensor& value) {
    ++c_->leaves_written;
    c_->bytes_written += value.numel() * value.element_size();
    if (!inner_->holds_values()) {
      if (rows.is_all())
        inner_->write_(key, value);
      else
        inner_->write_at_(key, rows, value);
      return;
    }
    at::Tensor leaf = inner_->peek(key)->tensor();
    rows.put(leaf, value);
  }

  std::shared_ptr<td::Node> inner_;
  std::shared_ptr<StorageCounters> c_;
  mutable std::map<std::string, std::shared_ptr<CountingNode>> children_;
};

}  // namespace td_test
