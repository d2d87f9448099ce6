// TensorDict::from_consolidated on arbitrary bytes (a consolidated file).
#include "fuzz_common.h"

#include <torch/torch.h>

void td_fuzz_write_seeds(const char* dir) {
  namespace td = tensordict;
  auto t = td_fuzz::sample();
  t.consolidate((td_fuzz::fs::path(dir) / "seed0.td").string());
  td::TensorDict flat(std::vector<int64_t>{2});
  flat.set("x", torch::ones({2, 3}, torch::kDouble));
  flat.consolidate((td_fuzz::fs::path(dir) / "seed1.td").string());
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return td_fuzz::initialize(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = td_fuzz::scratch() / "input.td";
  td_fuzz::write_file(file, data, size);
  try {
    auto t = tensordict::TensorDict::from_consolidated(file.string());
    for (const auto& [k, v] : t.items(/*include_nested=*/true))
      if (v.is_tensor()) (void)v.tensor().sum();
  } catch (const tensordict::Error&) {
  }
  return 0;
}
