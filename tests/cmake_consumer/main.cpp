// Built against the installed package by the package.find_package test.
#include <tensordict/module.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/linear.h>

#include <ATen/ATen.h>

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
  std::cout << "consumer OK, tensordict " << td::version() << "\n" << row << "\n";
  return 0;
}
