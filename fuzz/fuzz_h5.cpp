// The HDF5 storage (PersistentTensorDict) on hostile files, structure-aware.
//
// Why not mutate HDF5 bytes: libhdf5 1.10 itself has many known crashes on
// corrupt files (CVEs in its own decoders) that the library cannot fix or
// catch, and random bytes rarely get past the superblock. Instead the input
// is a small program of HDF5 C API calls (src/storage/hdf5/h5_fuzz_program.h,
// compiled into this target only): groups nested and linked into cycles,
// soft and external links, datasets of every element type (numbers of both
// byte orders, enums, compounds, strings, opaque NUMPY values, arrays,
// sequences) over zero, huge or NULL dataspaces, chunked, compressed,
// compact or external storage, with the attributes the storage reads. The
// program writes a valid file to the scratch directory (HDF5's core driver
// would need a second open path in the library), then the library opens it
// and reads everything: keys, every entry, to_tensordict, a row, and writes
// a row back in mode "r+". An input passes when everything works or throws
// a tensordict::Error.
#include "fuzz_common.h"

#include "storage/hdf5/h5_fuzz_program.h"

#include <tensordict/storage/hdf5.h>

#include <sys/stat.h>

#include <vector>

void td_fuzz_write_seeds(const char* dir) {
  // Byte programs: flags, then (operation, arguments...). See the
  // interpreter for the encoding; these make a group with a dataset, a
  // cycle, a NULL dataspace, a string stack and an external link.
  const std::vector<std::vector<std::uint8_t>> seeds = {
      {0, 0, 0, 0, 5, 9, 3, 0, 64, 0, 3},
      {1, 0, 0, 0, 5, 9, 3, 1, 0, 0, 2, 1, 0, 5},
      {0, 5, 9, 0, 0, 0, 5, 15, 1, 4, 3, 64, 0, 7, 0, 1, 2, 2, 1, 2},
      {0, 0, 0, 0, 4, 0, 1, 2, 5, 3, 1, 0, 3, 1, 1},
      {0, 5, 20, 0, 0, 1, 0, 3, 8, 0, 2, 6, 11, 5, 0, 64, 0, 0, 3, 1},
  };
  int n = 0;
  for (const auto& s : seeds)
    td_fuzz::write_file(td_fuzz::fs::path(dir) / ("seed" + std::to_string(n++) + ".bin"), s.data(),
                        s.size());
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return td_fuzz::initialize(); }

namespace {

namespace td = tensordict;

void read_everything(td::PersistentTensorDict& h5) {
  for (const auto& key : h5.keys(/*include_nested=*/true, /*leaves_only=*/false)) {
    try {
      (void)h5.get(key);
    } catch (const td::Error&) {
    }
  }
  try {
    (void)h5.to_tensordict();
  } catch (const td::Error&) {
  }
  try {
    (void)h5.repr();
  } catch (const td::Error&) {
  }
  if (h5.batch_dims() > 0 && h5.batch_size()[0] > 0) {
    try {
      (void)h5[0];
    } catch (const td::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  td_fuzz::reset_scratch();
  const auto path = td_fuzz::scratch() / "f.h5";
  // Where the programs' external links and external storage point.
  ::mkfifo((td_fuzz::scratch() / "fifo").c_str(), 0600);
  if (!tensordict::detail::h5::write_fuzz_program(data, size, path.string())) return 0;
  try {
    auto h5 = td::PersistentTensorDict::from_h5(path.string());
    read_everything(h5);
    h5.close();
  } catch (const td::Error&) {
  }
  try {
    auto rw = td::PersistentTensorDict::from_h5(path.string(), "r+");
    if (rw.batch_dims() > 0 && rw.batch_size()[0] > 0) {
      try {
        rw.index_put_({0}, rw[0].to_tensordict());
      } catch (const td::Error&) {
      }
    }
    rw.close();
  } catch (const td::Error&) {
  }
  return 0;
}
