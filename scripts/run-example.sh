#!/usr/bin/env bash
# README quick start, command 1: install what is missing, build against
# LibTorch 2.13 (as run-tests.sh does), run the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export CCACHE_BASEDIR="$PWD"
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
source scripts/cmake-env.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${TD_CMAKE_ARGS[@]}" \
  -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_BENCHMARKS=OFF -DTENSORDICT_BUILD_EXAMPLES=ON \
  -DTENSORDICT_WITH_RB=ON
cmake --build "$BUILD_DIR" -j "$JOBS" --target replay_buffer
"$BUILD_DIR"/examples/replay_buffer "$@"
