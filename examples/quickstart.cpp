// Build a nested TensorDict, index it and print it.
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <iostream>

namespace td = tensordict;
using torch::indexing::Slice;

int main() {
  torch::manual_seed(0);
  // Keys are strings or paths; values tensors, tensordicts or JSON values.
  td::TensorDict data({{"obs", torch::randn({4, 3})},
                       {"next", td::TensorDict({{"reward", torch::zeros({4, 1})}}, {4})}},
                      /*batch_size=*/{4});
  data.set({"next", "done"}, torch::zeros({4, 1}, torch::kBool));  // nested set
  data.set_non_tensor("label", "cat");                             // JSON value
  std::cout << data << "\n\n";

  td::TensorDict row = data[0];                          // batch_size []
  td::TensorDict first_two = data.index({Slice(0, 2)});  // views of data
  std::cout << "data[0]:\n" << row << "\n\n";
  std::cout << "data[0:2] obs:\n" << first_two.get("obs") << "\n";

  // A view writes through: first_two shares storage with data.
  first_two.get({"next", "reward"}).fill_(1.0);
  std::cout << "reward after writing through the view: " << data.get({"next", "reward"}).squeeze(-1)
            << "\n";
  return 0;
}
