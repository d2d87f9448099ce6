// The storages of the core library, one StorageCase and one instantiation of
// the Conformance suite each (see conformance.h for adding one).
#include "conformance.h"

#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>

namespace conformance {
namespace {

/// The TypedTensorDict used as a storage (Python's `MyTTD(a=..., b=...)`).
struct Backing : td::TypedTensorDict<Backing> {
  TENSORDICT_FIELDS(a, b);
};

}  // namespace

StorageCase in_memory() {
  return {.id = "tensordict",
          .label = "`TensorDict`",
          .rank = 10,
          .make = [](const td::TensorDictBase& data, Scratch&) { return data.clone(); }};
}

/// Python's `lazy_stack([TensorDict(a=..., b=...) for _ in range(N)])`:
/// members of batch [] stacked along dim 0.
StorageCase lazy_stacked() {
  return {.id = "lazy_stacked",
          .label = "`LazyStackedTensorDict`",
          .rank = 40,
          .make = [](const td::TensorDictBase& data, Scratch&) -> td::TensorDictBase {
            std::vector<td::TensorDictBase> members;
            for (const auto& row : data.unbind(0)) members.push_back(row.clone());
            return td::lazy_stack(members);
          },
          .make_ragged = [](Scratch&) -> td::TensorDictBase {
            std::vector<td::TensorDictBase> members;
            for (int64_t i = 0; i < kN; ++i)
              members.push_back(td::TensorDict({{"a", torch::full({i + 1}, static_cast<double>(i))},
                                                {"b", torch::full({5}, i, torch::kLong)}},
                                               {}));
            return td::lazy_stack(members);
          }};
}

/// Python's `td.memmap_(prefix)`: a locked TensorDict over files.
StorageCase memmap() {
  return {
      .id = "memmap",
      .label = "`TensorDict` (memmap)",
      .rank = 50,
      .make =
          [](const td::TensorDictBase& data, Scratch& scratch) {
            td::TensorDictBase t = data.clone();
            t.memmap_(scratch.new_path("memmap"));
            return t;
          },
      .reopen =
          [](const td::TensorDictBase& made) { return td::load_memmap(made.saved_path().value()); },
      .writes_in_place_only = true,
      .memmap = true,
      .non_tensor_row_writes = false};
}

/// `share_memory_()`: a locked TensorDict over files in /dev/shm; the cells
/// see it through a second process-style handle, attach_shared(name).
StorageCase shared_memory() {
  return {.id = "shared",
          .label = "`TensorDict` (shared memory)",
          .rank = 60,
          .make =
              [](const td::TensorDictBase& data, Scratch& scratch) {
                td::TensorDictBase t = data.clone();
                t.share_memory_();
                scratch.unlink_at_exit(t.shared_name());
                return t;
              },
          .reopen =
              [](const td::TensorDictBase& made) { return td::attach_shared(made.shared_name()); },
          .writes_in_place_only = true,
          .shared = true,
          .non_tensor_row_writes = false};
}

/// Another typed wrapper as the storage. Built like Python's
/// `MyTTD(a=..., b=..., batch_size=[N])` when the data has both fields; the
/// partial and empty data of the Build cell are wrapped with check=false
/// (the pre-allocation pattern), as the constructor requires every field.
StorageCase typed_tensor_dict() {
  return {.id = "typed",
          .label = "`TypedTensorDict`",
          .rank = 70,
          .make = [](const td::TensorDictBase& data, Scratch&) -> td::TensorDictBase {
            if (data.contains("a") && data.contains("b"))
              return Backing({{"a", data.get("a").clone()}, {"b", data.get("b").clone()}},
                             data.batch_size());
            return Backing::from_tensordict(data.clone(), /*check=*/false);
          }};
}

std::vector<StorageCase> all_storages() {
  std::vector<StorageCase> all{in_memory(), lazy_stacked(), memmap(), shared_memory(),
                               typed_tensor_dict()};
#ifdef TD_CONFORMANCE_HDF5
  all.push_back(h5());
#endif
#ifdef TENSORDICT_TEST_REDIS
  all.push_back(redis_store());
  all.push_back(redis_sharded());
  all.push_back(redis_cluster());
  all.push_back(redis_cluster_sharded());
  all.push_back(redis_lazy_stack());
#endif
  return all;
}

INSTANTIATE_TEST_SUITE_P(InMemory, Conformance, ::testing::Values(in_memory()), storage_name);
INSTANTIATE_TEST_SUITE_P(LazyStacked, Conformance, ::testing::Values(lazy_stacked()), storage_name);
INSTANTIATE_TEST_SUITE_P(Memmap, Conformance, ::testing::Values(memmap()), storage_name);
INSTANTIATE_TEST_SUITE_P(SharedMemory, Conformance, ::testing::Values(shared_memory()),
                         storage_name);
INSTANTIATE_TEST_SUITE_P(Typed, Conformance, ::testing::Values(typed_tensor_dict()), storage_name);

}  // namespace conformance
