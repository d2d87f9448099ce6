# find_dependency() calls of the tensordict::hdf5 component (installed as
# tensordict-hdf5-dependencies.cmake): the HDF5 C library. FindHDF5
# test-compiles a C program, so the consumer's project gets C enabled.
include(CMakeFindDependencyMacro)
if(NOT CMAKE_C_COMPILER_LOADED)
  enable_language(C)
endif()
find_dependency(HDF5 1.10 COMPONENTS C)
