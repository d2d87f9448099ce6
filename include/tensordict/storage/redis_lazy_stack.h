#pragma once
/// @file storage/redis_lazy_stack.h
/// LazyStackedTensorDictStore: a lazy stack of N tensordicts (elements of
/// different shapes allowed) on a Redis-compatible server in O(#keys) server
/// keys, Python's layout (docs/formats.md, "Redis lazy-stack stores"): one string per leaf holding
/// the N elements' bytes one after another, plus an offset table for leaves whose elements differ
/// in shape. Link the component `tensordict::redis`.
///
/// @code
///   namespace td = tensordict;
///   auto agents = td::lazy_stack({a, b, c});           // obs [4, 3], [4, 5], [4, 7]
///   auto store = td::redis::from_lazy_stack(agents, {.host = "10.0.0.5"});
///   td::TensorDict second = td::redis::element(store, 1);   // one round trip
///   auto some = td::redis::elements(store, {0, 2});          // one round trip
///   td::redis::set_element(store, 1, second);                 // one round trip
///   td::LazyStackedTensorDict back = td::redis::to_lazy_stack(store);
///   // another process: td::redis::from_store({.td_id = td::redis::td_id(store)})
/// @endcode
///
/// The store is also a TensorDictBase (batch size: the elements' batch size
/// with N inserted at the stack dim): keys(), get() (stacked), index() and
/// index_put_ (rows of every leaf in one round trip), to_tensordict(). Leaves
/// whose elements differ in shape ("heterogeneous") are read per element
/// (element(), elements(), to_lazy_stack(), or index() of one element); a
/// stacked read of them is a ShapeError naming the key. td::redis::td_id,
/// server_key, clear, round_trips and close work on it as on a plain store.
/// See docs/redis.md.

#include <tensordict/lazy_stack.h>
#include <tensordict/storage/redis.h>
#include <tensordict/tensor_dict.h>

#include <cstdint>
#include <vector>

namespace tensordict {

/// A lazy stack of N tensordicts on a Redis server (Python's
/// LazyStackedTensorDictStore): the handle type of a lazy-stack store, a
/// TensorDictStore (td_id, close, round_trips, ... as members) with the
/// element operations as members too.
class LazyStackedTensorDictStore : public TensorDictStore {
 public:
  /// Uploads `stack` into a new lazy-stack store (Python's
  /// LazyStackedTensorDictStore.from_lazy_stack), in one pipeline. Every
  /// element must hold the same keys (KeyError naming the key otherwise), only
  /// tensors (TypeError naming a non-tensor), each key of one dtype in every
  /// element (TypeError), and the elements one batch size (ShapeError).
  static LazyStackedTensorDictStore from_lazy_stack(const LazyStackedTensorDict& stack,
                                                    const storage::Redis& storage = {});
  /// Re-attaches to the lazy-stack store `storage.td_id` (written by C++ or
  /// Python). KeyError naming the td_id when the server has no lazy-stack
  /// store there.
  static LazyStackedTensorDictStore from_store(const storage::Redis& storage);

  /// Wraps an existing lazy-stack store (see TensorDictBase::as).
  explicit LazyStackedTensorDictStore(std::shared_ptr<Node> node);
  static bool is_node(const Node& node) noexcept;
  static const char* static_type_name() noexcept { return "LazyStackedTensorDictStore"; }

  /// Number of elements N (__count__).
  int64_t count() const;
  /// The dim the elements are stacked along (__stack_dim__).
  int64_t stack_dim() const;
  /// The batch size of one element (__inner_batch_size__).
  std::vector<int64_t> inner_batch_size() const;
  /// The shape of every element's leaf at `key`, without reading data.
  std::vector<std::vector<int64_t>> element_shapes(const NestedKey& key) const;
  /// Element i (negative counts from the end) in memory, one round trip.
  /// IndexError when out of range.
  TensorDict element(int64_t i) const;
  /// The elements at `indices`, in that order, in one round trip.
  std::vector<TensorDict> elements(const std::vector<int64_t>& indices) const;
  /// Writes every leaf of element i in one round trip (see redis::set_element).
  void set_element(int64_t i, const TensorDictBase& value) const;
  /// Every element read into memory (one round trip), as an in-memory lazy
  /// stack along the store's stack dim.
  LazyStackedTensorDict to_lazy_stack() const;
};

}  // namespace tensordict

namespace tensordict::redis {

// The free functions below are the first spelling of
// LazyStackedTensorDictStore's members and statics; they stay, forwarding.

/// LazyStackedTensorDictStore::from_lazy_stack.
LazyStackedTensorDictStore from_lazy_stack(const LazyStackedTensorDict& stack,
                                           const storage::Redis& storage = {});
/// LazyStackedTensorDictStore::from_store. from_store() does the same when the
/// store is a lazy stack.
LazyStackedTensorDictStore from_lazy_stack_store(const storage::Redis& storage);

/// True when `td` is (a nested level of) a lazy-stack store.
bool is_lazy_stack_store(const TensorDictBase& td);
/// Number of elements N (__count__).
int64_t count(const TensorDictBase& store);
/// The dim the elements are stacked along (__stack_dim__).
int64_t stack_dim(const TensorDictBase& store);
/// The batch size of one element (__inner_batch_size__).
std::vector<int64_t> inner_batch_size(const TensorDictBase& store);
/// The shape of every element's leaf at `key`, without reading data.
std::vector<std::vector<int64_t>> element_shapes(const TensorDictBase& store, const NestedKey& key);

/// Element i (negative counts from the end) in memory, one round trip.
/// IndexError when out of range.
TensorDict element(const TensorDictBase& store, int64_t i);
/// The elements at `indices`, in that order, in one round trip.
std::vector<TensorDict> elements(const TensorDictBase& store, const std::vector<int64_t>& indices);
/// Writes every leaf of element i in one round trip. `value` must hold every
/// key of the store, each with the element's shape (ShapeError naming the
/// key otherwise: an element's size cannot change); keys the store does not
/// have yet are added (zero in the other elements). Nothing is written when a
/// check fails.
void set_element(const TensorDictBase& store, int64_t i, const TensorDictBase& value);
/// Every element read into memory (one round trip), as an in-memory lazy
/// stack along the store's stack dim.
LazyStackedTensorDict to_lazy_stack(const TensorDictBase& store);

}  // namespace tensordict::redis
