// Built against the installed package by the package.find_package test.
#include <tensordict/tensordict.h>

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
  std::cout << "consumer OK, tensordict " << td::version() << "\n" << row << "\n";
  return 0;
}
