// TensorDictModule: a torch::nn module or a function of tensors reading and
// writing tensordicts (docs/nn.md).
#include "nn/messages.h"

#include <tensordict/errors.h>
#include <tensordict/nn/model_error.h>
#include <tensordict/nn/tensor_dict_module.h>

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <exception>

namespace tensordict::nn {

using detail::join_keys;

namespace {

std::string join(const std::vector<std::size_t>& values) {
  std::string out;
  for (auto v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

// A failure inside the wrapped module, rethrown as the tensordict error of
// the same nature where LibTorch says it (c10::TypeError, ValueError,
// IndexError), else as nn::ModelError, the error of every model of the
// component that fails while it runs (a shape the module's ops refuse, ...),
// naming the module and its keys. The original stays reachable as the nested
// exception (std::rethrow_if_nested).
[[noreturn]] void rethrow_typed(const std::string& context) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const c10::TypeError& e) {
    std::throw_with_nested(TypeError(context + e.what_without_backtrace()));
  } catch (const c10::ValueError& e) {
    std::throw_with_nested(ValueError(context + e.what_without_backtrace()));
  } catch (const c10::IndexError& e) {
    std::throw_with_nested(IndexError(context + e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    std::throw_with_nested(nn::ModelError(context + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    std::throw_with_nested(nn::ModelError(context + e.what()));
  }
}

}  // namespace

std::string TensorDictModule::module_display_name(const torch::nn::Module& module) {
  // "torch::nn::LinearImpl" -> "Linear": the name the user wrote.
  std::string name = module.name();
  if (auto pos = name.rfind("::"); pos != std::string::npos) name = name.substr(pos + 2);
  if (name.size() > 4 && name.ends_with("Impl")) name.resize(name.size() - 4);
  return "TensorDictModule(" + name + ")";
}

void TensorDictModule::check_arity(const std::vector<std::size_t>& accepted) const {
  if (function_) return;
  throw ValueError(fmt::format("{}: {} in_keys ({}) but the module takes {} tensor(s) positionally",
                               display_name(), in_keys_.size(), join_keys(in_keys_),
                               accepted.empty() ? std::string("no number of") : join(accepted)));
}

std::vector<at::Tensor> TensorDictModule::call(std::vector<at::Tensor> inputs) {
  try {
    return function_(std::move(inputs));
  } catch (...) {
    rethrow_typed(fmt::format("{} failed (in_keys: {}; out_keys: {}): ", display_name(),
                              join_keys(in_keys_), join_keys(out_keys_)));
  }
}

void TensorDictModule::forward_into(const TensorDictBase& in, TensorDictBase& out) {
  write_outputs(out, call(read_inputs(in)));
}

}  // namespace tensordict::nn
