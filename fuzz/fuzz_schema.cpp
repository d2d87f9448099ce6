// Schema::from_json on arbitrary JSON text, then from_schema when small.
#include "fuzz_common.h"

#include <torch/torch.h>

void td_fuzz_write_seeds(const char* dir) {
  const char* seeds[] = {
      R"({"obs": {"shape": [4, 84], "dtype": "uint8"}, "next": {"reward": [[1], "float32"]}})",
      R"({"a": [[2, 3], "torch.int64"], "b": {"c": {"shape": [], "dtype": "bool"}}})",
      R"({"x": {"shape": [0], "dtype": "complex64"}})"};
  int n = 0;
  for (const char* s : seeds)
    td_fuzz::write_file(td_fuzz::fs::path(dir) / ("seed" + std::to_string(n++) + ".json"), s,
                        std::strlen(s));
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return td_fuzz::initialize(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace td = tensordict;
  auto j = nlohmann::ordered_json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    td::Schema schema = td::Schema::from_json(j);
    // Allocate only what is small (the fuzzer's memory limit is not the point).
    int64_t bytes = 0;
    for (const auto& [k, spec] : schema.entries()) {
      int64_t n = 2 * static_cast<int64_t>(c10::elementSize(spec.dtype));
      // Capped at 2^40 before each product (at most 2^60): the shape's own
      // element count may not fit in int64 at 2 * elementSize bytes each.
      for (auto d : spec.shape)
        n = (d > (int64_t{1} << 20) || n > (int64_t{1} << 40)) ? (int64_t{1} << 40) : n * d;
      bytes += std::min<int64_t>(n, int64_t{1} << 40);
    }
    if (bytes < (int64_t{1} << 20)) {
      auto t = td::from_schema(schema, {2});
      if (!(td::Schema::from_json(schema.to_json()) == schema)) std::abort();
    }
  } catch (const td::Error&) {
  }
  return 0;
}
