# find_package(tensordict CONFIG REQUIRED COMPONENTS hdf5 | redis) against an
# installation without them must fail, naming -DTENSORDICT_WITH_<NAME>=ON;
# with OPTIONAL_COMPONENTS the package is found without them. The components
# that were built (PRESENT) are found, with their dependencies.
#   -DSOURCE_DIR -DBINARY_DIR -DPREFIX -DMISSING=<names> -DPRESENT=<names> [-DTORCH_DIR]
function(configure component mode)
  set(dir ${BINARY_DIR}/${component}-${mode})
  file(REMOVE_RECURSE ${dir})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${dir}
                    -DCMAKE_PREFIX_PATH=${PREFIX} -DCOMPONENT=${component} -DMODE=${mode}
                    -DTorch_DIR=${TORCH_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(rc ${rc} PARENT_SCOPE)
  string(REGEX REPLACE "[ \n]+" " " out "${out}${err}")  # CMake wraps long messages
  set(out "${out}" PARENT_SCOPE)
endfunction()

string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" prefix_regex "${PREFIX}")
foreach(component IN LISTS PRESENT)
  configure(${component} PRESENT)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "find_package(tensordict COMPONENTS ${component}) failed:\n${out}")
  endif()
  message(STATUS "COMPONENTS ${component}: found")
endforeach()

foreach(component IN LISTS MISSING)
  string(TOUPPER ${component} upper)
  configure(${component} REQUIRED)
  if(rc EQUAL 0)
    message(FATAL_ERROR "find_package(tensordict COMPONENTS ${component}) did not fail:\n${out}")
  endif()
  if(NOT out MATCHES "component '${component}' \\(target tensordict::${component}\\) is not in this installation \\(${prefix_regex}\\): build and install tensordict with -DTENSORDICT_WITH_${upper}=ON")
    message(FATAL_ERROR "the failure does not name -DTENSORDICT_WITH_${upper}=ON and ${PREFIX}:\n${out}")
  endif()
  if(out MATCHES "succeeded")
    message(FATAL_ERROR "unexpected output:\n${out}")
  endif()
  message(STATUS "COMPONENTS ${component}: refused as expected")

  configure(${component} OPTIONAL)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "OPTIONAL_COMPONENTS ${component} failed:\n${out}")
  endif()
  message(STATUS "OPTIONAL_COMPONENTS ${component}: found without it")
endforeach()
