// Built against the installed package by the package.find_package test.
#include <tensordict/module.h>
#include <tensordict/schema.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/linear.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <iostream>

int main() {
  namespace td = tensordict;
  td::TensorDict data({{"a", at::ones({3, 2})}}, {3});
  data.set({"nested", "b"}, at::zeros({3}));
  td::TensorDict row = data[1];
  if (row.batch_dims() != 0 || row.get({"nested", "b"}).item<float>() != 0.0f) {
    std::cerr << "unexpected result\n";
    return 1;
  }
  // module.h (installed, outside the umbrella header) and its code in the library.
  torch::nn::Linear layer(3, 2);
  td::TensorDict params = td::from_module(*layer);
  td::to_module(params.clone(), *layer, {.strict = true});
  if (params.num_keys() != 2 || !params.get("weight").is_same(layer->weight)) {
    std::cerr << "unexpected from_module result\n";
    return 1;
  }
  // The project's own storage component (consumer_storage.cpp), by name only.
  const auto names = td::available_storages();
  if (std::find(names.begin(), names.end(), "consumer") == names.end()) {
    std::cerr << "the storage \"consumer\" of this project's component is not registered\n";
    return 1;
  }
  const td::Schema schema{{"obs", {{2}, at::kFloat}}, {{"next", "done"}, {{}, at::kBool}}};
  td::TensorDictBase made = td::from_schema(schema, {8}, "consumer");
  if (made.get_non_tensor("made_by") != "consumer_storage" ||
      made.batch_size().vec() != std::vector<int64_t>{8} ||
      made.get("obs").sizes().vec() != std::vector<int64_t>{8, 2} ||
      !made.get("obs").eq(7).all().item<bool>() ||
      made.get({"next", "done"}).scalar_type() != at::kBool) {
    std::cerr << "unexpected from_schema(..., \"consumer\") result: " << made << "\n";
    return 1;
  }
  // version.h, generated from the project's VERSION, matches the package version.
  if (std::strcmp(td::version(), EXPECTED_TENSORDICT_VERSION) != 0) {
    std::cerr << "version.h says " << td::version() << ", the package "
              << EXPECTED_TENSORDICT_VERSION << "\n";
    return 1;
  }
  std::cout << "consumer OK, tensordict " << td::version() << "\n" << row << "\n";
  return 0;
}
