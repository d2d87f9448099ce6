// The HDF5 storage (PersistentTensorDict, tensordict::hdf5) as a row of the
// conformance and storage contract suites: the data written to a new file
// with to_h5; `reopen` opens the same file again through a second handle.
#include "conformance.h"

#include <tensordict/storage/hdf5.h>

namespace conformance {

StorageCase h5() {
  return {.id = "h5",
          .label = "`PersistentTensorDict` (HDF5)",
          .rank = 80,
          .make =
              [](const td::TensorDictBase& data, Scratch& scratch) -> td::TensorDictBase {
                return td::to_h5(data, scratch.new_path("data") + ".h5");
              },
          .index_is_live = false};
}

INSTANTIATE_TEST_SUITE_P(H5, Conformance, ::testing::Values(h5()), storage_name);
INSTANTIATE_TEST_SUITE_P(H5, StorageContract, ::testing::Values(h5()), storage_name);

}  // namespace conformance
