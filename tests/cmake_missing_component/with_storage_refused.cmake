# Configuring tensordict with -DTENSORDICT_WITH_HDF5=ON fails with a message
# saying the storage is not part of this version (Redis is: tensordict::redis).
#   -DPROJECT_SOURCE -DBINARY_DIR
foreach(option IN ITEMS HDF5)
  set(dir ${BINARY_DIR}/${option})
  file(REMOVE_RECURSE ${dir})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${PROJECT_SOURCE} -B ${dir}
                    -DTENSORDICT_WITH_${option}=ON -DTENSORDICT_BUILD_TESTS=OFF
                    -DTENSORDICT_BUILD_EXAMPLES=OFF -DTENSORDICT_BUILD_BENCHMARKS=OFF
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "-DTENSORDICT_WITH_${option}=ON was accepted:\n${out}${err}")
  endif()
  string(REGEX REPLACE "[ \n]+" " " flat "${err}")  # CMake wraps long messages
  if(NOT flat MATCHES "TENSORDICT_WITH_${option}=ON: the [A-Za-z0-9]+ storage \\(tensordict::[a-z0-9]+\\) is not part of tensordict [0-9.]+ yet")
    message(FATAL_ERROR "-DTENSORDICT_WITH_${option}=ON failed without the expected message:\n${out}${err}")
  endif()
  message(STATUS "-DTENSORDICT_WITH_${option}=ON refused as expected")
  file(REMOVE_RECURSE ${dir})
endforeach()
