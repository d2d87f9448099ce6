// Module interop (tensordict/module.h): from_module's key layout and storage
// sharing, to_module / load_submodule through memmap, and the error paths,
// which must leave the module unchanged.
#include "pch.h"

#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

// module.h is not in the umbrella header; the nn layers used here are included
// explicitly rather than relied on through the precompiled header.
#include <tensordict/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace td = tensordict;
namespace fs = std::filesystem;
using td_test::expect_message_contains;

namespace {

// Own parameter and buffer, children with parameters and buffers (BatchNorm's
// running stats, an int64 counter), a child without any (ReLU), a Sequential
// whose children are named "0", "1", "2".
struct NetImpl : torch::nn::Module {
  NetImpl() {
    scale = register_parameter("scale", torch::ones({2}));
    steps = register_buffer("steps", torch::zeros({}, torch::kLong));
    fc = register_module("fc", torch::nn::Linear(3, 4));
    bn = register_module("bn", torch::nn::BatchNorm1d(4));
    act = register_module("act", torch::nn::ReLU());
    layers = register_module(
        "layers",
        torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2)));
  }
  torch::Tensor forward(torch::Tensor x) { return layers->forward(act(bn(fc(x)))) * scale; }
  torch::Tensor scale, steps;
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::ReLU act{nullptr};
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(Net);

Net make_net(uint64_t seed) {
  torch::manual_seed(seed);
  Net net;
  // Give the buffers non-default values, so that loading them is visible.
  torch::NoGradGuard no_grad;
  net->bn->running_mean.uniform_();
  net->bn->running_var.uniform_(1, 2);
  net->bn->num_batches_tracked.fill_(static_cast<int64_t>(seed));
  net->steps.fill_(static_cast<int64_t>(seed) * 10);
  return net;
}

// Every parameter and buffer of a module by its dotted name, copied.
std::map<std::string, torch::Tensor> values_of(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value().clone();
  return out;
}

void expect_same_values(const torch::nn::Module& m,
                        const std::map<std::string, torch::Tensor>& expected) {
  auto now = values_of(m);
  ASSERT_EQ(now.size(), expected.size());
  for (const auto& [k, v] : expected) {
    ASSERT_TRUE(now.count(k)) << k;
    EXPECT_TRUE(torch::equal(now[k], v)) << "module tensor " << k << " changed";
  }
}

std::vector<std::string> dotted_leaves(const td::TensorDictBase& t) {
  std::vector<std::string> out;
  for (const auto& k : t.keys(/*include_nested=*/true, /*leaves_only=*/true))
    out.push_back(k.join("."));
  return out;
}

class Module : public ::testing::Test {
 protected:
  td_test::TempDir dir{"td_module"};
};

// ---- from_module ------------------------------------------------------------------

TEST_F(Module, KeyLayoutNestsBySubmodule) {
  Net net = make_net(1);
  td::TensorDict params = td::from_module(*net);
  EXPECT_TRUE(params.batch_size().empty());
  EXPECT_FALSE(params.is_locked());
  // Own parameters, own buffers, then children, in registration order; the
  // ReLUs hold nothing and are left out.
  EXPECT_EQ(params.keys(), (std::vector<td::NestedKey>{"scale", "steps", "fc", "bn", "layers"}));
  EXPECT_EQ(params.get_tensordict("layers").keys(), (std::vector<td::NestedKey>{"0", "2"}));
  EXPECT_EQ(dotted_leaves(params),
            (std::vector<std::string>{"scale", "steps", "fc.weight", "fc.bias", "bn.weight",
                                      "bn.bias", "bn.running_mean", "bn.running_var",
                                      "bn.num_batches_tracked", "layers.0.weight", "layers.0.bias",
                                      "layers.2.weight", "layers.2.bias"}));
  // The same tensors as LibTorch's own recursive listing, by dotted name.
  std::set<std::string> torch_names;
  for (const auto& p : net->named_parameters()) torch_names.insert(p.key());
  for (const auto& b : net->named_buffers()) torch_names.insert(b.key());
  const auto ours = dotted_leaves(params);
  EXPECT_EQ(std::set<std::string>(ours.begin(), ours.end()), torch_names);
  EXPECT_EQ(params.get({"bn", "num_batches_tracked"}).scalar_type(), torch::kLong);
  EXPECT_EQ(params.get({"layers", "2", "weight"}).sizes(), (td_test::Shape{2, 4}));
}

