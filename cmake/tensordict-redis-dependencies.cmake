include(CMakeFindDependencyMacro)
find_dependency(Hiredis 0.14)
