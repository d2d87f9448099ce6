// tensordict::map (Python's TensorDictBase.map) on a pool of std::threads.

#include "core/parallel.h"

#include <tensordict/detail/progress.h>
#include <tensordict/errors.h>
#include <tensordict/map.h>
#include <tensordict/stack.h>

#include <ATen/TensorIndexing.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tensordict {

TensorDictBase map(const TensorDictBase& td,
                   const std::function<TensorDictBase(const TensorDictBase&)>& fn,
                   const MapOptions& options) {
  if (!td.defined()) throw ValueError("map: null tensordict handle");
  if (!fn) throw ValueError("map: empty function");
  const int64_t nd = td.batch_dims();
  const int64_t dim = options.dim < 0 ? options.dim + nd : options.dim;
  if (nd == 0 || dim < 0 || dim >= nd)
    throw IndexError("map: dim " + std::to_string(options.dim) +
                     " is not a batch dim of a tensordict with " + std::to_string(nd) +
                     " batch dims");
  if (options.num_workers < 0)
    throw ValueError("map: num_workers must be >= 0, got " + std::to_string(options.num_workers));
  if (options.chunksize < -1)
    throw ValueError("map: chunksize must be >= -1, got " + std::to_string(options.chunksize));
  if (options.num_chunks == 0 || options.num_chunks < -1)
    throw ValueError("map: num_chunks must be > 0 or -1, got " +
                     std::to_string(options.num_chunks));
  const int workers = options.num_workers > 0
                          ? options.num_workers
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  const int64_t rows = td.size(dim);
  const bool stacked = options.chunksize == 0;
  std::vector<TensorDictBase> chunks;
  if (stacked) {
    chunks = td.unbind(dim);
  } else if (options.chunksize > 0) {
    chunks = td.split(options.chunksize, dim);
  } else {
    const int64_t k = options.num_chunks > 0 ? options.num_chunks : workers;
    chunks = td.chunk(std::max<int64_t>(1, std::min(k, rows)), dim);
  }
  if (chunks.empty()) {
    if (stacked)
      throw ValueError("map: chunksize=0 over an empty dim " + std::to_string(dim) +
                       " has no element to stack");
    chunks.push_back(td);
  }
  // The rows each chunk covers, for `out`.
  std::vector<int64_t> starts(chunks.size(), 0);
  for (std::size_t i = 1; i < chunks.size(); ++i)
    starts[i] = starts[i - 1] + (stacked ? 1 : chunks[i - 1].size(dim));

  std::vector<TensorDictBase> results(chunks.size());
  std::mutex out_mutex;
  TensorDictBase out = options.out;
  detail::Progress progress("map", static_cast<int64_t>(chunks.size()), options.pbar);
  auto run = [&](std::size_t i) {
    TensorDictBase r = fn(chunks[i]);
    if (!r.defined())
      throw ValueError("map: the function returned a null tensordict for chunk " +
                       std::to_string(i));
    if (out.defined()) {
      std::vector<at::indexing::TensorIndex> index(dim, at::indexing::Slice());
      if (stacked)
        index.emplace_back(starts[i]);
      else
        index.emplace_back(at::indexing::Slice(starts[i], starts[i] + chunks[i].size(dim)));
      std::lock_guard<std::mutex> lock(out_mutex);  // out is one tensordict
      out.index_put_(index, r);
    } else {
      results[i] = std::move(r);
    }
    progress.advance();
  };

  detail::parallel_for(chunks.size(), static_cast<std::size_t>(workers), run);
  progress.finish();
  if (out.defined()) return out;
  return stacked ? TensorDictBase(stack(results, dim)) : TensorDictBase(cat(results, dim));
}

}  // namespace tensordict
