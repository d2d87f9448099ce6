#pragma once
/// @file map.h
/// Python's TensorDictBase.map: a function applied to chunks of a tensordict
/// along a batch dim, on a pool of threads, the results concatenated (or
/// stacked). A free function rather than a member so that adding it did not
/// touch tensor_dict_base.h, which every translation unit includes (see
/// docs/distributed.md, "map").

#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>

#include <cstdint>
#include <functional>

namespace tensordict {

struct MapOptions {
  /// The batch dim to split along (negative counts from the end).
  int64_t dim = 0;
  /// Threads running `fn`; 0 takes std::thread::hardware_concurrency(), 1
  /// runs every chunk on the calling thread.
  int num_workers = 0;
  /// Rows per chunk, and how results are combined: > 0 splits into chunks of
  /// this many rows and concatenates the results along `dim` (Python's
  /// torch.cat); 0 calls `fn` on every element (unbind) and stacks the
  /// results along `dim`; -1 (the default, Python's None) makes `num_chunks`
  /// chunks, concatenated.
  int64_t chunksize = -1;
  /// With chunksize -1: the number of chunks; -1 means one per worker.
  int64_t num_chunks = -1;
  /// A progress bar on stderr (chunks done / total), drawn only when stderr
  /// is a terminal.
  bool pbar = false;
  /// When defined, each chunk's result is written into `out` at its rows
  /// (in place, as index_put_: a memmap `out` receives results without all
  /// of them in memory) and `out` is returned. Its batch size must be the
  /// result's.
  TensorDictBase out = {};
};

/// Runs `fn` over the chunks of `td` along `options.dim` and combines the
/// results in chunk order: the result is identical to a serial loop, whatever
/// the number of workers. `fn` must be safe to call from several threads at
/// once (LibTorch ops on distinct tensors are). The first exception thrown by
/// `fn` is rethrown after the workers stop (chunks not started are skipped).
/// IndexError for a `dim` out of range, ValueError for bad options.
TensorDictBase map(const TensorDictBase& td,
                   const std::function<TensorDictBase(const TensorDictBase&)>& fn,
                   const MapOptions& options = {});

}  // namespace tensordict
