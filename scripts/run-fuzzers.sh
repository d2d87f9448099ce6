#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (ASan + UBSan, the build of
# run-sanitizers.sh: scripts/sanitizers/configure.sh) and runs
# each for FUZZ_SECONDS (default 30) from seeds the library writes itself and
# the Python fixtures in tests/data, plus the inputs kept in
# fuzz/regressions/<target>/. A finding (crash, sanitizer report, non-
# tensordict exception) fails the run; its input is left in
# $SAN_BUILD_DIR/findings/: add it to fuzz/regressions/<target>/ with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${SAN_BUILD_DIR:-build-sanitize}
JOBS=${JOBS:-$(nproc)}
SECONDS_EACH=${FUZZ_SECONDS:-30}
TARGETS=${FUZZ_TARGETS:-"load_memmap from_consolidated state_dict schema h5 redis_store wire_message"}
source scripts/sanitizers/configure.sh
cmake --build "$BUILD_DIR" -j "$JOBS" --target $(for t in $TARGETS; do printf 'fuzz_%s ' "$t"; done)
export TD_FUZZ_FIXTURES="$PWD/tests/data/python-0.3.2/memmap:$PWD/tests/data/hand-built:$PWD/tests/data/upstream-artifact"
mkdir -p "$BUILD_DIR/findings"
status=0
for t in $TARGETS; do
  corpus="$BUILD_DIR/corpus/$t"
  mkdir -p "$corpus"
  TD_FUZZ_WRITE_SEEDS="$corpus" "$BUILD_DIR/fuzz/fuzz_$t"
  echo "== fuzz_$t: $(ls "$corpus" | wc -l) inputs in the corpus, ${SECONDS_EACH}s"
  if ! "$BUILD_DIR/fuzz/fuzz_$t" "$corpus" "fuzz/regressions/$t" -max_total_time="$SECONDS_EACH" \
      -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 -use_value_profile=1 \
      -artifact_prefix="$BUILD_DIR/findings/$t-" 2> "$BUILD_DIR/fuzz_$t.log"; then
    echo "fuzz_$t: FINDING (log: $BUILD_DIR/fuzz_$t.log, input: $BUILD_DIR/findings/)"
    tail -40 "$BUILD_DIR/fuzz_$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$BUILD_DIR/fuzz_$t.log" || true
  fi
done
exit $status
