// A TensorClass in a Redis store: __tensorclass__ as Python records it, the
// fields as leaves, and re-attachment as the class (from_store_as).
#include "support/core_test_helpers.h"
#include "support/redis_server.h"

#include <tensordict/storage/redis.h>
#include <tensordict/tensor_class.h>

namespace {

namespace td = tensordict;
using td_test::on;
using td_test::RedisServer;

struct Step : td::TensorClass<Step> {
  TENSORDICT_FIELDS(obs, action);
  TENSORDICT_NON_TENSOR_FIELDS((std::string, env));
};

struct Other : td::TensorClass<Other> {
  static constexpr std::string_view python_qualname = "mypkg.buffers.Other";
  TENSORDICT_FIELDS(obs);
};

TEST(RedisTensorClass, RecordsTheClassAndReattachesAsIt) {
  RedisServer server;
  Step step({{"obs", torch::arange(8, torch::kFloat32).view({4, 2})},
             {"action", torch::arange(4)},
             {"env", "Pong"}},
            {4});
  Step stored = td::redis::from_tensorclass(step, on(server, "steps"));
  EXPECT_TRUE(td::redis::is_store(stored.tensordict()));
  // Python's layout: "<module>.<qualname>" in __tensorclass__, fields as leaves.
  EXPECT_EQ(server.command({"GET", "tensordict:{steps}:__tensorclass__"}), "__main__.Step");
  EXPECT_EQ(server.command({"HGET", "tensordict:{steps}:m:env", "encoding"}), "json");
  EXPECT_EQ(td::redis::tensorclass_name_of<Other>(), "mypkg.buffers.Other");

  auto again = td::redis::from_store_as<Step>(on(server, "steps"));
  EXPECT_EQ(td::redis::tensorclass_name(again.tensordict()), "__main__.Step");
  EXPECT_EQ(again.env(), "Pong");
  EXPECT_TRUE(again.obs().equal(step.obs()));
  again.index_put_(
      {1},
      Step({{"obs", torch::full({2}, 9.0f)}, {"action", torch::tensor(7)}, {"env", "Pong"}}, {}));
  EXPECT_EQ(stored.action()[1].item<int64_t>(), 7);  // the same store on the server
  // A plain from_store sees the record too; clear() deletes it, as Python's clear_redis().
  auto plain = td::redis::from_store(on(server, "steps"));
  EXPECT_EQ(td::redis::tensorclass_name(plain), "__main__.Step");
  td::redis::clear(plain);
  EXPECT_EQ(server.command({"GET", "tensordict:{steps}:__tensorclass__"}), "(nil)");
  EXPECT_EQ(server.command({"EXISTS", "tensordict:{steps}:__batch_size__"}), "0");
}

TEST(RedisTensorClass, AnotherRecordedClassIsRefused) {
  RedisServer server;
  Other other({{"obs", torch::zeros({3, 2})}}, {3});
  td::redis::from_tensorclass(other, on(server, "others"));
  TD_EXPECT_THROW_MSG(td::redis::from_store_as<Step>(on(server, "others")), td::SchemaError,
                      "holds a mypkg.buffers.Other, not a __main__.Step");
  // A store recording no class is accepted (the caller names it).
  td::TensorDict plain({{"obs", torch::zeros({3, 2})}}, {3});
  td::redis::from_tensordict(plain, on(server, "plain"));
  auto as_other = td::redis::from_store_as<Other>(on(server, "plain"));
  EXPECT_EQ(as_other.obs().sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_FALSE(td::redis::tensorclass_name(as_other.tensordict()).has_value());
}

}  // namespace
