#pragma once
/// @file nn/tensor_dict_module.h
/// TensorDictModule (component `nn`, docs/nn.md): a torch::nn module, or a
/// plain function of tensors, that reads its inputs from a tensordict and
/// writes its outputs into it (Python's tensordict.nn.TensorDictModule).
///
///     auto mlp = torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::ReLU(),
///                                      torch::nn::Linear(64, 2));
///     auto policy = std::make_shared<tensordict::nn::TensorDictModule>(
///         mlp, std::vector<NestedKey>{"observation"}, std::vector<NestedKey>{"action_value"});
///     data = (*policy)(data);     // data["action_value"] = mlp(data["observation"])
///
/// The wrapped module is registered as the submodule "module" (Python's
/// attribute name): parameters(), to(), train()/eval() and from_module() /
/// to_module() go through the wrapper. Its forward() is found at compile time:
/// it takes in_keys().size() tensors positionally (checked at construction,
/// ValueError) and returns an at::Tensor, a std::tuple of them or a
/// std::vector of them.
///
/// The module is a plain class used through std::shared_ptr (no
/// TORCH_MODULE holder): every consumer of the component (TensorDictSequential,
/// the batching runner) takes std::shared_ptr<TensorDictModuleBase>, which a
/// std::shared_ptr<TensorDictModule> converts to.

#include <tensordict/nn/tensor_dict_module_base.h>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace tensordict::nn {

/// A function of tensors, as TensorDictModule calls it: the inputs in
/// in_keys() order, the outputs in out_keys() order.
using TensorFunction = std::function<std::vector<at::Tensor>(std::vector<at::Tensor>)>;

}  // namespace tensordict::nn

// In the core's detail namespace: a tensordict::nn::detail would hide it from
// every file of the component that says detail::.
namespace tensordict::detail {

/// The most tensors a module's forward() may take positionally.
inline constexpr std::size_t kMaxForwardArity = 8;

template <class R>
inline constexpr bool kDependentFalse = false;

/// A forward() result as the outputs in order.
template <class R>
std::vector<at::Tensor> as_outputs(R&& result) {
  using T = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return {std::forward<R>(result)};
  } else if constexpr (std::is_same_v<T, std::vector<at::Tensor>>) {
    return std::forward<R>(result);
  } else if constexpr (requires { std::tuple_size<T>::value; }) {
    return std::apply(
        [](auto&&... parts) {
          static_assert(
              (std::is_same_v<std::remove_cvref_t<decltype(parts)>, at::Tensor> && ...),
              "TensorDictModule: a module returning a tuple must return a tuple of tensors");
          return std::vector<at::Tensor>{std::forward<decltype(parts)>(parts)...};
        },
        std::forward<R>(result));
  } else {
    static_assert(kDependentFalse<T>,
                  "TensorDictModule: forward() must return an at::Tensor, a std::tuple of "
                  "tensors or a std::vector<at::Tensor>");
  }
}

/// Whether `f` takes N tensors (as call_positional passes them).
template <class F, std::size_t... I>
constexpr bool callable_with(std::index_sequence<I...>) {
  return requires(F & f) { f(((void)I, std::declval<at::Tensor>())...); };
}

/// Calls `f` with the N inputs positionally.
template <std::size_t N, class F>
std::vector<at::Tensor> call_positional(F& f, std::vector<at::Tensor>& in) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return as_outputs(f(std::move(in[I])...));
  }
  (std::make_index_sequence<N>{});
}

/// A TensorFunction calling `f` with `arity` tensors; empty when `f` cannot
/// take that many (the constructor reports the arities it can take).
template <class F>
nn::TensorFunction positional(F f, std::size_t arity, std::vector<std::size_t>& accepted) {
  nn::TensorFunction out;
  [&]<std::size_t... N>(std::index_sequence<N...>) {
    (
        [&] {
          if constexpr (callable_with<F>(std::make_index_sequence<N>{})) {
            accepted.push_back(N);
            if (N == arity) {
              out = [f](std::vector<at::Tensor> in) mutable { return call_positional<N>(f, in); };
            }
          }
        }(),
        ...);
  }
  (std::make_index_sequence<kMaxForwardArity + 1>{});
  return out;
}