TEST_F(Module, Options) {
  Net net = make_net(1);
  td::TensorDict all = td::from_module(*net, {.filter_empty = false});
  EXPECT_TRUE(all.contains("act"));
  EXPECT_EQ(all.get_tensordict("act").num_keys(), 0u);
  EXPECT_EQ(all.get_tensordict("layers").keys(), (std::vector<td::NestedKey>{"0", "1", "2"}));
  EXPECT_TRUE(td::from_module(*net, {.lock = true}).is_locked());
  // A module without any tensor: an empty tensordict.
  EXPECT_EQ(td::from_module(*torch::nn::ReLU()).num_keys(), 0u);
  // An unset parameter (Linear without bias) is not an entry.
  torch::nn::Linear no_bias(torch::nn::LinearOptions(3, 2).bias(false));
  EXPECT_EQ(td::from_module(*no_bias).keys(), (std::vector<td::NestedKey>{"weight"}));
}

TEST_F(Module, LeavesShareStorageWithTheModule) {
  Net net = make_net(1);
  td::TensorDict params = td::from_module(*net);
  at::Tensor w = params.get({"fc", "weight"});
  EXPECT_TRUE(w.is_same(net->fc->weight));  // the module's own tensor, not a copy
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(params.get({"bn", "running_mean"}).data_ptr(), net->bn->running_mean.data_ptr());
  {
    torch::NoGradGuard no_grad;
    w.fill_(3.0);                      // through the tensordict ...
    net->bn->running_mean.fill_(7.0);  // ... and through the module
  }
  EXPECT_TRUE(torch::all(net->fc->weight == 3.0).item<bool>());
  EXPECT_TRUE(torch::all(params.get({"bn", "running_mean"}) == 7.0).item<bool>());
}

// ---- to_module ------------------------------------------------------------------------

TEST_F(Module, RoundTripThroughMemmap) {
  Net src = make_net(1);
  Net dst = make_net(2);
  const auto expected = values_of(*src);
  td::from_module(*src).memmap(dir.str("ckpt"));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt" / "layers" / "2" / "weight.memmap"));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt" / "bn" / "num_batches_tracked.memmap"));

  at::Tensor weight_before = dst->fc->weight;
  void* data_before = dst->fc->weight.data_ptr();
  td::to_module(td::load_memmap(dir.str("ckpt")), *dst, {.strict = true});
  expect_same_values(*dst, expected);
  // Copied into the existing parameters: the layer's own handle sees the
  // values, the parameter keeps its identity and stays a leaf requiring grad.
  EXPECT_TRUE(dst->fc->weight.is_same(weight_before));
  EXPECT_EQ(dst->fc->weight.data_ptr(), data_before);
  EXPECT_TRUE(dst->fc->weight.requires_grad());
  EXPECT_TRUE(dst->fc->weight.is_leaf());
  EXPECT_EQ(dst->bn->num_batches_tracked.item<int64_t>(), 1);
  // The module does not alias the files.
  EXPECT_FALSE(td::MemoryMappedTensor::is_memory_mapped(dst->fc->weight));
  // The same function, and gradients still flow to the parameters.
  dst->eval();
  src->eval();
  torch::Tensor x = torch::randn({5, 3});
  torch::Tensor y = dst->forward(x);
  EXPECT_TRUE(torch::allclose(y, src->forward(x)));
  y.sum().backward();
  EXPECT_TRUE(dst->fc->weight.grad().defined());
}

