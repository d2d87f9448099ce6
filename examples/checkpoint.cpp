// Checkpointing a torch::nn::Module with tensordict: from_module -> memmap to
// save, load_memmap -> to_module to restore (the whole module, or one
// submodule at a time), next to torch::save / torch::load of the same module.
//
//   checkpoint                     a 0.7 MB model (what CTest runs)
//   checkpoint --size 100mb        a 101 MB model (25.3 M float32 parameters)
//   checkpoint --dir /dev/shm/x    where the checkpoints go (default: a fresh
//                                  directory under the system temp dir, removed)
#include <tensordict/module.h>
#include <tensordict/tensordict.h>

#include <torch/serialize.h>

#include "checkpoint_model.h"
#include "example_support.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {

double time_ms(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

example::Transformer make_model(const example::ModelSize& size, uint64_t seed) {
  torch::manual_seed(seed);
  return example::Transformer(size);
}

// Same keys, shapes, dtypes and values.
bool same_weights(const example::Transformer& a, const example::Transformer& b) {
  return td::from_module(*a).equal(td::from_module(*b));
}

void report(const char* what, double ms, double mb) {
  std::printf("  %-44s %9.1f ms  %8.0f MB/s\n", what, ms, mb / (ms / 1000.0));
}

}  // namespace

int main(int argc, char** argv) {
  std::string size_name = "small";
  std::optional<fs::path> dir_arg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--size" && i + 1 < argc)
      size_name = argv[++i];
    else if (a == "--dir" && i + 1 < argc)
      dir_arg = argv[++i];
    else {
      std::cerr << "usage: checkpoint [--size small|100mb] [--dir DIR]\n";
      return 2;
    }
  }
  const example::ModelSize size = example::model_size(size_name);
  example::TempDir tmp("checkpoint");
  const fs::path dir = dir_arg ? *dir_arg : tmp.path;
  const fs::path td_dir = dir / "model.td";   // the memmap checkpoint (a directory)
  const fs::path pt_file = dir / "model.pt";  // torch::save's archive
  fs::create_directories(dir);
  fs::remove_all(td_dir);

  example::Transformer model = make_model(size, 1);
  // The module's parameters and buffers, nested by submodule and sharing their
  // storage: {"blocks", "0", "qkv", "weight"} is model->blocks[0]->qkv->weight.
  td::TensorDict params = td::from_module(*model);
  int64_t bytes = 0;
  std::size_t leaves = 0;
  for (const auto& v : params.values(/*include_nested=*/true, /*leaves_only=*/true)) {
    bytes += static_cast<int64_t>(v.tensor().nbytes());
    ++leaves;
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("model '%s': %.1f MB in %zu tensors (%zu blocks); checkpoints in %s\n",
              size_name.c_str(), mb, leaves, static_cast<std::size_t>(size.blocks),
              dir.string().c_str());
  bool ok = true;
  ok &= example::check(params.get({"blocks", "0", "qkv", "weight"}).data_ptr() ==
                           model->blocks[0]->as<example::Block>()->qkv->weight.data_ptr(),
                       "from_module shares storage with the module");

  // ---- save: one file per parameter, one directory per submodule --------------
  double save_ms = time_ms([&] { params.memmap(td_dir.string()); });
  ok &= example::check(fs::exists(td_dir / "blocks" / "0" / "qkv" / "weight.memmap"),
                       "blocks.0.qkv.weight saved as blocks/0/qkv/weight.memmap");

  // ---- load the whole module into a differently initialised model -------------
  example::Transformer whole = make_model(size, 2);
  ok &= example::check(!same_weights(model, whole), "a fresh model differs");
  double load_ms =
      time_ms([&] { td::to_module(td::load_memmap(td_dir.string()), *whole, {.strict = true}); });
  ok &= example::check(same_weights(model, whole), "load_memmap + to_module restores every tensor");

  // ---- zero-copy: the module mapped copy-on-write from the files ---------------
  // Nothing is read until a parameter is used; updates stay in memory.
  example::Transformer mapped = make_model(size, 5);
  double mapped_ms = time_ms([&] {
    td::to_module(td::load_memmap(td_dir.string(), {.writable = false}), *mapped,
                  {.strict = true, .share_storage = true});
  });
  ok &= example::check(td::MemoryMappedTensor::is_memory_mapped(
                           mapped->blocks[0]->as<example::Block>()->qkv->weight),
                       "share_storage: the layer's own weight is mapped from its file");
  ok &= example::check(same_weights(model, mapped), "share_storage restores every tensor");

  // ---- load one submodule at a time ----------------------------------------------
  // Each submodule is a directory of its own: load_memmap of that directory
  // reads only its files.
  example::Transformer parts = make_model(size, 3);
  std::vector<td::NestedKey> paths = {{"tok"}, {"pos"}, {"ln_f"}};
  for (int64_t i = 0; i < size.blocks; ++i) paths.push_back({"blocks", std::to_string(i)});
  double parts_ms = 0;
  for (const auto& path : paths) {
    fs::path sub_dir = td_dir;
    for (const auto& part : path) sub_dir /= part;
    parts_ms += time_ms([&] {
      td::load_submodule(td::load_memmap(sub_dir.string()), *parts, path, {.strict = true});
    });
    // That submodule is restored; the others are untouched so far.
    ok &= example::check(
        td::from_module(*td::submodule(*parts, path)).equal(params.get_tensordict(path)),
        "one submodule restored");
  }
  // What remains is the root's own buffer (position_ids): to_module of the
  // root's tensor entries only.
  td::to_module(td::load_memmap(td_dir.string()).exclude({"tok", "pos", "blocks", "ln_f"}), *parts);
  ok &= example::check(same_weights(model, parts), "per-submodule loading restores every tensor");

  // The restored model computes the same function.
  at::Tensor ids = at::randint(size.vocab, {2, std::min<int64_t>(size.context, 16)});
  {
    torch::NoGradGuard no_grad;
    ok &= example::check(at::equal(model->forward(ids), whole->forward(ids)),
                         "same output after loading");
  }

  // ---- the same with torch::save / torch::load -------------------------------------
  double torch_save_ms = time_ms([&] { torch::save(model, pt_file.string()); });
  example::Transformer from_pt = make_model(size, 4);
  double torch_load_ms = time_ms([&] { torch::load(from_pt, pt_file.string()); });
  ok &= example::check(same_weights(model, from_pt), "torch::load restores every tensor");

  std::printf(
      "one run each (first touch of the files included; bench_checkpoint measures medians):\n");
  report("save: from_module + memmap", save_ms, mb);
  report("save: torch::save", torch_save_ms, mb);
  report("load whole: load_memmap + to_module", load_ms, mb);
  std::printf("  %-44s %9.1f ms  (pages read on first use)\n",
              "load zero-copy: load_memmap + share_storage", mapped_ms);
  std::printf("  %-44s %9.1f ms  (%zu loads)\n", "load per submodule: load_memmap + load_submodule",
              parts_ms, paths.size());
  report("load: torch::load", torch_load_ms, mb);

  // ---- error paths leave the module unchanged ---------------------------------------
  td::TensorDictBase bad = td::from_module(*model).clone();
  bad.set({"blocks", "0", "qkv", "weight"}, at::zeros({1, 1}));
  try {
    td::to_module(bad, *whole);
    ok &= example::check(false, "a wrong shape is refused");
  } catch (const td::ShapeError& e) {
    std::cout << "refused as expected: " << e.what() << "\n";
  }
  ok &= example::check(same_weights(model, whole), "a refused load writes nothing");

  if (!ok) return 1;
  std::cout << "all checks passed\n";
  return 0;
}
