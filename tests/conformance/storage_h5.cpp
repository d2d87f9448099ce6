// The HDF5 storage (PersistentTensorDict, tensordict::hdf5) as a row of the
// conformance and storage contract suites: the data written to a new file
// with to_h5.
#include "conformance.h"

#include <tensordict/storage/hdf5.h>

#include <filesystem>

namespace conformance {

StorageCase h5() {
  return {.id = "h5",
          .label = "`PersistentTensorDict` (HDF5)",
          .rank = 80,
          .make = [](const td::TensorDictBase& data, Scratch& scratch) -> td::TensorDictBase {
            std::filesystem::path dir = scratch.new_path("h5");
            std::filesystem::create_directories(dir);
            return td::to_h5(data, (dir / "data.h5").string());
          },
          .index_is_live = false};
}

INSTANTIATE_TEST_SUITE_P(H5, Conformance, ::testing::Values(h5()), storage_name);
// The StorageContract instantiation is in storage_contract.cpp (its fixture
// is local to that file), under TD_CONFORMANCE_HDF5.

}  // namespace conformance
