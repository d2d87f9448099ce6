// Process a memory-mapped dataset in parallel with tensordict::map: chunks of
// rows on a pool of threads, each result written straight into a memmap
// output, with a progress bar when stderr is a terminal.
#include <tensordict/map.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include "example_support.h"

#include <iostream>

namespace td = tensordict;

int main() {
  torch::manual_seed(0);
  example::TempDir dir("parallel_map");
  const int64_t rows = 200000;

  // The dataset, saved as Python's memmap layout.
  td::TensorDict data({{"obs", torch::randn({rows, 16})}, {"reward", torch::randn({rows})}},
                      {rows});
  td::TensorDictBase dataset = data.memmap((dir.path / "data").string());

  // The output: one memmap tensordict of the result's structure, filled in place.
  td::TensorDict shape_of_result({{"score", torch::zeros({rows})}}, {rows});
  td::TensorDictBase scores = shape_of_result.memmap((dir.path / "scores").string());

  auto score = [](const td::TensorDictBase& chunk) {
    at::Tensor s = chunk.get("obs").pow(2).sum(-1).sqrt() + chunk.get("reward");
    return td::TensorDictBase(td::TensorDict({{"score", s}}, chunk.batch_size()));
  };
  td::MapOptions opts;
  opts.num_workers = 2;
  opts.chunksize = 10000;  // 20 chunks
  opts.pbar = true;        // drawn only on a terminal
  opts.out = scores;
  td::map(dataset, score, opts);

  // The same in one serial call, for the check.
  at::Tensor expected = score(dataset).get("score");
  const bool same = td::load_memmap((dir.path / "scores").string()).get("score").equal(expected);
  std::cout << "scored " << rows << " rows in " << rows / opts.chunksize << " chunks on "
            << opts.num_workers << " threads; first scores "
            << example::row(scores.get("score").narrow(0, 0, 3)) << "\n";
  return example::check(same, "the memmap output equals a serial computation") ? 0 : 1;
}
