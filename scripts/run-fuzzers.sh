#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) and runs
# each for FUZZ_SECONDS (default 30) from seeds the library writes itself and
# the Python fixtures in tests/data, plus the inputs kept in
# fuzz/regressions/<target>/. A finding (crash, sanitizer report, non-
# tensordict exception) fails the run; its input is left in
# $FUZZ_BUILD_DIR/findings/: add it to fuzz/regressions/<target>/ with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
SECONDS_EACH=${FUZZ_SECONDS:-30}
TARGETS=${FUZZ_TARGETS:-"load_memmap from_consolidated state_dict schema"}
CXX_FUZZ=${CXX_FUZZ:-clang++}
cmake -S . -B "$BUILD_DIR" -DCMAKE_CXX_COMPILER="$CXX_FUZZ" -DCMAKE_BUILD_TYPE= \
  -DCMAKE_CXX_FLAGS="-O1 -g1" -DTENSORDICT_SANITIZE=address,undefined -DTENSORDICT_BUILD_FUZZERS=ON \
  -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_EXAMPLES=OFF -DTENSORDICT_BUILD_BENCHMARKS=OFF \
  -DTENSORDICT_BUILD_TOOLS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target $(for t in $TARGETS; do printf 'fuzz_%s ' "$t"; done)
export ASAN_OPTIONS=${ASAN_OPTIONS:-"abort_on_error=1:detect_leaks=1"}
export LSAN_OPTIONS=${LSAN_OPTIONS:-"suppressions=$PWD/scripts/sanitizers/lsan.supp:print_suppressions=0"}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-"print_stacktrace=1:halt_on_error=1:suppressions=$PWD/scripts/sanitizers/ubsan.supp"}
export TD_FUZZ_FIXTURES="$PWD/tests/data/python-0.3.2/memmap:$PWD/tests/data/hand-built:$PWD/tests/data/upstream-artifact"
mkdir -p "$BUILD_DIR/findings"
status=0
for t in $TARGETS; do
  corpus="$BUILD_DIR/corpus/$t"
  mkdir -p "$corpus"
  TD_FUZZ_WRITE_SEEDS="$corpus" "$BUILD_DIR/fuzz/fuzz_$t"
  echo "== fuzz_$t: $(ls "$corpus" | wc -l) inputs in the corpus, ${SECONDS_EACH}s"
  if ! "$BUILD_DIR/fuzz/fuzz_$t" "$corpus" "fuzz/regressions/$t" -max_total_time="$SECONDS_EACH" \
      -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$BUILD_DIR/findings/$t-" 2> "$BUILD_DIR/fuzz_$t.log"; then
    echo "fuzz_$t: FINDING (log: $BUILD_DIR/fuzz_$t.log, input: $BUILD_DIR/findings/)"
    tail -40 "$BUILD_DIR/fuzz_$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$BUILD_DIR/fuzz_$t.log" || true
  fi
done
exit $status
