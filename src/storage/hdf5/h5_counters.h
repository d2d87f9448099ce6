#pragma once
// Counts of the HDF5 data calls the storage makes, for the tests that pin
// "one selection per dataset per operation" (no HDF5 header here, so tests
// include it without HDF5's include directory).
#include <atomic>
#include <cstdint>

namespace tensordict::detail::h5 {

struct CallCounters {
  std::atomic<int64_t> reads{0};       // H5Dread of tensor data
  std::atomic<int64_t> writes{0};      // H5Dwrite of tensor data
  std::atomic<int64_t> selections{0};  // file selections made (one per dataset per operation)
  void reset() noexcept {
    reads = 0;
    writes = 0;
    selections = 0;
  }
};

/// The process-wide counters.
CallCounters& call_counters() noexcept;

}  // namespace tensordict::detail::h5
