#pragma once
/// @file nn/model_error.h
/// ModelError: a model of tensordict::nn failed while it ran (the TorchScript
/// interpreter raised, or an AOTInductor package's runtime failed). The
/// message names the module and carries the runtime's own message. Errors
/// found before the model runs (a missing key, a wrong dtype or shape) are the
/// usual KeyError, TypeError and ShapeError.

#include <tensordict/errors.h>

namespace tensordict::nn {

class ModelError : public Error {
 public:
  using Error::Error;
};

}  // namespace tensordict::nn