TEST_F(Module, ShareStorageIsZeroCopyAndOutlivesASaveOverItsDirectory) {
  Net src = make_net(1);
  Net dst = make_net(2);
  const auto expected = values_of(*src);
  td::from_module(*src).memmap(dir.str("ckpt"));
  at::Tensor weight_before = dst->fc->weight;
  td::to_module(td::load_memmap(dir.str("ckpt"), {.writable = false}), *dst,
                {.strict = true, .share_storage = true});
  expect_same_values(*dst, expected);
  // The layer's own handle now reads the file's mapping (set_, same identity).
  EXPECT_TRUE(dst->fc->weight.is_same(weight_before));
  EXPECT_TRUE(td::MemoryMappedTensor::is_memory_mapped(dst->fc->weight));
  EXPECT_TRUE(dst->fc->weight.requires_grad());
  // Another checkpoint written over the same directory replaces the files; the
  // module keeps reading the ones it mapped (no SIGBUS, no change).
  td::from_module(*make_net(3)).memmap(dir.str("ckpt"));
  expect_same_values(*dst, expected);
  torch::Tensor x = torch::randn({5, 3});
  dst->eval();
  src->eval();
  EXPECT_TRUE(torch::allclose(dst->forward(x), src->forward(x)));
}

// to_module reads a mapped source from its file only when the file holds the
// tensor's current bytes.
TEST_F(Module, MappedSourcesAreReadAsTheyAreNow) {
  Net src = make_net(1);
  td::from_module(*src).memmap(dir.str("ckpt"));
  const fs::path weight_file = dir.path / "ckpt" / "fc" / "weight.memmap";
  // Copy-on-write mapping changed in memory: the file does not have the change.
  {
    Net dst = make_net(2);
    td::TensorDictBase cow = td::load_memmap(dir.str("ckpt"), {.writable = false});
    cow.get({"fc", "weight"}).fill_(5.0);
    td::to_module(cow, *dst);
    EXPECT_TRUE(torch::all(dst->fc->weight == 5.0).item<bool>());
  }
  // Writable mapping changed in memory: the file has it (read with pread).
  {
    Net dst = make_net(2);
    td::TensorDictBase shared = td::load_memmap(dir.str("ckpt"));
    shared.get({"fc", "weight"}).fill_(6.0);
    td::to_module(shared, *dst);
    EXPECT_TRUE(torch::all(dst->fc->weight == 6.0).item<bool>());
  }
  // The file replaced by another one after loading: the mapped bytes win.
  {
    Net dst = make_net(2);
    td::TensorDictBase loaded = td::load_memmap(dir.str("ckpt"));
    at::Tensor expected = loaded.get({"fc", "weight"}).clone();
    td::MemoryMappedTensor::from_tensor(torch::full({4, 3}, 9.0), (dir.path / "other").string());
    fs::rename(dir.path / "other", weight_file);
    td::to_module(loaded, *dst);
    EXPECT_TRUE(torch::equal(dst->fc->weight, expected));
  }
}

TEST_F(Module, WritingItsOwnTensorsBackIsANoOp) {
  Net net = make_net(1);
  const auto expected = values_of(*net);
  td::to_module(td::from_module(*net), *net, {.strict = true});
  expect_same_values(*net, expected);
}

TEST_F(Module, LoadOneSubmoduleAtATime) {
  Net src = make_net(1);
  Net dst = make_net(2);
  const auto before = values_of(*dst);
  const auto expected = values_of(*src);
  td::from_module(*src).memmap(dir.str("ckpt"));

  // Each submodule is a directory of its own.
  td::load_submodule(td::load_memmap(dir.str("ckpt/layers/2")), *dst, {"layers", "2"},
                     {.strict = true});
  auto now = values_of(*dst);
  for (const auto& [k, v] : now) {
    const bool loaded = k.rfind("layers.2.", 0) == 0;
    EXPECT_TRUE(torch::equal(v, loaded ? expected.at(k) : before.at(k))) << k;
  }
  // The same through submodule() and to_module(), from the whole tree.
  td::TensorDictBase all = td::load_memmap(dir.str("ckpt"));
  td::to_module(all.get_tensordict("bn"), *td::submodule(*dst, "bn"));
  EXPECT_TRUE(torch::equal(dst->bn->running_var, expected.at("bn.running_var")));
  EXPECT_TRUE(torch::equal(dst->fc->weight, before.at("fc.weight")));
  // The rest, one child at a time, then the root's own tensors.
  for (const auto& child : dst->named_children())
    if (all.contains(child.key())) td::to_module(all.get_tensordict(child.key()), *child.value());
  td::to_module(all.select({"scale", "steps"}), *dst);
  expect_same_values(*dst, expected);

  EXPECT_EQ(td::submodule(*dst, td::NestedKey()).get(), static_cast<torch::nn::Module*>(dst.get()));
  try {
    td::submodule(*dst, {"layers", "7"});
    FAIL() << "expected KeyError";
  } catch (const td::KeyError& e) {
    expect_message_contains(e.what(),
                            {"('layers', '7')", "'layers' has submodules ['0', '1', '2']"});
  }
}

