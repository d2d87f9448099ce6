# tensordict::nn (-DTENSORDICT_WITH_NN=ON, the default): modules that read and
# write tensordicts (TensorDictModule, TensorDictSequential), TorchScript and
# AOTInductor models driven through tensordicts, and the batching runner.
# Needs nothing but LibTorch; the AOTInductor part only where the LibTorch has
# the package loader (2.6 and later). Installed and exported as the package
# component `nn` (find_package(tensordict COMPONENTS nn)). See docs/nn.md.

tensordict_torch_check_compiles(TENSORDICT_HAVE_AOTI [[
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
int main(int argc, char** argv) {
  if (argc > 5) {
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);
    return static_cast<int>(loader.get_call_spec().size());
  }
  return 0;
}]])

tensordict_add_library_component(tensordict_nn nn
  src/nn/tensor_dict_module_base.cpp
  src/nn/batching_runner.cpp
  src/nn/ivalue.cpp
  src/nn/script_module.cpp
  src/nn/sequential.cpp
  src/nn/tensor_dict_module.cpp)
target_link_libraries(tensordict_nn PRIVATE $<BUILD_INTERFACE:fmt::fmt-header-only>)
if(TENSORDICT_SANITIZE MATCHES "undefined|vptr")
  # UBSan's vptr check makes each downcast of a c10::Type (TypePtr::cast<>)
  # reference the target's typeinfo, and LibTorch does not export
  # c10::DynamicType's: the link fails. The check is off for the one file that
  # walks IValue types; ASan and the rest of UBSan still cover it.
  set_source_files_properties(src/nn/ivalue.cpp PROPERTIES COMPILE_OPTIONS -fno-sanitize=vptr)
endif()
if(TENSORDICT_HAVE_AOTI)
  # Users of the installed package see it too: tensordict/nn/aoti_module.h needs it.
  target_compile_definitions(tensordict_nn PUBLIC TENSORDICT_HAVE_AOTI=1)
  target_sources(tensordict_nn PRIVATE src/nn/aoti_module.cpp)
  message(STATUS "tensordict: nn component, with AOTInductor packages")
else()
  message(STATUS "tensordict: nn component, without AOTInductor (this LibTorch has no "
                 "AOTIModelPackageLoader)")
endif()

# Where the test nn.make_models (tests/nn/CMakeLists.txt, fixture nn_models)
# writes the models Python exports: the tests and the examples' policy actors
# read them there.
set(TENSORDICT_NN_MODELS_DIR ${PROJECT_BINARY_DIR}/tests/nn/models)
