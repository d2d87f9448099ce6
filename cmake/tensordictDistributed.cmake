# tensordict::distributed (-DTENSORDICT_WITH_DISTRIBUTED=ON): send/recv and
# collectives of whole tensordicts over a c10d process group. Included by the
# top-level CMakeLists.txt after the core target exists. Not a storage: an
# ordinary library linked to tensordict and LibTorch's c10d, installed and
# exported as the package component `distributed`
# (find_package(tensordict COMPONENTS distributed)). See docs/distributed.md.
#
# Also defines tensordict_gloo (not installed): what a program needs to build
# a ProcessGroupGloo itself (USE_C10D_GLOO and the Gloo headers of
# libgloo-dev), used by the tests and benchmarks.

include(CheckCXXSourceCompiles)
include(CMakePushCheckState)

cmake_push_check_state(RESET)
set(CMAKE_REQUIRED_LIBRARIES torch)
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
int main(int argc, char**) {
  c10d::ProcessGroup* pg = nullptr;
  std::vector<at::Tensor> v;
  if (argc > 5) pg->send(v, 0, 0)->wait();
  return 0;
}]] TENSORDICT_HAVE_C10D)
cmake_pop_check_state()
if(NOT TENSORDICT_HAVE_C10D)
  message(FATAL_ERROR "TENSORDICT_WITH_DISTRIBUTED=ON: the LibTorch found at '${Torch_DIR}' "
          "has no usable c10d (torch/csrc/distributed/c10d/ProcessGroup.hpp does not compile "
          "and link). Use a LibTorch built with USE_DISTRIBUTED=1 (Debian 12's libtorch-dev "
          "is), or configure with -DTENSORDICT_WITH_DISTRIBUTED=OFF.")
endif()

# Gloo, for programs that create a ProcessGroupGloo (tests, benchmarks,
# examples); the library itself needs only the ProcessGroup interface.
find_path(TENSORDICT_GLOO_INCLUDE_DIR gloo/config.h)
find_library(TENSORDICT_GLOO_LIBRARY gloo)
if(TENSORDICT_GLOO_INCLUDE_DIR AND TENSORDICT_GLOO_LIBRARY)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_LIBRARIES torch ${TENSORDICT_GLOO_LIBRARY})
  set(CMAKE_REQUIRED_INCLUDES ${TENSORDICT_GLOO_INCLUDE_DIR})
  set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_GLOO)
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
int main(int argc, char**) {
  if (argc > 5) return c10d::ProcessGroupGloo::createDefaultDevice() != nullptr;
  return 0;
}]] TENSORDICT_HAVE_C10D_GLOO)
  cmake_pop_check_state()
endif()
if(NOT TENSORDICT_HAVE_C10D_GLOO)
  message(FATAL_ERROR "TENSORDICT_WITH_DISTRIBUTED=ON: c10d::ProcessGroupGloo does not compile "
          "against the LibTorch at '${Torch_DIR}' (Gloo headers: '${TENSORDICT_GLOO_INCLUDE_DIR}', "
          "library: '${TENSORDICT_GLOO_LIBRARY}'). On Debian 12 install libgloo-dev "
          "(scripts/install-deps.sh does), or configure with -DTENSORDICT_WITH_DISTRIBUTED=OFF.")
endif()
message(STATUS "tensordict: distributed component with c10d and Gloo")

add_library(tensordict_gloo INTERFACE)
target_compile_definitions(tensordict_gloo INTERFACE USE_C10D_GLOO)
target_include_directories(tensordict_gloo INTERFACE ${TENSORDICT_GLOO_INCLUDE_DIR})
target_link_libraries(tensordict_gloo INTERFACE torch ${TENSORDICT_GLOO_LIBRARY})

# One file per part (docs/architecture.md): the structure and flat buffer
# (layout), the group's messages (channel), the buffer pool, the listening
# receive, the two point-to-point protocols and the collectives.
add_library(tensordict_distributed
  src/distributed/buffers.cpp
  src/distributed/channel.cpp
  src/distributed/collectives.cpp
  src/distributed/eager.cpp
  src/distributed/layout.cpp
  src/distributed/listening.cpp
  src/distributed/point_to_point.cpp)
add_library(tensordict::distributed ALIAS tensordict_distributed)
set_target_properties(tensordict_distributed PROPERTIES
  EXPORT_NAME distributed
  OUTPUT_NAME tensordict_distributed
  POSITION_INDEPENDENT_CODE ON
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR})
target_link_libraries(tensordict_distributed PUBLIC tensordict torch)
target_include_directories(tensordict_distributed PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tensordict_distributed PRIVATE
  $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wno-unused-parameter>)

install(TARGETS tensordict_distributed EXPORT tensordict-distributed-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT tensordict-distributed-targets NAMESPACE tensordict::
  DESTINATION ${TENSORDICT_INSTALL_CMAKEDIR})
