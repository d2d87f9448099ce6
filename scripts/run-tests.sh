#!/usr/bin/env bash
# README quick start, command 2: install what is missing, build everything
# against LibTorch 2.13 (the wheel of the project's Python environment, or the
# LibTorch named by Torch_DIR / CMAKE_PREFIX_PATH), run all tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# ccache (when installed): paths relative to the checkout, so that a fresh
# clone anywhere reuses earlier objects.
export CCACHE_BASEDIR="$PWD"
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
source scripts/cmake-env.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${TD_CMAKE_ARGS[@]}" \
  -DTENSORDICT_BUILD_TESTS=ON -DTENSORDICT_BUILD_EXAMPLES=ON -DTENSORDICT_BUILD_BENCHMARKS=ON \
  -DTENSORDICT_WITH_HDF5=ON \
  -DTENSORDICT_WITH_DISTRIBUTED=ON \
  -DTENSORDICT_WITH_REDIS=ON \
  -DTENSORDICT_WITH_NN=ON \
  -DTENSORDICT_WITH_RB=ON
cmake --build "$BUILD_DIR" -j "$JOBS"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" --timeout 900
