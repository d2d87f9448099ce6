// main() of the fuzz targets outside libFuzzer (the ordinary build): writes
// the target's seeds to a scratch folder and runs every seed, then every
// file of the folders given (fuzz/regressions/<target>: inputs a fuzzer
// once found), through LLVMFuzzerTestOneInput. CTest runs it as fuzz.replay.*.
#include "fuzz_common.h"

#include <iostream>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = td_fuzz::fs;
  const fs::path seeds =
      fs::temp_directory_path() / ("td-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(seeds);
  td_fuzz_write_seeds(seeds.string().c_str());
  std::vector<fs::path> inputs;
  for (const auto& e : fs::directory_iterator(seeds)) inputs.push_back(e.path());
  for (int i = 1; i < argc; ++i)
    for (const auto& e : fs::directory_iterator(argv[i]))
      if (e.is_regular_file()) inputs.push_back(e.path());
  for (const auto& p : inputs) {
    const std::string bytes = td_fuzz::read_file(p);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  fs::remove_all(seeds);
  fs::remove_all(td_fuzz::scratch());
  std::cout << "replayed " << inputs.size() << " inputs\n";
  return inputs.empty() ? 1 : 0;
}
