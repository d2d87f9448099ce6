# Finds LibTorch and checks that what was found is one LibTorch, and one the
# build supports. Included by the top-level CMakeLists.txt. See
# docs/getting_started.md, "Getting LibTorch".
#
# Point CMake at a LibTorch with -DCMAKE_PREFIX_PATH=<prefix> (the `torch`
# folder of the wheel in site-packages, an unpacked libtorch download) or
# -DTorch_DIR=<prefix>/share/cmake/Torch; without either, a distribution's
# LibTorch in the system prefix (Debian's libtorch-dev).
#
# Defines:
#   TENSORDICT_TORCH_VERSION      e.g. 2.13.0
#   TENSORDICT_TORCH_CXX11_ABI    ON or OFF (_GLIBCXX_USE_CXX11_ABI of LibTorch)
#   tensordict_torch_check_compiles(<var> <source> [INCLUDES ...] [LIBRARIES ...])
#       try_compile + link of <source> with LibTorch's flags, include
#       directories, definitions and libraries given explicitly (try_compile
#       cannot re-export LibTorch 2.x's targets: Caffe2Config.cmake aliases
#       protobuf::libprotobuf to a plain `dummy` target).

# TorchConfig.cmake finds its Caffe2 package with PATHS, searched after the
# system prefix: with -DTorch_DIR=<a wheel> and a distribution's LibTorch in
# /usr, it would import the distribution's targets. Its own comes first.
if(Torch_DIR AND NOT Caffe2_DIR AND EXISTS "${Torch_DIR}/../Caffe2/Caffe2Config.cmake")
  get_filename_component(Caffe2_DIR "${Torch_DIR}/../Caffe2" REALPATH)
endif()
find_package(Torch REQUIRED)
get_filename_component(_td_torch_cmake "${Torch_DIR}/.." REALPATH)
get_filename_component(_td_caffe2_cmake "${Caffe2_DIR}/.." REALPATH)
if(NOT _td_torch_cmake STREQUAL _td_caffe2_cmake)
  message(FATAL_ERROR "tensordict: two LibTorch installations are mixed: Torch from '${Torch_DIR}' "
          "but its Caffe2 targets from '${Caffe2_DIR}'. Configure in a fresh build directory "
          "with -DCMAKE_PREFIX_PATH=<the LibTorch prefix> or -DCaffe2_DIR=<beside Torch_DIR>.")
endif()

