// TensorDictSequential: modules run in order on one tensordict (docs/nn.md).
#include <tensordict/errors.h>
#include <tensordict/nn/sequential.h>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <typeinfo>

namespace tensordict::nn {

namespace {

bool contains(const std::vector<NestedKey>& keys, const NestedKey& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

const TensorDictSequential::ModuleList& checked(const TensorDictSequential::ModuleList& modules) {
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (!modules[i]) throw ValueError(fmt::format("TensorDictSequential: module {} is null", i));
  return modules;
}

// Keys read that no earlier module writes (nor an earlier module reads), in
// the order they are first read.
std::vector<NestedKey> chain_in_keys(const TensorDictSequential::ModuleList& modules) {
  std::vector<NestedKey> in, written;
  for (const auto& m : checked(modules)) {
    for (const auto& k : m->in_keys())
      if (!contains(written, k) && !contains(in, k)) in.push_back(k);
    written.insert(written.end(), m->out_keys().begin(), m->out_keys().end());
  }
  return in;
}

// Every module's out_keys, each key kept at its last occurrence.
std::vector<NestedKey> chain_out_keys(const TensorDictSequential::ModuleList& modules) {
  std::vector<NestedKey> all;
  for (const auto& m : checked(modules))
    all.insert(all.end(), m->out_keys().begin(), m->out_keys().end());
  std::vector<NestedKey> out;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (std::find(all.begin() + static_cast<std::ptrdiff_t>(i) + 1, all.end(), all[i]) == all.end())
      out.push_back(all[i]);
  return out;
}

// The exception in flight again, as the first of Types it is (most derived
// first), with `note` appended and the original as the nested exception.
template <class E, class... Rest>
[[noreturn]] void rethrow_noted(const std::exception_ptr& error, const std::string& note) {
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    std::throw_with_nested(E(e.what() + note));
  } catch (...) {
    if constexpr (sizeof...(Rest) > 0) rethrow_noted<Rest...>(error, note);
    throw;
  }
}

// The error of module i again, with the same type and a note naming i (as
// Python's add_note). A storage error keeps its own type and key path: it is
// passed on as it is.
[[noreturn]] void rethrow_with_note(std::size_t i) {
  std::exception_ptr error = std::current_exception();
  try {
    std::rethrow_exception(error);
  } catch (const StorageError&) {
    throw;
  } catch (...) {
  }
  rethrow_noted<KeyError, ValueError, ShapeError, TypeError, IndexError, LockedError, DeviceError,
                UnsupportedError, Error>(
      error, fmt::format(" (TensorDictSequential: failed while executing module '{}')", i));
}

}  // namespace

TensorDictSequential::TensorDictSequential(ModuleList modules)
    : TensorDictModuleBase("TensorDictSequential", chain_in_keys(modules), chain_out_keys(modules)),
      modules_(std::move(modules)),
      complete_out_keys_(out_keys_) {
  for (std::size_t i = 0; i < modules_.size(); ++i) register_module(std::to_string(i), modules_[i]);
}

TensorDictSequential::TensorDictSequential(ModuleList modules,
                                           std::vector<NestedKey> selected_out_keys)
    : TensorDictSequential(std::move(modules)) {
  if (!selected_out_keys.empty()) select_out_keys(std::move(selected_out_keys));
}

TensorDictSequential& TensorDictSequential::select_out_keys(std::vector<NestedKey> keys) {
  for (const auto& k : keys)
    if (!contains(out_keys_, k))
      throw ValueError(fmt::format(
          "TensorDictSequential: selected out key {} is not among the out_keys", k.repr()));
  out_keys_ = std::move(keys);
  select_before_return_ = true;
  return *this;
}

TensorDictSequential& TensorDictSequential::reset_out_keys() {
  out_keys_ = complete_out_keys_;
  select_before_return_ = false;
  return *this;
}

const std::shared_ptr<TensorDictModuleBase>& TensorDictSequential::at(std::size_t i) const {
  if (i >= modules_.size())
    throw IndexError(fmt::format("TensorDictSequential: module index {} out of range (size {})", i,
                                 modules_.size()));
  return modules_[i];
}

void TensorDictSequential::run_modules(TensorDictBase& td) const {
  for (std::size_t i = 0; i < modules_.size(); ++i) {
    try {
      modules_[i]->forward_into(td, td);
    } catch (const Error&) {
      rethrow_with_note(i);
    }
  }
}

void TensorDictSequential::forward_into(const TensorDictBase& in, TensorDictBase& out) {
  if (in.is_same(out) && !select_before_return_) {
    run_modules(out);
    return;
  }
  // The modules run on new containers over the same tensors; the result is
  // then copied into `out` under the keys it should receive.
  TensorDictBase exec = in.copy();
  run_modules(exec);
  std::vector<NestedKey> keys = out_keys_;
  if (in.is_same(out)) {
    // Selected out_keys: the input's own keys are updated too (a module may
    // have replaced one), the intermediate keys are not added.
    for (const auto& k : in.keys(true, true))
      if (!contains(keys, k)) keys.push_back(k);
  }
  if (keys.empty()) return;  // an empty keys_to_update would mean every key
  out.update(exec, UpdateOptions{.keys_to_update = std::move(keys)});
}

std::shared_ptr<TensorDictSequential> TensorDictSequential::select_subsequence(
    std::optional<std::vector<NestedKey>> in_keys,
    std::optional<std::vector<NestedKey>> out_keys) const {
  std::vector<NestedKey> available = in_keys_, needed = out_keys_;
  if (in_keys) available = std::move(*in_keys);
  if (out_keys) needed = std::move(*out_keys);
  ModuleList modules = modules_;
  std::vector<bool> keep(modules.size(), true);
  // A nested sequential is cut the same way (only an exact
  // TensorDictSequential, as Python: a subclass is kept whole).
  auto as_sequential = [](const std::shared_ptr<TensorDictModuleBase>& m) {
    return typeid(*m) == typeid(TensorDictSequential)
               ? std::static_pointer_cast<TensorDictSequential>(m)
               : nullptr;
  };
  // Forward: a module runs when everything it reads is available.
  for (std::size_t i = 0; i < modules.size(); ++i) {
    if (auto seq = as_sequential(modules[i])) {
      try {
        modules[i] = seq->select_subsequence(available, std::nullopt);
      } catch (const ValueError&) {
        keep[i] = false;  // nothing of it can run
        continue;
      }
    }
    const auto& reads = modules[i]->in_keys();
    if (std::all_of(reads.begin(), reads.end(),
                    [&](const NestedKey& k) { return contains(available, k); })) {
      const auto& writes = modules[i]->out_keys();
      available.insert(available.end(), writes.begin(), writes.end());
    } else {
      keep[i] = false;
    }
  }
  // Backward: a module is needed when it writes a key still needed.
  for (std::size_t j = modules.size(); j-- > 0;) {
    if (!keep[j]) continue;
    const auto& writes = modules[j]->out_keys();
    if (std::none_of(writes.begin(), writes.end(),
                     [&](const NestedKey& k) { return contains(needed, k); })) {
      keep[j] = false;
      continue;
    }
    if (auto seq = as_sequential(modules[j]))
      modules[j] = seq->select_subsequence(std::nullopt, needed);
    const auto& reads = modules[j]->in_keys();
    needed.insert(needed.end(), reads.begin(), reads.end());
  }
  ModuleList kept;
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (keep[i]) kept.push_back(modules[i]);
  if (kept.empty())
    throw ValueError(
        "TensorDictSequential.select_subsequence: no modules left after selection; make sure "
        "that in_keys and out_keys are coherent");
  return std::make_shared<TensorDictSequential>(std::move(kept));
}

}  // namespace tensordict::nn
