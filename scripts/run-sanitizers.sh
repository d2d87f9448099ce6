#!/usr/bin/env bash
# The test binaries built with AddressSanitizer and UndefinedBehaviorSanitizer
# (issue #19), run after the Release tests by .ci/run. Only the test programs
# are built (no examples, benchmarks or tools). Suppressions, each explained,
# are in scripts/sanitizers/ and cover only LibTorch's own reports.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${SAN_BUILD_DIR:-build-sanitize}
JOBS=${JOBS:-$(nproc)}
BINARIES=${SAN_BINARIES:-"tensordict_reliability_tests tensordict_tests tensordict_conformance"}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS="-O1 -g1" \
  -DTENSORDICT_SANITIZE=address,undefined -DTENSORDICT_BUILD_TESTS=ON \
  -DTENSORDICT_BUILD_EXAMPLES=OFF -DTENSORDICT_BUILD_BENCHMARKS=OFF -DTENSORDICT_BUILD_TOOLS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target $BINARIES tensordict_reliability_child
export ASAN_OPTIONS=${ASAN_OPTIONS:-"abort_on_error=1:detect_leaks=1"}
export LSAN_OPTIONS=${LSAN_OPTIONS:-"suppressions=$PWD/scripts/sanitizers/lsan.supp:print_suppressions=0"}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-"print_stacktrace=1:halt_on_error=1:suppressions=$PWD/scripts/sanitizers/ubsan.supp"}
export TENSORDICT_TEST_DATA="$PWD/tests/data"
status=0
for b in $BINARIES; do
  start=$(date +%s)
  if "$BUILD_DIR/tests/$b" --gtest_brief=1 > "$BUILD_DIR/$b.log" 2>&1; then
    echo "sanitizers: $b clean ($(( $(date +%s) - start )) s): $(grep -E '^\[  PASSED' "$BUILD_DIR/$b.log")"
  else
    echo "sanitizers: $b FAILED ($(( $(date +%s) - start )) s), log $BUILD_DIR/$b.log:"
    grep -E "ERROR: AddressSanitizer|runtime error|ERROR: LeakSanitizer|\[  FAILED" "$BUILD_DIR/$b.log" | head -40
    status=1
  fi
done
exit $status