# The version, from the headers (TorchConfigVersion.cmake is absent from some
# distributions' packages): torch/headeronly/version.h in 2.9 and later,
# torch/version.h of the C++ API before.
set(TENSORDICT_TORCH_VERSION "")
foreach(_td_dir IN LISTS TORCH_INCLUDE_DIRS)
  foreach(_td_file IN ITEMS torch/headeronly/version.h torch/csrc/api/include/torch/version.h)
    if(NOT TENSORDICT_TORCH_VERSION AND EXISTS "${_td_dir}/${_td_file}")
      file(STRINGS "${_td_dir}/${_td_file}" _td_lines REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
      if(_td_lines MATCHES "MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+)")
        set(TENSORDICT_TORCH_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
      endif()
    endif()
  endforeach()
endforeach()
if(NOT TENSORDICT_TORCH_VERSION)
  message(FATAL_ERROR "tensordict: cannot read the LibTorch version from torch/version.h "
          "under '${TORCH_INCLUDE_DIRS}' (Torch_DIR '${Torch_DIR}').")
endif()
if(TENSORDICT_TORCH_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "tensordict: LibTorch ${TENSORDICT_TORCH_VERSION} at '${Torch_DIR}' is too "
          "old; supported are 2.x (built and tested with 2.13) and 1.13 (docs/getting_started.md).")
endif()

if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  set(TENSORDICT_TORCH_CXX11_ABI OFF)
else()
  set(TENSORDICT_TORCH_CXX11_ABI ON)
endif()

# The LibTorch whose targets were imported must be the one whose libraries
# link. TorchConfig.cmake looks for libtorch and libc10 in the system
# directories before its own: with a distribution's LibTorch installed beside
# the wheel (found through torch.utils.cmake_prefix_path), it reports the
# system's files, and TORCH_LIBRARIES mixes two LibTorch versions. Those two
# are found again beside torch_cpu, the target's own library.
get_target_property(_td_torch_cpu_configs torch_cpu IMPORTED_CONFIGURATIONS)
set(_td_torch_cpu_location "")
foreach(_td_config IN LISTS _td_torch_cpu_configs)
  get_target_property(_td_torch_cpu_location torch_cpu IMPORTED_LOCATION_${_td_config})
  if(_td_torch_cpu_location)
    break()
  endif()
endforeach()
if(NOT _td_torch_cpu_location)
  get_target_property(_td_torch_cpu_location torch_cpu IMPORTED_LOCATION)
endif()
get_filename_component(_td_torch_cpu_dir "${_td_torch_cpu_location}" DIRECTORY)
get_filename_component(_td_torch_cpu_dir "${_td_torch_cpu_dir}" REALPATH)
foreach(_td_lib IN ITEMS torch c10)
  set(_td_var ${_td_lib}_LIBRARY)
  if(_td_lib STREQUAL "torch")
    set(_td_var TORCH_LIBRARY)
  endif()
  if(NOT ${_td_var})
    continue()
  endif()
  get_filename_component(_td_dir "${${_td_var}}" DIRECTORY)
  get_filename_component(_td_dir "${_td_dir}" REALPATH)
  if(NOT _td_dir STREQUAL _td_torch_cpu_dir)
    set(_td_wrong "${${_td_var}}")
    find_library(_td_right ${_td_lib} PATHS "${_td_torch_cpu_dir}" NO_DEFAULT_PATH NO_CACHE)
    if(NOT _td_right)
      message(FATAL_ERROR "tensordict: two LibTorch installations are mixed: the targets of "
              "'${Torch_DIR}' link '${_td_torch_cpu_location}', but lib${_td_lib} was found at "
              "'${_td_wrong}' and not beside it. Configure in a fresh build directory with "
              "-DCMAKE_PREFIX_PATH=<the LibTorch prefix, the folder holding lib/ and share/>.")
    endif()
    set(${_td_var} "${_td_right}" CACHE FILEPATH "lib${_td_lib} of the LibTorch at ${Torch_DIR}" FORCE)
    list(FIND TORCH_LIBRARIES "${_td_wrong}" _td_at)
    if(_td_at GREATER_EQUAL 0)
      list(REMOVE_AT TORCH_LIBRARIES ${_td_at})
      list(INSERT TORCH_LIBRARIES ${_td_at} "${_td_right}")
    endif()
    message(STATUS "tensordict: lib${_td_lib} taken from ${_td_torch_cpu_dir}, not ${_td_dir}")
    unset(_td_right)
  endif()
endforeach()
set(TENSORDICT_TORCH_LIBRARY_FILES "${TORCH_LIBRARY}" "${_td_torch_cpu_location}")
if(c10_LIBRARY)
  list(APPEND TENSORDICT_TORCH_LIBRARY_FILES "${c10_LIBRARY}")
endif()
get_target_property(TENSORDICT_TORCH_DEFINITIONS torch_cpu INTERFACE_COMPILE_DEFINITIONS)
if(NOT TENSORDICT_TORCH_DEFINITIONS)
  set(TENSORDICT_TORCH_DEFINITIONS "")
endif()

message(STATUS "tensordict: LibTorch ${TENSORDICT_TORCH_VERSION} (C++11 ABI: "
               "${TENSORDICT_TORCH_CXX11_ABI}) from ${_td_torch_cpu_dir}")

function(tensordict_torch_check_compiles var source)
  if(DEFINED ${var})
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "" "INCLUDES;LIBRARIES")
  set(_defs ${TORCH_CXX_FLAGS})
  foreach(_d IN LISTS TENSORDICT_TORCH_DEFINITIONS)
    list(APPEND _defs "-D${_d}")
  endforeach()
  try_compile(_ok SOURCE_FROM_CONTENT check.cpp "${source}"
    COMPILE_DEFINITIONS ${_defs}
    CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${TORCH_INCLUDE_DIRS};${ARG_INCLUDES}"
    LINK_LIBRARIES ${TENSORDICT_TORCH_LIBRARY_FILES} ${ARG_LIBRARIES} Threads::Threads
    CXX_STANDARD 20
    OUTPUT_VARIABLE _out)
  if(NOT _ok)
    file(APPEND ${CMAKE_BINARY_DIR}/CMakeFiles/CMakeConfigureLog.yaml
         "tensordict_torch_check_compiles(${var}) failed:\n${_out}\n")
  endif()
  set(${var} ${_ok} CACHE INTERNAL "tensordict_torch_check_compiles(${var})")
endfunction()
