# tensordict::distributed (-DTENSORDICT_WITH_DISTRIBUTED=ON): send/recv and
# collectives of whole tensordicts over a c10d process group. Included by the
# top-level CMakeLists.txt after the core target exists. Not a storage: an
# ordinary library linked to tensordict and LibTorch's c10d, installed and
# exported as the package component `distributed`
# (find_package(tensordict COMPONENTS distributed)). See docs/distributed.md.
#
# The library needs c10d's ProcessGroup interface only, never Gloo. The tests
# and the benchmark build a Gloo group themselves, in one source file
# (tests/support/gloo_group.cpp, target tensordict_gloo, not installed), which
# includes ProcessGroupGloo.hpp and so needs Gloo's headers to compile; see
# docs/distributed.md, "Gloo headers", for why those may come from another
# Gloo than the one inside LibTorch, and what is checked.

tensordict_torch_check_compiles(TENSORDICT_HAVE_C10D [[
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
int main(int argc, char**) {
  c10d::ProcessGroup* pg = nullptr;
  std::vector<at::Tensor> v;
  if (argc > 5) pg->send(v, 0, 0)->wait();
  return 0;
}]])
if(NOT TENSORDICT_HAVE_C10D)
  message(FATAL_ERROR "TENSORDICT_WITH_DISTRIBUTED=ON: the LibTorch found at '${Torch_DIR}' "
          "has no usable c10d (torch/csrc/distributed/c10d/ProcessGroup.hpp does not compile "
          "and link; the log is in CMakeFiles/CMakeConfigureLog.yaml). Use a LibTorch built "
          "with USE_DISTRIBUTED=1 (the wheel, the libtorch download and Debian's libtorch-dev "
          "are), or configure with -DTENSORDICT_WITH_DISTRIBUTED=OFF.")
endif()

# ---- tensordict_gloo: a Gloo group for the tests and the benchmark -----------
# Gloo's headers compile tests/support/gloo_group.cpp only; no libgloo is
# linked: the one Gloo in the process is LibTorch's (inside libtorch_cpu.so
# for the wheel and the download, Debian's shared libgloo for its package).
if(TENSORDICT_BUILD_TESTS OR TENSORDICT_BUILD_BENCHMARKS)
  find_path(TENSORDICT_GLOO_INCLUDE_DIR gloo/config.h
            DOC "Gloo's headers, for the tests' ProcessGroupGloo (docs/distributed.md)")
  set(_td_gloo_check [[
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
int main(int argc, char**) {
  if (argc > 5) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1") != nullptr;
  return 0;
}]])
  if(TENSORDICT_GLOO_INCLUDE_DIR)
    tensordict_torch_check_compiles(TENSORDICT_HAVE_C10D_GLOO "${_td_gloo_check}"
                                    INCLUDES ${TENSORDICT_GLOO_INCLUDE_DIR})
  endif()
  if(NOT TENSORDICT_HAVE_C10D_GLOO)
    message(FATAL_ERROR "TENSORDICT_WITH_DISTRIBUTED=ON with tests or benchmarks: "
            "c10d::ProcessGroupGloo does not compile against the LibTorch at '${Torch_DIR}' "
            "with the Gloo headers at '${TENSORDICT_GLOO_INCLUDE_DIR}' (the log is in "
            "CMakeFiles/CMakeConfigureLog.yaml). Install libgloo-dev (scripts/install-deps.sh "
            "does) or pass -DTENSORDICT_GLOO_INCLUDE_DIR=<Gloo headers>, or build without "
            "tests and benchmarks (-DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_BENCHMARKS=OFF).")
  endif()
  # ProcessGroup's constructor took Options in 2.0 to 2.5 (then
  # setDefaultBackend came): checked, since the change did not follow a tag.
  tensordict_torch_check_compiles(TENSORDICT_PROCESS_GROUP_HAS_OPTIONS [[
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
int main() {
  auto o = c10::make_intrusive<c10d::ProcessGroup::Options>("gloo", std::chrono::seconds(1));
  return o ? 0 : 1;
}]])
  add_library(tensordict_gloo STATIC ${PROJECT_SOURCE_DIR}/tests/support/gloo_group.cpp)
  target_include_directories(tensordict_gloo PUBLIC ${PROJECT_SOURCE_DIR}/tests)
  target_include_directories(tensordict_gloo SYSTEM PRIVATE ${TENSORDICT_GLOO_INCLUDE_DIR})
  target_compile_definitions(tensordict_gloo PRIVATE
    TENSORDICT_PROCESS_GROUP_HAS_OPTIONS=$<BOOL:${TENSORDICT_PROCESS_GROUP_HAS_OPTIONS}>)
  target_link_libraries(tensordict_gloo PUBLIC torch)
  message(STATUS "tensordict: distributed component; tests build Gloo groups with the Gloo "
                 "headers at ${TENSORDICT_GLOO_INCLUDE_DIR}")
else()
  message(STATUS "tensordict: distributed component")
endif()

# One file per part (docs/architecture.md): the structure and flat buffer
# (layout), the group's messages (channel), the buffer pool, the listening
# receive, the two point-to-point protocols, Python's wire and the collectives.
tensordict_add_library_component(tensordict_distributed distributed
  src/distributed/buffers.cpp
  src/distributed/channel.cpp
  src/distributed/collectives.cpp
  src/distributed/eager.cpp
  src/distributed/layout.cpp
  src/distributed/listening.cpp
  src/distributed/point_to_point.cpp
  src/distributed/python_wire.cpp)
