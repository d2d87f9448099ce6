# Build tensordict as a shared library (BUILD_SHARED_LIBS=ON, nothing but the
# library) in CORE_BINARY_DIR, install it into PREFIX, then build and run the
# consumer project against it (run.cmake).
#   -DPROJECT_SOURCE -DCORE_BINARY_DIR -DBINARY_DIR -DPREFIX -DSOURCE_DIR
#   [-DCOMPILER_LAUNCHER] [-DCMAKE_GENERATOR] [-DCMAKE_CXX_COMPILER]
#   [-DCMAKE_PREFIX_PATH] [-DCMAKE_BUILD_TYPE] [-DTORCH_DIR]
# CORE_BINARY_DIR is kept between runs: a rerun only relinks what changed.
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
set(_args -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
    -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_EXAMPLES=OFF
    -DTENSORDICT_BUILD_BENCHMARKS=OFF -DTENSORDICT_BUILD_TOOLS=OFF)
if(COMPILER_LAUNCHER)
  list(APPEND _args -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()
if(CMAKE_CXX_COMPILER)
  list(APPEND _args -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
endif()
if(CMAKE_PREFIX_PATH)
  list(JOIN CMAKE_PREFIX_PATH "\\;" _prefix_path)
  list(APPEND _args "-DCMAKE_PREFIX_PATH=${_prefix_path}")
endif()
if(TORCH_DIR)
  list(APPEND _args -DTorch_DIR=${TORCH_DIR})
endif()
if(CMAKE_GENERATOR AND NOT EXISTS ${CORE_BINARY_DIR}/CMakeCache.txt)
  list(APPEND _args -G ${CMAKE_GENERATOR})
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${PROJECT_SOURCE} -B ${CORE_BINARY_DIR} ${_args}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the shared build of tensordict failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${CORE_BINARY_DIR} --parallel 2
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the shared tensordict failed: ${rc}")
endif()
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${CORE_BINARY_DIR} --prefix ${PREFIX}
                OUTPUT_QUIET RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "installing the shared tensordict failed: ${rc}")
endif()
# What was installed is the shared library, and only that.
file(GLOB_RECURSE _shared ${PREFIX}/lib*/libtensordict.so)
file(GLOB_RECURSE _static ${PREFIX}/lib*/libtensordict.a)
if(NOT _shared OR _static)
  message(FATAL_ERROR "expected libtensordict.so and no libtensordict.a in ${PREFIX}: "
          "found '${_shared}' '${_static}'")
endif()
message(STATUS "installed ${_shared}")

include(${CMAKE_CURRENT_LIST_DIR}/run.cmake)
