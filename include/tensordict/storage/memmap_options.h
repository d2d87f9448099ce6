#pragma once
/// @file storage/memmap_options.h
/// Options of memmap(), memmap_(), memmap_like() and load_memmap().

#include <c10/core/Device.h>

#include <optional>

namespace tensordict {

/// How a tensordict is written to a memory-mapped directory.
struct MemmapOptions {
  /// Threads writing leaf files in parallel (0: one per hardware thread, at
  /// most 8; 1: the calling thread only).
  int num_threads = 0;
  /// Overwrite leaf files that already exist at the prefix (Python's existsok).
  /// When false, an existing leaf file is a StorageError and nothing is written.
  bool existsok = true;
  /// A progress bar on stderr (leaf files written / total) for long saves of
  /// many leaves, drawn only when stderr is a terminal (as MapOptions::pbar).
  bool pbar = false;
  /// Survive a power loss, not only a crash of the process: every file
  /// written is fsync()ed, then the staging directory, then (after the
  /// rename that installs the save) the parent directory. Off by default, as
  /// torch.save and Python tensordict: it waits for the disk (docs/storage.md
  /// has the cost). A failed fsync is a StorageError and the earlier save at
  /// the prefix stays as it was.
  bool durable = false;
};

/// How a memory-mapped directory is opened.
struct LoadOptions {
  /// Map the files writable (writes reach the files). When false, the files
  /// are mapped copy-on-write: writes stay in this process.
  bool writable = true;
  /// Move every tensor to this device after mapping. The "meta" device reads
  /// no data at all: only shapes and dtypes.
  std::optional<c10::Device> device = std::nullopt;
  /// A progress bar on stderr (leaf files mapped / total) for long loads of
  /// many leaves, drawn only when stderr is a terminal (as MapOptions::pbar).
  bool pbar = false;
  /// A non-tensor value Python pickled (a value that is not JSON: `other.pickle`,
  /// `pickle.pkl`) is never unpickled. By default the load is refused with
  /// FormatError naming the key, as Python does with allow_pickle=False (its
  /// default from tensordict 0.16). When true, the value loads as the marker
  /// {"__tensordict_opaque__": "pickle", "file": ..., "bytes": N}, so that the
  /// rest of the directory can be read.
  bool pickled_values_as_markers = false;
};

}  // namespace tensordict