TEST_F(Module, ErrorsNameTheKeyAndLeaveTheModuleUnchanged) {
  Net src = make_net(1);
  Net dst = make_net(2);
  const auto before = values_of(*dst);
  // A complete, valid tensordict of other values, with one bad entry added
  // last: nothing may be written, not even the valid entries before it.
  auto with_bad = [&](const td::NestedKey& key, td::Value bad) {
    td::TensorDictBase t = td::from_module(*src).clone();
    t.set(key, std::move(bad));
    return t;
  };
  auto expect_refused = [&](const td::TensorDictBase& t, auto tag,
                            std::initializer_list<const char*> needles) {
    using Expected = decltype(tag);
    try {
      td::to_module(t, *dst);
      ADD_FAILURE() << "expected an error";
    } catch (const Expected& e) {
      expect_message_contains(e.what(), needles);
    }
    expect_same_values(*dst, before);
  };
  expect_refused(with_bad({"layers", "2", "nope"}, torch::zeros({1})), td::KeyError(""),
                 {"('layers', '2', 'nope')", "parameters ['weight', 'bias']"});
  expect_refused(with_bad({"missing", "weight"}, torch::zeros({1})), td::KeyError(""),
                 {"'missing'", "submodules ['fc', 'bn', 'act', 'layers']"});
  expect_refused(with_bad({"layers", "2", "weight"}, torch::zeros({4, 2})), td::ShapeError(""),
                 {"('layers', '2', 'weight')", "expects [2, 4]", "has [4, 2]"});
  expect_refused(with_bad({"bn", "num_batches_tracked"}, torch::zeros({}, torch::kFloat)),
                 td::TypeError(""),
                 {"('bn', 'num_batches_tracked')", "torch.int64", "torch.float32"});
  expect_refused(with_bad({"fc", "weight"}, torch::zeros({4, 3}, torch::kDouble)),
                 td::TypeError(""), {"('fc', 'weight')", "torch.float64"});
  expect_refused(with_bad("fc", torch::zeros({4, 3})), td::TypeError(""),
                 {"'fc'", "is a submodule"});
  expect_refused(with_bad("scale", td::TensorDict()), td::TypeError(""),
                 {"'scale'", "parameter or buffer"});
  expect_refused(with_bad({"bn", "note"}, "text"), td::TypeError(""),
                 {"('bn', 'note')", "non-tensor"});
}

TEST_F(Module, StrictRequiresEveryTensor) {
  Net src = make_net(1);
  Net dst = make_net(2);
  const auto before = values_of(*dst);
  td::TensorDictBase partial = td::from_module(*src).exclude({{"bn", "running_var"}, "layers"});
  try {
    td::to_module(partial, *dst, {.strict = true});
    FAIL() << "expected KeyError";
  } catch (const td::KeyError& e) {
    expect_message_contains(e.what(), {"5 parameter(s) or buffer(s)", "('bn', 'running_var')",
                                       "('layers', '0', 'weight')", "('layers', '2', 'bias')"});
  }
  expect_same_values(*dst, before);
  // Without strict (Python's behaviour) a partial tensordict updates its keys only.
  td::to_module(partial, *dst);
  EXPECT_TRUE(torch::equal(dst->fc->weight, src->fc->weight));
  EXPECT_TRUE(torch::equal(dst->bn->running_var, before.at("bn.running_var")));
  // load_submodule's messages name keys from the root.
  try {
    td::load_submodule(td::TensorDict(), *dst, "layers", {.strict = true});
    FAIL() << "expected KeyError";
  } catch (const td::KeyError& e) {
    expect_message_contains(e.what(), {"the submodule 'layers'", "('layers', '0', 'weight')"});
  }
}

}  // namespace
