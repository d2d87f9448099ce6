#include "pch.h"

#include <sstream>

namespace td = tensordict;

TEST(TensorDictRepr, EmptyTensorDict) {
  td::TensorDict t;
  EXPECT_EQ(t.repr(),
            "TensorDict(\n"
            "    fields={\n"
            "    },\n"
            "    batch_size=torch.Size([]),\n"
            "    device=None,\n"
            "    is_shared=False)");
}

TEST(TensorDictRepr, EmptyWithBatchSizeAndDevice) {
  td::TensorDict t(std::vector<int64_t>{4, 3}, at::Device(at::kCPU));
  EXPECT_EQ(t.repr(),
            "TensorDict(\n"
            "    fields={\n"
            "    },\n"
            "    batch_size=torch.Size([4, 3]),\n"
            "    device=cpu,\n"
            "    is_shared=False)");
}

TEST(TensorDictRepr, NestedWithTensorAndNonTensorFieldsSortedAlphabetically) {
  // Inserted as obs, next, label; printed as label, next, obs.
  td::TensorDict next(
      {{"reward", torch::zeros({4, 1})}, {"done", torch::zeros({4, 1}, torch::kBool)}}, {4});
  td::TensorDict t({{"obs", torch::randn({4, 3})}, {"next", next}, {"label", "cat"}}, {4});
  EXPECT_EQ(t.repr(),
            "TensorDict(\n"
            "    fields={\n"
            "        label: NonTensorData(data=cat, batch_size=torch.Size([4]), device=None),\n"
            "        next: TensorDict(\n"
            "            fields={\n"
            "                done: Tensor(shape=torch.Size([4, 1]), device=cpu, dtype=torch.bool, "
            "is_shared=False),\n"
            "                reward: Tensor(shape=torch.Size([4, 1]), device=cpu, "
            "dtype=torch.float32, is_shared=False)},\n"
            "            batch_size=torch.Size([4]),\n"
            "            device=None,\n"
            "            is_shared=False),\n"
            "        obs: Tensor(shape=torch.Size([4, 3]), device=cpu, dtype=torch.float32, "
            "is_shared=False)},\n"
            "    batch_size=torch.Size([4]),\n"
            "    device=None,\n"
            "    is_shared=False)");
}

TEST(TensorDictRepr, EmptyNestedTensorDictAndDtypes) {
  td::TensorDict t(
      {{"i", torch::zeros({2}, torch::kInt64)}, {"h", torch::zeros({2}, torch::kFloat64)}}, {2},
      at::Device(at::kCPU));
  t.create_nested("e");
  EXPECT_EQ(
      t.repr(),
      "TensorDict(\n"
      "    fields={\n"
      "        e: TensorDict(\n"
      "            fields={\n"
      "            },\n"
      "            batch_size=torch.Size([2]),\n"
      "            device=cpu,\n"
      "            is_shared=False),\n"
      "        h: Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.float64, "
      "is_shared=False),\n"
      "        i: Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.int64, is_shared=False)},\n"
      "    batch_size=torch.Size([2]),\n"
      "    device=cpu,\n"
      "    is_shared=False)");
}

TEST(TensorDictRepr, StreamOperatorEqualsRepr) {
  td::TensorDict t({{"obs", torch::zeros({2, 3})}, {"label", "cat"}}, {2});
  t.set({"next", "obs"}, torch::zeros({2, 3}));
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), t.repr());
  EXPECT_EQ(t.to_string(), t.repr());
  std::ostringstream empty;
  empty << td::TensorDict();
  EXPECT_EQ(empty.str(), td::TensorDict().repr());
}

TEST(NonTensorDataRepr, StringAndJsonValues) {
  EXPECT_EQ(td::NonTensorData(nlohmann::json("cat"), {4}).repr(),
            "NonTensorData(data=cat, batch_size=torch.Size([4]), device=None)");
  EXPECT_EQ(td::NonTensorData(nlohmann::json(3)).repr(),
            "NonTensorData(data=3, batch_size=torch.Size([]), device=None)");
  EXPECT_EQ(td::NonTensorData(nlohmann::json({1, 2}), {2}, at::Device(at::kCPU)).repr(),
            "NonTensorData(data=[1, 2], batch_size=torch.Size([2]), device=cpu)");
}