/// `module->forward` as a callable.
template <class M>
struct ForwardOf {
  std::shared_ptr<M> module;
  template <class... T>
  requires requires(M& m, T&&... args) { m.forward(std::forward<T>(args)...); }
  decltype(auto) operator()(T&&... t) { return module->forward(std::forward<T>(t)...); }
};

template <class H>
concept ModuleHolderType = requires {
  typename H::ContainedType;
}
&&std::is_base_of_v<torch::nn::ModuleHolder<typename H::ContainedType>, H>;

}  // namespace tensordict::detail

namespace tensordict::nn {

class TensorDictModule : public TensorDictModuleBase {
 public:
  /// Wraps a module given as std::shared_ptr (a torch::nn::Module subclass
  /// with a forward() of tensors). ValueError when forward() cannot take
  /// in_keys.size() tensors.
  template <class M>
  requires std::is_base_of_v<torch::nn::Module, M> TensorDictModule(std::shared_ptr<M> module,
                                                                    std::vector<NestedKey> in_keys,
                                                                    std::vector<NestedKey> out_keys)
      : TensorDictModuleBase(module_display_name(*module), std::move(in_keys),
                             std::move(out_keys)) {
    std::vector<std::size_t> accepted;
    function_ = detail::positional(detail::ForwardOf<M>{module}, in_keys_.size(), accepted);
    check_arity(accepted);
    module_ = register_module("module", std::shared_ptr<torch::nn::Module>(std::move(module)));
  }

  /// Wraps a module holder (torch::nn::Linear, a TORCH_MODULE holder).
  template <detail::ModuleHolderType H>
  TensorDictModule(const H& holder, std::vector<NestedKey> in_keys, std::vector<NestedKey> out_keys)
      : TensorDictModule(holder.ptr(), std::move(in_keys), std::move(out_keys)) {}

  /// Wraps a plain function of tensors (Python accepts any callable); `name`
  /// names it in errors. Either a TensorFunction (any number of inputs), or
  /// a callable taking in_keys.size() tensors and returning a tensor, a tuple
  /// or a vector of them.
  template <class F>
  requires(!std::is_base_of_v<torch::nn::Module, F> && !detail::ModuleHolderType<F>)
      TensorDictModule(std::string name, F function, std::vector<NestedKey> in_keys,
                       std::vector<NestedKey> out_keys)
      : TensorDictModuleBase("TensorDictModule(" + name + ")", std::move(in_keys),
                             std::move(out_keys)) {
    if constexpr (std::is_invocable_r_v<std::vector<at::Tensor>, F, std::vector<at::Tensor>>) {
      function_ = TensorFunction(std::move(function));
    } else {
      std::vector<std::size_t> accepted;
      function_ = detail::positional(std::move(function), in_keys_.size(), accepted);
      check_arity(accepted);
    }
  }

  /// Reads in_keys() from `in`, calls the module, writes out_keys() into
  /// `out`. A LibTorch error inside the module is rethrown typed, naming
  /// the module and its keys; nothing is written then.
  void forward_into(const TensorDictBase& in, TensorDictBase& out) override;

  /// The wrapped module; null for a plain function.
  const std::shared_ptr<torch::nn::Module>& module() const noexcept { return module_; }

  /// Calls the module on tensors (no tensordict): what forward_into runs.
  std::vector<at::Tensor> call(std::vector<at::Tensor> inputs);

  using TensorDictModuleBase::forward;

 private:
  static std::string module_display_name(const torch::nn::Module& module);
  void check_arity(const std::vector<std::size_t>& accepted) const;

  TensorFunction function_;
  std::shared_ptr<torch::nn::Module> module_;
};

}  // namespace tensordict::nn
