// load_state_dict_file on arbitrary bytes (the bounded archive reader).
#include "fuzz_common.h"

#include <torch/torch.h>

void td_fuzz_write_seeds(const char* dir) {
  namespace td = tensordict;
  auto t = td_fuzz::sample();
  int n = 0;
  for (const auto& opt : {td::StateDictOptions{}, td::StateDictOptions{.flatten = false},
                          td::StateDictOptions{.flatten = false, .legacy = true}})
    td::save_state_dict(t.state_dict(opt),
                        (td_fuzz::fs::path(dir) / ("seed" + std::to_string(n++) + ".pt")).string());
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return td_fuzz::initialize(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = td_fuzz::scratch() / "input.pt";
  td_fuzz::write_file(file, data, size);
  try {
    auto sd = tensordict::load_state_dict_file(file.string());
    for (const auto& [k, item] : sd.items())
      if (item.kind() == tensordict::StateDictItem::Kind::Tensor) (void)item.tensor().sum();
  } catch (const tensordict::Error&) {
  }
  return 0;
}
