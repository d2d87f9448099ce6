// Three agents whose observations have different sizes, kept in one lazy stack:
// read the common leaf stacked and the ragged one as a list or padded, write
// through the stack into the agents, save and load in Python's memmap layout.
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include "example_support.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace td = tensordict;
namespace fs = std::filesystem;
using example::check;
using example::row;
using torch::indexing::Slice;

int main() {
  const int64_t T = 4;  // time steps

  // Agent k observes 3 + 2k features; every agent has a reward per step.
  // Agent 2 also has a "comm" channel that the others lack.
  std::vector<td::TensorDictBase> agents;
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t features = 3 + 2 * k;
    agents.push_back(td::TensorDict(
        {{"obs", torch::arange(T * features, torch::kFloat).reshape({T, features}) + 100 * k},
         {"reward", torch::zeros({T})}},
        /*batch_size=*/{T}));
  }
  agents[2].set("comm", torch::zeros({T, 2}));

  // No copy: the stack holds the three agents themselves. Batch size [3, T].
  td::LazyStackedTensorDict stack = td::lazy_stack(agents);
  std::cout << stack << "\n\n";

  // A leaf with the same shape in every member reads as one stacked tensor
  // (a fresh copy, as in Python).
  at::Tensor reward = stack.get("reward");  // [3, 4]
  std::cout << "reward: " << reward.sizes() << "\n";

  // "obs" is ragged ([4, 3], [4, 5], [4, 7]): get() refuses it.
  try {
    stack.get("obs");
  } catch (const td::ShapeError& e) {
    std::cout << "get(\"obs\") -> ShapeError: " << e.what() << "\n";
  }
  // The members' own tensors, one per agent (no copy)...
  std::vector<at::Tensor> obs = stack.get_as_list("obs");
  for (std::size_t k = 0; k < obs.size(); ++k)
    std::cout << "obs of agent " << k << ": " << obs[k].sizes() << "\n";
  // ... or one tensor padded to the largest shape: [3, 4, 7].
  at::Tensor padded = stack.get_padded("obs", /*padding_value=*/-1.0, td::PaddingSide::Right);
  std::cout << "padded obs: " << padded.sizes() << ", agent 0 at step 0: " << row(padded[0][0])
            << "\n";

  // An int on the stack dim is the member itself; the exclusive key is there.
  td::TensorDictBase third = stack[2];
  std::cout << "stack[2] is agents[2]: " << std::boolalpha << third.is_same(agents[2])
            << ", has comm: " << third.contains("comm") << "\n";

  // Writes go through to the agents. Step 2 of agent 1:
  stack.index_put_(
      {1, 2}, td::TensorDict({{"obs", torch::full({5}, -9.0)}, {"reward", torch::tensor(1.0)}}));
  std::cout << "agent 1 obs after index_put_({1, 2}):\n" << agents[1].get("obs") << "\n";
  // Step 0 of every agent: one row per member. "done" is new, so each agent
  // gets a zero-filled [T] leaf first (lazy pre-allocation).
  stack.index_put_({Slice(), 0}, td::TensorDict({{"reward", torch::tensor({0.5f, 1.5f, 2.5f})},
                                                 {"done", torch::ones({3}, torch::kBool)}},
                                                /*batch_size=*/{3}));
  std::cout << "rewards after index_put_({Slice(), 0}):\n" << stack.get("reward") << "\n";
  std::cout << "agent 0 done: " << row(agents[0].get("done")) << "\n";

  bool ok = true;
  ok &= check(agents[1].get("obs")[2].eq(-9.0).all().item<bool>(), "agent 1 row written");
  ok &= check(agents[2].get("reward")[0].item<float>() == 2.5f, "agent 2 reward written");
  ok &= check(agents[0].get("done").sizes().vec() == std::vector<int64_t>{T}, "done pre-allocated");

  // Save in Python's layout: meta.json with the stack dim, one directory per
  // member. Python's tensordict.load_memmap reads it back, and so do we.
  example::TempDir dir("lazy_stack_agents");
  td::TensorDictBase saved = stack.memmap(dir.path.string());  // locked, memory-mapped
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path))
    names.push_back(entry.path().filename().string() + (entry.is_directory() ? "/" : ""));
  std::sort(names.begin(), names.end());
  std::cout << "\nsaved to a temporary directory:";
  for (const auto& n : names) std::cout << " " << n;
  std::cout << "\nmeta.json: " << example::read_text(dir.path / "meta.json") << "\n";

  auto loaded = td::load_memmap(dir.path.string()).as<td::LazyStackedTensorDict>();
  std::cout << "loaded: " << loaded.type_name() << " of " << loaded.num_members()
            << " members, batch size " << loaded.batch_size() << ", stack dim "
            << loaded.stack_dim() << "\n";
  ok &= check(saved.is<td::LazyStackedTensorDict>() && saved.is_locked(), "saved stack locked");
  ok &= check(loaded.num_members() == 3 && loaded.stack_dim() == 0, "loaded layout");
  ok &= check(torch::equal(loaded.get_as_list("obs")[1], agents[1].get("obs")), "loaded obs");
  ok &= check(loaded[2].contains("comm") && !loaded.contains("comm"), "exclusive key loaded");
  ok &= check(torch::equal(loaded.get("reward"), stack.get("reward")), "loaded reward");
  return ok ? 0 : 1;
}
