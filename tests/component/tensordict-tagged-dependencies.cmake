# Dependencies of the test component tensordict::tagged (installed as
# tensordict-tagged-dependencies.cmake when it is built with hiredis): the
# same call the Redis component's file makes. FindHiredis.cmake is the one
# installed beside tensordictConfig.cmake.
include(CMakeFindDependencyMacro)
find_dependency(Hiredis)
