# Sourced by run-sanitizers.sh and run-fuzzers.sh: one ASan + UBSan build
# (GCC, -O1) of the library, the tests and the fuzz targets in $BUILD_DIR,
# and the sanitizer options with their suppression files.
# ccache: paths relative to the checkout and no working directory in the hash
# (-g1 would put it there), so that a fresh clone anywhere reuses the objects.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
source scripts/cmake-env.sh
cmake -S . -B "$BUILD_DIR" "${TD_CMAKE_ARGS[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DTENSORDICT_SANITIZE=address,undefined -DTENSORDICT_BUILD_FUZZERS=ON -DTENSORDICT_BUILD_TESTS=ON \
  -DTENSORDICT_BUILD_EXAMPLES=ON -DTENSORDICT_BUILD_BENCHMARKS=OFF -DTENSORDICT_BUILD_TOOLS=ON \
  -DTENSORDICT_WITH_HDF5=ON -DTENSORDICT_WITH_REDIS=ON -DTENSORDICT_WITH_DISTRIBUTED=ON >/dev/null
# UBSan aborts on a report (abort_on_error), so that libFuzzer's SIGABRT
# handler saves the input: GCC's separate libubsan does not call the death
# callback libFuzzer sets in libasan.
# allocator_may_return_null: a petabyte request must fail as it does without
# ASan (LibTorch then throws and from_schema gives a StorageError), not abort.
export ASAN_OPTIONS=${ASAN_OPTIONS:-"abort_on_error=1:detect_leaks=1:allocator_may_return_null=1"}
export LSAN_OPTIONS=${LSAN_OPTIONS:-"suppressions=$PWD/scripts/sanitizers/lsan.supp:print_suppressions=0"}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-"print_stacktrace=1:halt_on_error=1:abort_on_error=1:suppressions=$PWD/scripts/sanitizers/ubsan.supp"}
