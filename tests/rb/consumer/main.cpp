// Links against the installed tensordict::rb: a prioritized buffer made at
// its first write, sampled, its priorities updated (code that lives in the
// component's library).
#include <tensordict/rb/replay_buffer.h>

#include <ATen/ATen.h>

#include <iostream>
#include <memory>

namespace td = tensordict;
namespace rb = tensordict::rb;

int main() {
  rb::ReplayBuffer buffer(8, std::make_shared<rb::PrioritizedSampler>(8, 0.6, 0.4));
  buffer.extend(td::TensorDict({{"obs", at::arange(12, at::kFloat).view({4, 3})}}, {4}));
  td::TensorDict s = buffer.sample(5);
  s.set("td_error", at::ones({5}));
  buffer.update_tensordict_priority(s);
  if (buffer.size() != 4 || !s.contains("priority_weight") || s.get("obs").size(1) != 3) {
    std::cerr << "unexpected buffer state\n";
    return 1;
  }
  std::cout << "rb consumer ok\n";
  return 0;
}
