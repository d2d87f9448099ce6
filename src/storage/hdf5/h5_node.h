#pragma once
// H5Node: one level (group) of a PersistentTensorDict, on the storage
// interface (node.h). Every level of one file shares its File.
#include "storage/hdf5/h5_file.h"

#include <tensordict/node.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tensordict::detail::h5 {

class H5Node final : public Node {
 public:
  /// `lineage`: the ObjectIds of the groups from the handle's root to this
  /// one, this one included (child() refuses a link back into it).
  H5Node(std::shared_ptr<File> file, std::string path, std::vector<int64_t> batch_size,
         std::optional<at::Device> device, std::vector<ObjectId> lineage);

  const std::shared_ptr<File>& file() const noexcept { return file_; }
  const std::string& path() const noexcept { return path_; }

  std::string type_name() const override { return "PersistentTensorDict"; }
  at::IntArrayRef batch_size() const override { return batch_size_; }
  void set_batch_size(std::vector<int64_t> batch_size) override;
  std::optional<at::Device> device() const override { return device_; }
  void set_device(std::optional<at::Device> device) override { device_ = device; }

  std::vector<std::string> keys() const override;
  std::size_t size() const override;
  std::optional<EntryKind> kind(std::string_view key) const override;
  std::optional<TensorMeta> tensor_meta(std::string_view key) const override;

  std::optional<Value> find(std::string_view key) const override;
  at::Tensor read_at(std::string_view key, const RowSelection& rows) const override;
  void read_leaves(const RowSelection& rows, std::span<LeafRead> leaves) const override;

  void write(std::string_view key, Value value) override;
  void write_(std::string_view key, const at::Tensor& value) override;
  void write_at_(std::string_view key, const RowSelection& rows, const at::Tensor& value) override;
  void write_leaves_(const RowSelection& rows, std::span<const LeafWrite> leaves) override;
  void create_leaf(std::string_view key, at::IntArrayRef shape,
                   const at::TensorOptions& options) override;
  void create_leaves(std::span<const LeafCreate> leaves) override;
  TensorDictBase create_nested(std::string_view key, at::IntArrayRef batch_size,
                               std::optional<at::Device> device) override;
  void remove(std::string_view key) override;
  void flush() override;

  /// The batch size inferred for every group under `path` (from_h5: the
  /// longest common leading shape of its tensors and groups), stored in
  /// file.inferred; nullopt for a group without tensors. FormatError naming
  /// the link for a cycle of links, groups nested past kMaxNestingDepth, or
  /// groups linked from several places that expand past 2^16 entries more
  /// than the file holds.
  static std::optional<std::vector<int64_t>> infer_batch_size(File& file, const std::string& path);
  /// ShapeError naming the file and dataset when a tensor under `path` does
  /// not start with `batch_size`; FormatError as infer_batch_size.
  static void check_batch_size(File& file, const std::string& path, at::IntArrayRef batch_size);

 private:
  /// file_->entry(path_, key) through a per-level cache of the entries seen.
  Entry* entry(std::string_view key) const;
  /// The child level at key (made once, then the same handle).
  std::shared_ptr<H5Node> child(std::string_view key) const;
  /// The tensor dataset at key; KeyError/TypeError/FormatError otherwise.
  Dataset& tensor_dataset(std::string_view key) const;
  void write_value(std::string_view key, const Value& value);

  std::shared_ptr<File> file_;
  std::string path_;
  std::vector<int64_t> batch_size_;
  std::optional<at::Device> device_;
  std::vector<ObjectId> lineage_;
  /// lineage_ and the group at `path` (a new child's lineage).
  std::vector<ObjectId> lineage_with(const std::string& path) const;
  mutable std::map<std::string, std::shared_ptr<H5Node>, std::less<>> children_;
  mutable std::map<std::string, Entry*, std::less<>> entries_;
  mutable uint64_t entries_generation_ = 0;
};

}  // namespace tensordict::detail::h5
