// A typed replay buffer (the Replay example of Python tensordict's docs):
// pre-allocate a memory-mapped buffer from a schema, wrap it with typed
// access, fill it one transition at a time, and read it back from disk.
#include <tensordict/tensordict.h>
#include <tensordict/typed_tensor_dict.h>
#include <torch/torch.h>

#include "example_support.h"

#include <iostream>
#include <string>

namespace td = tensordict;
using example::check;
using example::row;
using torch::indexing::Slice;

namespace {

// Fields are declared once; each gets obs(), set_obs(t), set_obs_(t).
struct Replay : td::TypedTensorDict<Replay> {
  TENSORDICT_FIELDS(obs, action, reward);
};

// Inheritance adds fields.
struct ReplayWithDone : td::TypedTensorDict<ReplayWithDone, Replay> {
  TENSORDICT_FIELDS(done);
};

}  // namespace

int main() {
  const int64_t capacity = 32;
  example::TempDir dir("typed_replay");

  // Pre-allocate: the files are created sparse, nothing is held in RAM.
  td::Schema schema{{"obs", {{84, 84, 3}, torch::kUInt8}},
                    {"action", {{4}, torch::kFloat32}},
                    {"reward", {{}, torch::kFloat32}}};
  Replay replay =
      Replay::from_schema(schema, {capacity}, td::storage::Memmap{.prefix = dir.path.string()});
  std::cout << "pre-allocated " << Replay::static_type_name() << " of batch size "
            << replay.batch_size() << " in a memmap directory (locked: " << std::boolalpha
            << replay.is_locked() << ")\n";

  // Fill it one transition at a time: each write goes to the files in place.
  for (int64_t i = 0; i < capacity; ++i) {
    Replay sample({{"obs", torch::full({84, 84, 3}, i % 256, torch::kUInt8)},
                   {"action", torch::full({4}, 0.1 * static_cast<double>(i))},
                   {"reward", torch::tensor(static_cast<float>(i))}},
                  /*batch_size=*/{});
    replay.index_put_({i}, sample);
  }

  // Typed reads; indexing keeps the type.
  at::Tensor rewards = replay.reward().clone();  // reward() is the mapped file itself
  Replay last = replay[capacity - 1];
  Replay recent = replay.index({Slice(capacity - 4, capacity)});
  std::cout << "rewards[:8]: " << row(rewards.slice(0, 0, 8)) << "\n";
  std::cout << "last obs pixel: " << last.obs()[0][0][0].item<int>()
            << ", last action: " << row(last.action()) << "\n";
  std::cout << "recent batch size: " << recent.batch_size() << "\n";

  // The buffer is locked (memory-mapped): entries cannot be replaced...
  try {
    replay.set_reward(torch::zeros({capacity}));
  } catch (const td::LockedError& e) {
    std::cout << "set_reward -> LockedError: " << std::string(e.what()).substr(0, 60) << "...\n";
  }
  // ... but in-place writes reach the files.
  replay.set_reward_(replay.reward() * 2);

  // Another process (or this one, later) reads the same files.
  Replay loaded = Replay::load_memmap(dir.path.string());
  std::cout << "loaded reward[5]: " << loaded.reward()[5].item<float>() << "\n";

  // A buffer missing a field is refused, naming it.
  try {
    ReplayWithDone::from_tensordict(loaded);
  } catch (const td::SchemaError& e) {
    std::cout << "ReplayWithDone over it -> SchemaError: " << e.what() << "\n";
  }

  bool ok = true;
  ok &= check(torch::equal(rewards, torch::arange(capacity, torch::kFloat)), "rewards filled");
  ok &= check(last.obs().eq(capacity - 1).all().item<bool>(), "last obs filled");
  ok &= check(recent.batch_size().vec() == std::vector<int64_t>{4}, "slice keeps the batch");
  ok &= check(loaded.reward()[5].item<float>() == 10.0f, "in-place write persisted");
  ok &= check(loaded.obs().scalar_type() == torch::kUInt8, "dtype from the schema");
  return ok ? 0 : 1;
}
