# Configure, build and run find_hiredis/ with the FindHiredis.cmake in
# MODULE_DIR; then check that an impossible version is refused.
#   -DSOURCE_DIR -DBINARY_DIR -DMODULE_DIR [-DCMAKE_GENERATOR]
if(NOT EXISTS ${MODULE_DIR}/FindHiredis.cmake)
  message(FATAL_ERROR "no FindHiredis.cmake in ${MODULE_DIR}")
endif()
file(REMOVE_RECURSE ${BINARY_DIR})
set(_gen)
if(CMAKE_GENERATOR)
  set(_gen -G ${CMAKE_GENERATOR})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} ${_gen}
                  -DCMAKE_MODULE_PATH=${MODULE_DIR}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring find_hiredis failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building find_hiredis failed: ${rc}")
endif()
execute_process(COMMAND ${BINARY_DIR}/format_command RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "running format_command failed: ${rc}")
endif()

# find_package_handle_standard_args checks the version against the header's.
file(WRITE ${BINARY_DIR}/too-new/CMakeLists.txt
  "cmake_minimum_required(VERSION 3.25)\nproject(too_new C)\nfind_package(Hiredis 99 REQUIRED)\n")
execute_process(COMMAND ${CMAKE_COMMAND} -S ${BINARY_DIR}/too-new -B ${BINARY_DIR}/too-new/build
                  -DCMAKE_MODULE_PATH=${MODULE_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \n]+" " " flat "${err}")  # CMake wraps long messages
if(rc EQUAL 0 OR NOT flat MATCHES "Could NOT find Hiredis: Found unsuitable version \"[0-9.]+\", but required is at least \"99\" \\(found [^)]*hiredis")
  message(FATAL_ERROR "find_package(Hiredis 99 REQUIRED) was not refused as expected:\n${out}${err}")
endif()
message(STATUS "find_package(Hiredis 99 REQUIRED) refused as expected")
