#!/usr/bin/env bash
# The second LibTorch of .ci/run: Debian 12's libtorch-dev 1.13.1. Builds the
# library, every component (HDF5, Redis, distributed, nn without AOTInductor,
# rb), the tool, and the unit, distributed and rb test programs against it,
# and runs those three programs
# (docs/getting_started.md, "Supported LibTorch"). On a machine without
# Debian's LibTorch 1.13 (Debian 13) it says so and builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
torch_dir=/usr/lib/x86_64-linux-gnu/cmake/Torch
if [[ ! -f "$torch_dir/TorchConfig.cmake" ]] || ! grep -q "TORCH_VERSION_MINOR 13" \
     /usr/include/torch/csrc/api/include/torch/version.h 2>/dev/null; then
  echo "libtorch-1.13: Debian's LibTorch 1.13 is not installed here (Debian 12 only): not built"
  exit 0
fi
export CCACHE_BASEDIR="$PWD"
BUILD_DIR=${BUILD_DIR_113:-build-libtorch113}
JOBS=${JOBS:-$(nproc)}
VENV=${TD_VENV:-$PWD/.venv}
TORCHRL_VENV=${TD_TORCHRL_VENV:-$PWD/.venv-torchrl}
# Torch_DIR alone: the wheel's LibTorch must stay out of this build.
env -u CMAKE_PREFIX_PATH cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DTorch_DIR="$torch_dir" -DTENSORDICT_PYTHON="$VENV/bin/python" \
  -DTENSORDICT_TORCHRL_PYTHON="$TORCHRL_VENV/bin/python" \
  -DTENSORDICT_BUILD_TESTS=ON -DTENSORDICT_BUILD_EXAMPLES=OFF -DTENSORDICT_BUILD_BENCHMARKS=OFF \
  -DTENSORDICT_WITH_HDF5=ON -DTENSORDICT_WITH_DISTRIBUTED=ON -DTENSORDICT_WITH_REDIS=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target tensordict tensordict_hdf5 tensordict_redis tensordict_nn \
  tensordict_distributed tensordict_rb tensordict-inspect tensordict_tests tensordict_distributed_tests \
  tensordict_rb_tests
export TENSORDICT_TEST_DATA="$PWD/tests/data"
"$BUILD_DIR"/tests/tensordict_tests --gtest_brief=1
"$BUILD_DIR"/tests/distributed/tensordict_distributed_tests --gtest_brief=1
"$BUILD_DIR"/tests/rb/tensordict_rb_tests --gtest_brief=1
echo "libtorch-1.13: library, components and three test programs built and passed"
