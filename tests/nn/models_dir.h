#pragma once
// Where tests/nn/python/make_models.py wrote the models and reference outputs
// in this CTest run (the nn_models fixture sets TENSORDICT_NN_MODELS).
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace nn_test {

inline std::string models_dir() {
  const char* dir = std::getenv("TENSORDICT_NN_MODELS");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "TENSORDICT_NN_MODELS is not set: run these tests through ctest (the "
                     "nn_models fixture writes the models)";
    return "TENSORDICT_NN_MODELS-unset";
  }
  return dir;
}

inline std::string model_path(const std::string& file) { return models_dir() + "/" + file; }

/// A file Python wrote with torch.save, as an IValue.
inline c10::IValue load_pickle(const std::string& file) {
  std::ifstream in(model_path(file), std::ios::binary);
  EXPECT_TRUE(in.good()) << model_path(file);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes);
}

/// NAME_ref.pt: the {str: tensor} dict of inputs and outputs Python computed.
inline std::map<std::string, at::Tensor> load_reference(const std::string& name) {
  std::map<std::string, at::Tensor> ref;
  for (const auto& entry : load_pickle(name + "_ref.pt").toGenericDict()) {
    ref.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return ref;
}

/// The message of what `fn` throws ("no exception" when it returns).
inline std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace nn_test
