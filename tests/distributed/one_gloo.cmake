# distributed.one_gloo_in_the_process (docs/distributed.md, "Gloo headers"):
# the test program, whose Gloo group was compiled with Gloo headers that may be
# another commit's than LibTorch's Gloo, must use LibTorch's Gloo only:
#  - it needs no libgloo that LibTorch's own libraries do not need;
#  - it exports no Gloo symbol and no inline member of ProcessGroupGloo (an
#    exported copy compiled with other headers would replace LibTorch's for
#    the whole process).
#   -DPROGRAM=<test program> -DTORCH_CPU=<libtorch_cpu.so> -DREADELF=... -DNM=...
function(needed file out)
  execute_process(COMMAND ${READELF} -d ${file} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "readelf -d ${file} failed")
  endif()
  string(REGEX MATCHALL "Shared library: \\[[^]]*gloo[^]]*\\]" found "${dyn}")
  set(${out} "${found}" PARENT_SCOPE)
endfunction()
needed(${PROGRAM} program_gloo)
needed(${TORCH_CPU} torch_gloo)
foreach(lib IN LISTS program_gloo)
  if(NOT lib IN_LIST torch_gloo)
    message(FATAL_ERROR "${PROGRAM} links a Gloo library LibTorch does not: ${lib}")
  endif()
endforeach()
execute_process(COMMAND ${NM} -D -C --defined-only ${PROGRAM} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "nm -D ${PROGRAM} failed")
endif()
# A Gloo function or class's data, or an inline member or vtable of
# ProcessGroupGloo (whose code may use Gloo's layout). Not flagged: std:: and
# c10:: templates over pointers to Gloo types, and the typeinfo of
# ProcessGroupGloo's own classes (their names and bases are LibTorch's
# header's; UBSan's vptr checks emit them), which do not depend on Gloo's headers.
string(REPLACE "\n" ";" lines "${syms}")
set(exported)
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] " "" name "${line}")
  if(name MATCHES "^typeinfo (name )?for c10d::ProcessGroupGloo")
    continue()
  endif()
  string(REGEX REPLACE "^(vtable|typeinfo name|typeinfo|VTT|construction vtable) for " "" name "${name}")
  if(name MATCHES "^([A-Za-z_]+ )?(gloo::|c10d::ProcessGroupGloo)")
    list(APPEND exported "${line}")
  endif()
endforeach()
if(exported)
  list(JOIN exported "\n  " exported)
  message(FATAL_ERROR "${PROGRAM} exports Gloo symbols:\n  ${exported}")
endif()
# The check itself: LibTorch's Gloo must be found somewhere (in libtorch_cpu
# or in the libgloo it needs), or the program could not have linked.
execute_process(COMMAND ${NM} -D -C --defined-only ${TORCH_CPU} OUTPUT_VARIABLE torch_syms)
if(NOT torch_syms MATCHES "gloo::" AND NOT torch_gloo)
  message(FATAL_ERROR "${TORCH_CPU} neither contains nor needs Gloo")
endif()
message(STATUS "one Gloo: ${PROGRAM} uses LibTorch's (${torch_gloo})")
