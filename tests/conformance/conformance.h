// The cross-class conformance suite: every cell of the compatibility matrix
// (wrapper x storage x operation) of docs/compatibility.md is one test.
//
//   wrappers   TensorClass (MyTC) and TypedTensorDict (MyTTD), fields a, b
//   storages   one StorageCase each (storages.cpp): a factory that puts given
//              data into that storage, plus what the suite must expect of it
//   operations Build, Read, Write, Index, Clone, Stack, Iter, Update
//              (cells.cpp: one template per operation, run for both wrappers)
//
// A test is `<Storage>/Conformance.<Wrapper>_<Operation>/<storage id>`, for
// example `Memmap/Conformance.TensorClass_Write/memmap`.
//
// Adding a storage (HDF5, Redis, ...) adds one row to both matrices:
//   1. write a function returning a StorageCase (see the fields below; most
//      storages only need id, label, rank and make), in a new source file
//      of tests/conformance/ (storage_h5.cpp) or in storages.cpp;
//   2. in that file: INSTANTIATE_TEST_SUITE_P(H5, Conformance,
//        ::testing::Values(h5_storage()), conformance::storage_name);
//   3. list the file in tensordict_conformance's sources in
//      tests/CMakeLists.txt (inside `if(TARGET tensordict::hdf5)` and link
//      the component);
//   4. regenerate the tables of docs/compatibility.md:
//        build/tests/tensordict_conformance --update-doc=docs/compatibility.md
//      and write the notes for any cell that is not "yes".
// The CTest test conformance.docs_matrix fails when the page and the suite
// disagree.
//
// The behaviour suite (behaviour.cpp: index forms, index_put_, update_, set_,
// locking and error texts against the in-memory TensorDict) runs over every
// case of all_storages() (storages.cpp): a new storage joins it with one line
// there, and declares any behaviour of its own in the StorageCase fields
// below (non_tensors, non_tensor_row_writes, ragged_writes).
#pragma once
#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

#include <tensordict/tensor_class.h>
#include <tensordict/typed_tensor_dict.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace conformance {

namespace td = tensordict;
using td_test::Shape;

/// The classes under test, with the fields of Python's cross-class page
/// (a: [N, 3] float, b: [N, 5] here int64, so dtypes are checked too).
struct MyTC : td::TensorClass<MyTC> {
  TENSORDICT_FIELDS(a, b);
};
struct MyTTD : td::TypedTensorDict<MyTTD> {
  TENSORDICT_FIELDS(a, b);
};

/// Batch size of every storage the cells build.
inline constexpr int64_t kN = 4;

/// The reference data, a fresh in-memory TensorDict of batch [kN]:
/// a = arange(12).view(4, 3) + offset (float), b = arange(20).view(4, 5) + 100 + offset (int64).
td::TensorDict sample(int64_t offset = 0);

/// Per-test scratch space for storages: temporary directories (removed at
/// the end of the test) and shared-memory names (unlinked then).
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  /// A new path (not created) under this test's temporary directory.
  std::string new_path(const std::string& stem);
  /// Unlinks this shared-memory name at the end of the test.
  void unlink_at_exit(std::string shared_name);

 private:
  std::unique_ptr<td_test::TempDir> dir_;
  std::vector<std::string> shared_;
  int counter_ = 0;
};

/// One storage: a row of both matrices.
struct StorageCase {
  /// Test-name suffix (letters, digits, underscores): "memmap".
  std::string id;
  /// Row label in the matrices (Markdown): "`TensorDict` (memmap)".
  std::string label;
  /// Position of the row in the matrices (ascending).
  int rank = 0;
  /// A new storage of this kind holding a copy of `data`'s entries. `data` is
  /// an in-memory TensorDict of batch [kN] with any subset of the fields
  /// (possibly none: Build wraps an empty storage with check=false).
  std::function<td::TensorDictBase(const td::TensorDictBase& data, Scratch&)> make;
  /// A second handle on the same storage opened independently of `made`
  /// (load_memmap of its directory, attach_shared of its name), through which
  /// the cells check that writes reached the storage itself. Default: `made`.
  std::function<td::TensorDictBase(const td::TensorDictBase& made)> reopen = nullptr;
  /// Locked once built (memmap, shared memory): replacing or adding entries
  /// (set_x, update, index_put_ of a new key) is a LockedError that leaves the
  /// data intact; set_x_ and update_ write in place.
  bool writes_in_place_only = false;
  /// What is_memmap() / is_shared() report on the storage.
  bool memmap = false;
  bool shared = false;
  /// Integer and slice indices give live views of the rows (writes through
  /// them reach the storage). False for storages whose index reads rows out.
  bool index_is_live = true;
  /// Optional: the same storage holding rows of different shapes (a lazy
  /// stack of heterogeneous members): row i has a of shape [i + 1], b of [5].
  std::function<td::TensorDictBase(Scratch&)> make_ragged = nullptr;
  /// With make_ragged: index_put_ across members of different shapes (of a
  /// lazy-stack value, or of a scalar) writes each member its part. False: a
  /// ShapeError naming the leaf that changes nothing (the storage writes the
  /// value's leaves stacked).
  bool ragged_writes = true;
  /// The storage keeps non-tensor entries (NonTensorData) beside tensors.
  /// False: `make` of data holding one is a TypeError.
  bool non_tensors = true;
  /// Writing a different non-tensor value into some rows turns the entry into
  /// a NonTensorStack (Python). False (files of a fixed layout): a
  /// LockedError naming the key, nothing changed.
  bool non_tensor_row_writes = true;

  td::TensorDictBase reopened(const td::TensorDictBase& made) const {
    return reopen ? reopen(made) : made;
  }
};

/// gtest prints the parameter as its row label.
inline void PrintTo(const StorageCase& s, std::ostream* os) { *os << s.label; }

/// The storages of the core library (storages.cpp), shared by the
/// conformance and storage contract suites.
StorageCase in_memory();
StorageCase lazy_stacked();
StorageCase memmap();
StorageCase shared_memory();
StorageCase typed_tensor_dict();
/// storage_h5.cpp, when the HDF5 component is built.
StorageCase h5();
/// storage_redis.cpp, when the Redis component is built: a store on one
/// server, a sharded store (blocks of 2 rows) on one server, a store on a
/// 3-master Redis Cluster (started once per test process that uses it), and
/// a sharded store over that cluster's masters.
StorageCase redis_store();
StorageCase redis_sharded();
StorageCase redis_cluster();
StorageCase redis_cluster_sharded();
/// A LazyStackedTensorDictStore (one store per member) on the one server.
StorageCase redis_lazy_stack();

/// Every storage this build has, in rank order: the parameter list of the
/// behaviour suite (a new storage adds its case here).
std::vector<StorageCase> all_storages();

/// The name generator of INSTANTIATE_TEST_SUITE_P: the storage id.
inline std::string storage_name(const ::testing::TestParamInfo<StorageCase>& info) {
  return info.param.id;
}

/// The suite: one instantiation per storage. SetUp records the storage's label
/// and rank as test properties, which the matrix recorder (main.cpp) reads.
class Conformance : public ::testing::TestWithParam<StorageCase> {
 protected:
  void SetUp() override;
  Scratch scratch_;
};

/// Test property a cell sets when it passes with something other than
/// "yes" (for example "`set_()`": only the in-place form works).
inline constexpr const char* kCellProperty = "cell";
inline constexpr const char* kStorageProperty = "storage";
inline constexpr const char* kRankProperty = "storage_rank";

}  // namespace conformance
