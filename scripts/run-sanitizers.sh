#!/usr/bin/env bash
# The whole test suite built with AddressSanitizer and UndefinedBehaviorSanitizer
# (issue #19), run by .ci/run after the Release tests. The same build holds the
# libFuzzer targets (scripts/run-fuzzers.sh runs them). Every CTest test runs
# except the packaging checks (package.*, header.*, style.*): they configure and
# build the project again with cmake or clang-format and test no code of ours
# at run time. Suppressions, each explained, are in scripts/sanitizers/ and
# cover only LibTorch's own reports.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${SAN_BUILD_DIR:-build-sanitize}
JOBS=${JOBS:-$(nproc)}
source scripts/sanitizers/configure.sh
start=$SECONDS
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "sanitizers: built in $(( (SECONDS - start) / 60 )) min"
start=$SECONDS
cd "$BUILD_DIR"
status=0
ctest -j "$JOBS" --timeout 900 -E '^(package|header|style)\.' ${SAN_CTEST_ARGS:-} \
  --output-on-failure > sanitizers.log 2>&1 || status=$?
tail -3 sanitizers.log
if [[ $status != 0 ]]; then
  echo "sanitizers: FAILED, log $BUILD_DIR/sanitizers.log:"
  grep -E "ERROR: AddressSanitizer|runtime error|ERROR: LeakSanitizer|SUMMARY|\(Failed\)|\(Timeout\)|\(Subprocess" \
    sanitizers.log | head -60
fi
echo "sanitizers: tests ran in $(( (SECONDS - start) / 60 )) min"
exit $status
