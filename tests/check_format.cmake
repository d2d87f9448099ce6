# Fails when a C++ source of the project differs from what clang-format makes
# of it with the committed .clang-format (ctest style.clang_format).
#   cmake -DSOURCE_DIR=... -DCLANG_FORMAT=... -P check_format.cmake
file(GLOB_RECURSE _sources
  ${SOURCE_DIR}/include/*.h ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cpp
  ${SOURCE_DIR}/tests/*.h ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.c
  ${SOURCE_DIR}/tools/*.cpp ${SOURCE_DIR}/examples/*.h ${SOURCE_DIR}/examples/*.cpp
  ${SOURCE_DIR}/benchmarks/*.h ${SOURCE_DIR}/benchmarks/*.cpp
  ${SOURCE_DIR}/fuzz/*.h ${SOURCE_DIR}/fuzz/*.cpp)
list(FILTER _sources EXCLUDE REGEX "/tests/data/")
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${_sources}
                WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "clang-format would change these files (run clang-format -i on them):\n${err}")
endif()
list(LENGTH _sources n)
message(STATUS "${n} files follow .clang-format")
