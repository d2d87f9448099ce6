# FindHiredis.cmake: the hiredis C client of Redis.
#
#   find_package(Hiredis [<version>] [REQUIRED])
#
# Imported target:
#   Hiredis::Hiredis   include directory that holds hiredis/ (so code writes
#                      #include <hiredis/hiredis.h>), and the library.
# Result variables:
#   Hiredis_FOUND, Hiredis_VERSION (from HIREDIS_MAJOR/MINOR/PATCH in
#   hiredis/hiredis.h), Hiredis_INCLUDE_DIRS, Hiredis_LIBRARIES.
# Cache variables:
#   Hiredis_INCLUDE_DIR, Hiredis_LIBRARY.
#
# hiredis >= 1.0 installs a CMake package with the target hiredis::hiredis:
# when it is found, Hiredis::Hiredis is that target. Older releases such as
# Debian 12's 0.14.1 install a HiredisConfig.cmake with variables only (and a
# pkg-config file whose include directory is hiredis/ itself), so the header
# and library are searched for here, with the pkg-config paths as hints.
# Installed beside tensordictConfig.cmake for the tensordict::redis component.

include(FindPackageHandleStandardArgs)

# hiredis >= 1.0: its own package, found quietly and only as a CONFIG package
# named "hiredis" (Debian's 0.14 "Hiredis" config has no target).
if(NOT TARGET Hiredis::Hiredis AND NOT Hiredis_NO_CONFIG)
  find_package(hiredis CONFIG QUIET)
  if(TARGET hiredis::hiredis)
    get_target_property(_hiredis_inc hiredis::hiredis INTERFACE_INCLUDE_DIRECTORIES)
    foreach(_dir IN LISTS _hiredis_inc)
      if(EXISTS "${_dir}/hiredis/hiredis.h")
        set(Hiredis_INCLUDE_DIR "${_dir}" CACHE PATH "Directory holding hiredis/hiredis.h")
        break()
      endif()
    endforeach()
    set(_hiredis_from_config TRUE)
  endif()
endif()

if(NOT _hiredis_from_config)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(PC_Hiredis QUIET hiredis)
  endif()
  # The pkg-config include directory may be .../include/hiredis: search its parent too.
  set(_hiredis_inc_hints)
  foreach(_dir IN LISTS PC_Hiredis_INCLUDE_DIRS)
    get_filename_component(_parent "${_dir}" DIRECTORY)
    list(APPEND _hiredis_inc_hints "${_dir}" "${_parent}")
  endforeach()
  find_path(Hiredis_INCLUDE_DIR NAMES hiredis/hiredis.h HINTS ${_hiredis_inc_hints}
            DOC "Directory holding hiredis/hiredis.h")
  find_library(Hiredis_LIBRARY NAMES hiredis HINTS ${PC_Hiredis_LIBRARY_DIRS}
               DOC "The hiredis library")
endif()

if(Hiredis_INCLUDE_DIR AND EXISTS "${Hiredis_INCLUDE_DIR}/hiredis/hiredis.h")
  file(STRINGS "${Hiredis_INCLUDE_DIR}/hiredis/hiredis.h" _hiredis_defines
       REGEX "^#define HIREDIS_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    set(_hiredis_${_part} "")
    foreach(_line IN LISTS _hiredis_defines)
      if(_line MATCHES "^#define HIREDIS_${_part} +([0-9]+)")
        set(_hiredis_${_part} "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endforeach()
  if(NOT _hiredis_MAJOR STREQUAL "" AND NOT _hiredis_MINOR STREQUAL ""
     AND NOT _hiredis_PATCH STREQUAL "")
    set(Hiredis_VERSION "${_hiredis_MAJOR}.${_hiredis_MINOR}.${_hiredis_PATCH}")
  endif()
endif()

if(_hiredis_from_config)
  find_package_handle_standard_args(Hiredis
    REQUIRED_VARS Hiredis_INCLUDE_DIR
    VERSION_VAR Hiredis_VERSION)
else()
  find_package_handle_standard_args(Hiredis
    REQUIRED_VARS Hiredis_LIBRARY Hiredis_INCLUDE_DIR
    VERSION_VAR Hiredis_VERSION)
endif()

if(Hiredis_FOUND)
  set(Hiredis_INCLUDE_DIRS "${Hiredis_INCLUDE_DIR}")
  if(_hiredis_from_config)
    set(Hiredis_LIBRARIES hiredis::hiredis)
  else()
    set(Hiredis_LIBRARIES "${Hiredis_LIBRARY}")
  endif()
  if(NOT TARGET Hiredis::Hiredis)
    if(_hiredis_from_config)
      add_library(Hiredis::Hiredis INTERFACE IMPORTED)
      set_target_properties(Hiredis::Hiredis PROPERTIES
        INTERFACE_LINK_LIBRARIES hiredis::hiredis
        INTERFACE_INCLUDE_DIRECTORIES "${Hiredis_INCLUDE_DIR}")
    else()
      add_library(Hiredis::Hiredis UNKNOWN IMPORTED)
      set_target_properties(Hiredis::Hiredis PROPERTIES
        IMPORTED_LOCATION "${Hiredis_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${Hiredis_INCLUDE_DIR}")
    endif()
  endif()
endif()

mark_as_advanced(Hiredis_INCLUDE_DIR Hiredis_LIBRARY)
unset(_hiredis_from_config)
unset(_hiredis_inc)
unset(_hiredis_inc_hints)
unset(_hiredis_defines)
unset(_hiredis_MAJOR)
unset(_hiredis_MINOR)
unset(_hiredis_PATCH)
