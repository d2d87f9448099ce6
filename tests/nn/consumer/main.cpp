// Links against the installed tensordict::nn: a module of the component's
// base class runs on a tensordict (read_inputs/write_outputs live in the
// component's library), and TENSORDICT_HAVE_AOTI reaches the consumer when the
// package was built with it.
#include <tensordict/nn/tensor_dict_module_base.h>
#include <tensordict/tensordict.h>

#include <ATen/ATen.h>

#include <iostream>

namespace td = tensordict;

class Twice : public td::nn::TensorDictModuleBase {
 public:
  Twice() : TensorDictModuleBase("Twice", {"x"}, {{"out", "y"}}) {}
  void forward_into(const td::TensorDictBase& in, td::TensorDictBase& out) override {
    auto inputs = read_inputs(in);
    write_outputs(out, {inputs.at(0) * 2});
  }
};

int main() {
#if defined(EXPECT_AOTI) && !defined(TENSORDICT_HAVE_AOTI)
  std::cerr << "the package was built with AOTInductor but TENSORDICT_HAVE_AOTI is not defined\n";
  return 3;
#endif
  td::TensorDict data({{"x", at::ones({2})}}, {2});
  Twice module;
  module(data);
  if (!at::equal(data.get({"out", "y"}), at::full({2}, 2.0))) return 1;
  std::cout << "tensordict::nn linked: " << data.get({"out", "y"}) << "\n";
  return 0;
}
