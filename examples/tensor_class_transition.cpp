// A typed transition record with a non-tensor field (Python's TensorClass):
// build a batch, index and stack it keeping the type, wrap an existing
// tensordict live, and save it in Python's tensorclass layout.
#include <tensordict/tensor_class.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include "example_support.h"

#include <iostream>
#include <string>

namespace td = tensordict;
using example::check;

namespace {

// Tensor fields plus non-tensor fields of any type nlohmann::json converts;
// std::optional fields read nullopt when absent.
struct Transition : td::TensorClass<Transition> {
  TENSORDICT_FIELDS(obs, action, reward);
  TENSORDICT_NON_TENSOR_FIELDS((std::string, env), (std::optional<int>, seed));
};

}  // namespace

int main() {
  const int64_t T = 5;
  Transition steps({{"obs", torch::randn({T, 4})},
                    {"action", torch::randint(0, 2, {T}, torch::kLong)},
                    {"reward", torch::ones({T})},
                    {"env", "CartPole-v1"}},  // a string is stored as NonTensorData
                   /*batch_size=*/{T});
  steps.set_seed(42);
  std::cout << steps << "\n\n";

  // Typed reads; the non-tensor value is one value for the whole batch.
  Transition third = steps[2];
  std::cout << "steps[2]: env=" << third.env() << ", seed=" << third.seed().value()
            << ", action=" << third.action().item<int64_t>() << "\n";

  // Stacking keeps the class: two episodes -> batch [2, T].
  Transition episodes = Transition::stack({steps, steps.clone()});
  std::cout << "stacked batch size: " << episodes.batch_size() << ", env " << episodes.env()
            << "\n";

  // Wrap an existing tensordict live, with values held beside it.
  td::TensorDict raw({{"obs", torch::zeros({T, 4})},
                      {"action", torch::zeros({T}, torch::kLong)},
                      {"reward", torch::zeros({T})}},
                     {T});
  Transition live = Transition::from_tensordict(raw, {{"env", "Pong-v5"}});
  live.set_reward(torch::full({T}, 3.0));  // writes into `raw`
  std::cout << "raw reward after live.set_reward: " << raw.get("reward").sum().item<float>() / T
            << " per step\n";

  // Save in Python's tensorclass layout: meta.json (class and non-tensor
  // fields) and the tensors under _tensordict/.
  example::TempDir dir("tensor_class");
  steps.memmap(dir.path.string());
  std::cout << "meta.json: " << example::read_text(dir.path / "meta.json") << "\n";
  Transition loaded = Transition::load_memmap(dir.path.string());
  std::cout << "loaded: env=" << loaded.env() << ", batch size " << loaded.batch_size() << "\n";

  bool ok = true;
  ok &= check(third.env() == "CartPole-v1", "indexing keeps non-tensor values");
  ok &= check(episodes.batch_size().vec() == std::vector<int64_t>{2, T}, "stack batch size");
  ok &= check(raw.get("reward").eq(3.0).all().item<bool>(), "live write");
  ok &= check(live.env() == "Pong-v5", "value beside the tensordict");
  ok &= check(torch::equal(loaded.obs(), steps.obs()) && loaded.seed() == 42, "round trip");
  return ok ? 0 : 1;
}
