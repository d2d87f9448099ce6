# Storage components of tensordict: the CMake recipe, done once.
#
# Installed beside tensordictConfig.cmake (find_package(tensordict) includes
# it) and included by tensordict's own CMakeLists.txt. See
# docs/cmake_components.md.
#
#   tensordict_add_storage_component(<target> SOURCES <src>...
#                                    [LINK_PRIVATE <lib>...] [LINK_PUBLIC <lib>...])
#
# makes <target> an OBJECT library of the sources, compiled as position
# independent code and linked PUBLIC to tensordict::tensordict. A storage
# registers itself from a static initializer (TENSORDICT_REGISTER_STORAGE in
# <tensordict/schema.h>) and the program then reaches it by name only
# (from_schema(schema, batch, "<name>")), so nothing references the
# component's object files. Put in a static archive, they would be dropped
# by the linker and the storage silently missing; an OBJECT library's objects
# are always on the link line of the executable or shared library that links
# the target directly, whether tensordict itself is static or shared.
#
# Link the component directly into the executable or shared library that
# uses it (target_link_libraries(app PRIVATE <target>)): CMake adds the
# objects only to targets that link an object library directly, and a static
# library of yours in between would bring the trap back.
#
#   tensordict_install_storage_component(<target> NAME <name>
#       [DEPENDENCIES <file>] [COMPONENT <install component>] [EXCLUDE_FROM_ALL])
#
# For tensordict's own components (tensordict::hdf5, tensordict::redis):
# gives <target> the EXPORT_NAME <name> and the alias tensordict::<name>, and
# installs it with its own export set, tensordict-<name>-targets.cmake, plus
# <file> (find_dependency() calls for its LINK_PRIVATE/LINK_PUBLIC imported
# targets) as tensordict-<name>-dependencies.cmake, which tensordictConfig.cmake
# loads for find_package(tensordict COMPONENTS <name>). Modules installed
# beside the config (FindHiredis.cmake) are on CMAKE_MODULE_PATH while that
# file runs.

include_guard(GLOBAL)

function(tensordict_add_storage_component target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;LINK_PRIVATE;LINK_PUBLIC")
  if(arg_UNPARSED_ARGUMENTS OR arg_KEYWORDS_MISSING_VALUES)
    message(FATAL_ERROR "tensordict_add_storage_component(${target}): unexpected arguments "
            "'${arg_UNPARSED_ARGUMENTS}${arg_KEYWORDS_MISSING_VALUES}'; usage: "
            "tensordict_add_storage_component(<target> SOURCES <src>... "
            "[LINK_PRIVATE <lib>...] [LINK_PUBLIC <lib>...])")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "tensordict_add_storage_component(${target}): SOURCES is required")
  endif()
  if(NOT TARGET tensordict::tensordict)
    message(FATAL_ERROR "tensordict_add_storage_component(${target}): no target "
            "tensordict::tensordict; call find_package(tensordict CONFIG REQUIRED) first")
  endif()
  add_library(${target} OBJECT ${arg_SOURCES})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(${target} PUBLIC tensordict::tensordict ${arg_LINK_PUBLIC})
  if(arg_LINK_PRIVATE)
    target_link_libraries(${target} PRIVATE ${arg_LINK_PRIVATE})
  endif()
endfunction()

function(tensordict_install_storage_component target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "EXCLUDE_FROM_ALL" "NAME;DEPENDENCIES;COMPONENT" "")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_NAME)
    message(FATAL_ERROR "tensordict_install_storage_component(${target}): usage: "
            "tensordict_install_storage_component(<target> NAME <name> [DEPENDENCIES <file>] "
            "[COMPONENT <install component>] [EXCLUDE_FROM_ALL])")
  endif()
  if(NOT TARGET tensordict OR NOT TARGET ${target})
    message(FATAL_ERROR "tensordict_install_storage_component(${target}): for components "
            "built inside the tensordict project, made by tensordict_add_storage_component")
  endif()
  get_target_property(_type ${target} TYPE)
  if(NOT _type STREQUAL "OBJECT_LIBRARY")
    message(FATAL_ERROR "tensordict_install_storage_component(${target}): ${target} is a "
            "${_type}, not an OBJECT library (make it with tensordict_add_storage_component)")
  endif()
  if(NOT DEFINED TENSORDICT_INSTALL_CMAKEDIR)
    message(FATAL_ERROR "tensordict_install_storage_component: TENSORDICT_INSTALL_CMAKEDIR unset")
  endif()

  set_target_properties(${target} PROPERTIES EXPORT_NAME ${arg_NAME})
  add_library(tensordict::${arg_NAME} ALIAS ${target})

  set(_opts)
  if(arg_COMPONENT)
    list(APPEND _opts COMPONENT ${arg_COMPONENT})
  endif()
  if(arg_EXCLUDE_FROM_ALL)
    list(APPEND _opts EXCLUDE_FROM_ALL)
  endif()
  install(TARGETS ${target} EXPORT tensordict-${arg_NAME}-targets
    OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/tensordict ${_opts})
  install(EXPORT tensordict-${arg_NAME}-targets NAMESPACE tensordict::
    DESTINATION ${TENSORDICT_INSTALL_CMAKEDIR} ${_opts})
  if(arg_DEPENDENCIES)
    install(FILES ${arg_DEPENDENCIES} RENAME tensordict-${arg_NAME}-dependencies.cmake
      DESTINATION ${TENSORDICT_INSTALL_CMAKEDIR} ${_opts})
  endif()
endfunction()
