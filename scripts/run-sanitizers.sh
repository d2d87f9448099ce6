#!/usr/bin/env bash
# The test binaries built with AddressSanitizer and UndefinedBehaviorSanitizer
# (issue #19), run after the Release tests by .ci/run; the same build holds
# the libFuzzer targets (scripts/run-fuzzers.sh runs them). Only test and
# fuzz programs are built (no examples, benchmarks or tools). Suppressions,
# each explained, are in scripts/sanitizers/ and cover only LibTorch's own
# reports.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${SAN_BUILD_DIR:-build-sanitize}
JOBS=${JOBS:-$(nproc)}
BINARIES=${SAN_BINARIES:-"tensordict_reliability_tests tensordict_tests tensordict_conformance"}
source scripts/sanitizers/configure.sh
cmake --build "$BUILD_DIR" -j "$JOBS" --target $BINARIES tensordict_reliability_child
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
