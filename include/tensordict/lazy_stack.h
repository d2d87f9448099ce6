#pragma once
/// @file lazy_stack.h
/// LazyStackedTensorDict: a stack of tensordicts that is never copied
/// (Python's tensordict.LazyStackedTensorDict).
///
/// The members stay live: `stack[i]` (an int along the stack dim) is the i-th
/// member itself, and every write (set, set_, index_put_, update_) goes
/// through to the members. Members may be heterogeneous:
///   - keys are the sorted intersection of the members' keys (an "exclusive"
///     key present in some members only is reached through `stack[i]`);
///   - batch dims other than the stack dim may differ (printed as -1);
///   - leaves with the same key may have different shapes (a "ragged" leaf):
///     get() refuses them naming the key and the shapes, get_as_list() and
///     get_padded() read them.

#include <tensordict/node.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <string>
#include <string_view>
#include <vector>

namespace tensordict {

namespace detail {

/// Storage of a LazyStackedTensorDict: the member handles and the stack dim.
class LazyStackNode final : public Node {
 public:
  /// `stack_dim` is already normalized to [0, member batch dims].
  /// `member_batch` is the members' batch size, used when there are none.
  LazyStackNode(std::vector<TensorDictBase> members, int64_t stack_dim,
                std::vector<int64_t> member_batch);

  const std::vector<TensorDictBase>& members() const noexcept { return members_; }
  int64_t stack_dim() const noexcept { return stack_dim_; }
  /// Batch dims of one member.
  std::size_t member_dims() const noexcept { return member_batch_.size(); }
  /// The members' batch size; -1 where members differ.
  const std::vector<int64_t>& member_batch() const noexcept { return member_batch_; }

  /// Adds `td` at position `pos` (checked by the caller).
  void insert_member(std::size_t pos, TensorDictBase td);

  std::string type_name() const override { return "LazyStackedTensorDict"; }
  at::IntArrayRef batch_size() const override { return batch_; }
  void set_batch_size(std::vector<int64_t>) override;
  std::optional<at::Device> device() const override;
  void set_device(std::optional<at::Device> device) override;
  std::vector<std::string> keys() const override;
  std::size_t size() const override { return keys().size(); }
  std::optional<EntryKind> kind(std::string_view key) const override;
  std::optional<TensorMeta> tensor_meta(std::string_view key) const override;
  std::optional<Value> find(std::string_view key) const override;
  void write(std::string_view key, Value value) override;
  void write_(std::string_view key, const at::Tensor& value) override;
  void write_at_(std::string_view key, const RowSelection& rows, const at::Tensor& value) override;
  void create_leaf(std::string_view key, at::IntArrayRef shape,
                   const at::TensorOptions& options) override;
  TensorDictBase create_nested(std::string_view key, at::IntArrayRef batch_size,
                               std::optional<at::Device> device) override;
  void remove(std::string_view key) override;
  void flush() override;
  /// A memory-mapped lazy stack records its directory and status too.
  const FileBacking* file_backing() const noexcept override { return &file_backing_; }
  FileBacking* file_backing() noexcept override { return &file_backing_; }

  /// The member leaves at key (KeyError naming the member that lacks it).
  std::vector<at::Tensor> member_leaves(std::string_view key) const;

 private:
  void refresh_batch();
  /// The member leaves stacked; ShapeError naming the key when ragged.
  at::Tensor stack_leaves(std::string_view key, const std::vector<at::Tensor>& leaves) const;

  std::vector<TensorDictBase> members_;
  int64_t stack_dim_;
  std::vector<int64_t> member_batch_;
  std::vector<int64_t> batch_;
  FileBacking file_backing_;
};

/// The lazy-stack storage behind `td`, or nullptr.
inline const LazyStackNode* as_lazy_stack(const TensorDictBase& td) noexcept {
  return td.defined() && td.node().is_lazy_stack() ? static_cast<const LazyStackNode*>(&td.node())
                                                   : nullptr;
}

}  // namespace detail

/// Where get_padded() puts the padding.
enum class PaddingSide { Right, Left };

/// A lazy stack of tensordicts along `stack_dim` (see the file comment).
///
/// @code
///   namespace td = tensordict;
///   // Two agents with observations of different sizes.
///   td::TensorDict a({{"obs", torch::zeros({5, 3})}, {"reward", torch::zeros({5})}}, {5});
///   td::TensorDict b({{"obs", torch::zeros({5, 7})}, {"reward", torch::ones({5})}}, {5});
///   auto agents = td::lazy_stack({a, b});        // batch [2, 5]
///   at::Tensor r = agents.get("reward");         // [2, 5], stacked
///   auto obs = agents.get_as_list("obs");        // {[5, 3], [5, 7]}
///   agents[1].set("reward", torch::full({5}, 2.));  // member 1 is b itself
/// @endcode
class LazyStackedTensorDict : public TensorDictBase {
 public:
  /// Stacks `tds` along `stack_dim` (in [-B-1, B] for members of B batch dims).
  /// Members must share their number of batch dims and their device; with
  /// `strict_shape`, also their batch size (ShapeError otherwise).
  LazyStackedTensorDict(std::vector<TensorDictBase> tds, int64_t stack_dim = 0,
                        bool strict_shape = false);
  /// Wraps an existing lazy-stack storage (see TensorDictBase::as).
  explicit LazyStackedTensorDict(std::shared_ptr<Node> node);

  static bool is_node(const Node& node) noexcept { return node.is_lazy_stack(); }
  static const char* static_type_name() noexcept { return "LazyStackedTensorDict"; }

  /// The members, live (Python's `.tensordicts`).
  const std::vector<TensorDictBase>& tensordicts() const;
  int64_t stack_dim() const;
  std::size_t num_members() const { return tensordicts().size(); }
  /// A handle to member i (live, whatever the stack dim). IndexError when out
  /// of range.
  TensorDictBase member(std::size_t i) const;

  /// Adds a member (same batch size and device as the others). LockedError
  /// when the stack is locked. insert() follows Python's list.insert: a
  /// negative position counts from the end, out-of-range positions clamp.
  LazyStackedTensorDict& append(const TensorDictBase& td);
  LazyStackedTensorDict& insert(int64_t index, const TensorDictBase& td);
  LazyStackedTensorDict& extend(const std::vector<TensorDictBase>& tds);

  /// The member tensors at key, one per member, without stacking (ragged
  /// leaves allowed). Works through nested keys and nested lazy stacks.
  std::vector<at::Tensor> get_as_list(const NestedKey& key) const;
  /// The member tensors at key padded with `padding_value` to the largest
  /// shape, then stacked along the stack dim.
  at::Tensor get_padded(const NestedKey& key, double padding_value = 0.0,
                        PaddingSide side = PaddingSide::Right) const;
};

/// A lazy stack of `tds` along `dim` (never copies). See LazyStackedTensorDict.
LazyStackedTensorDict lazy_stack(std::vector<TensorDictBase> tds, int64_t dim = 0,
                                 bool strict_shape = false);

/// A dense stack when the members allow it (same keys and leaf shapes),
/// a lazy stack otherwise.
TensorDictBase maybe_dense_stack(const std::vector<TensorDictBase>& tds, int64_t dim = 0);

}  // namespace tensordict
