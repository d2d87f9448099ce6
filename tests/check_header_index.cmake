# Fails when a public header is missing from the header index of docs/index.md
# (ctest docs.header_index): a header a user cannot find is not documented.
#   cmake -DSOURCE_DIR=... -P check_header_index.cmake
file(GLOB_RECURSE _headers RELATIVE ${SOURCE_DIR}/include ${SOURCE_DIR}/include/tensordict/*.h)
list(APPEND _headers tensordict/version.h)  # generated into the build tree
file(READ ${SOURCE_DIR}/docs/index.md _index)
set(_missing)
foreach(_header IN LISTS _headers)
  string(FIND "${_index}" "| `${_header}` |" _at)
  if(_at EQUAL -1)
    list(APPEND _missing ${_header})
  endif()
endforeach()
if(_missing)
  list(JOIN _missing "\n  " _text)
  message(FATAL_ERROR "public headers missing from the header index of docs/index.md "
          "(add a row \"| `<header>` | <contents> |\"):\n  ${_text}")
endif()
list(LENGTH _headers n)
message(STATUS "${n} public headers are in docs/index.md")
