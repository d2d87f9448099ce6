#!/usr/bin/env bash
# Builds every benchmark, runs each next to its floor, and writes the report:
# benchmarks/results/<name>.{md,json}, docs/benchmarks.md and docs/benchmarks.png.
# Run it on a quiet machine: the ratios of a busy one are noise.
#   REPETITIONS=9 bash scripts/benchmark-report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The plot needs matplotlib, from Debian's package (for /usr/bin/python3); the
# instruction counts need valgrind.
report_pkgs=()
/usr/bin/python3 -c "import matplotlib" 2>/dev/null || report_pkgs+=(python3-matplotlib)
command -v valgrind >/dev/null || report_pkgs+=(valgrind)
if [[ ${#report_pkgs[@]} -gt 0 ]]; then
  SUDO=""; if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${report_pkgs[@]}"
fi
BUILD_DIR=${BUILD_DIR:-build-bench}
JOBS=${JOBS:-$(nproc)}
REPETITIONS=${REPETITIONS:-9}
export CCACHE_BASEDIR="$PWD"
source scripts/cmake-env.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${TD_CMAKE_ARGS[@]}" \
  -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_EXAMPLES=OFF -DTENSORDICT_BUILD_BENCHMARKS=ON \
  -DTENSORDICT_WITH_HDF5=ON -DTENSORDICT_WITH_REDIS=ON -DTENSORDICT_WITH_DISTRIBUTED=ON
BENCHES=(bench_core bench_ops bench_memmap bench_lazy bench_replay bench_parity)
[[ -f benchmarks/bench_checkpoint.cpp ]] && BENCHES+=(bench_checkpoint)
BENCHES+=(bench_hdf5 bench_redis bench_distributed bench_nn bench_nn_runner bench_rb)
# bench_nn_export runs models the real Python torch writes first (TorchScript
# and AOTInductor, ~1 minute), with the project's Python (scripts/python-env.sh).
BENCHES+=(bench_nn_export)
export TENSORDICT_NN_MODELS="$PWD/$BUILD_DIR/nn-models"
"${TD_VENV:-$PWD/.venv}/bin/python" tests/nn/python/make_models.py "$TENSORDICT_NN_MODELS"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${BENCHES[@]}"
# The peers (benchmarks/README.md, "Peers"): the same operations in the real Python
# tensordict, and TorchRL for bench_rb, alternating with each binary round by round.
PYTHON_PEER="${TD_VENV:-.venv}/bin/python benchmarks/peers/tensordict_peer.py"
TORCHRL_PEER="${TD_TORCHRL_VENV:-.venv-torchrl}/bin/python benchmarks/torchrl_rb.py"
for b in "${BENCHES[@]}"; do
  PEERS=()
  ARGS=(--repetitions "$REPETITIONS")
  case "$b" in
    bench_core | bench_ops | bench_memmap | bench_hdf5 | bench_redis | bench_parity | bench_checkpoint)
      PEERS=(--peer "$PYTHON_PEER") ;;
    # send/recv of each size and map; the paired rows (several floors and the
    # tensordict in turn inside one benchmark) get a report of their own below.
    bench_distributed)
      PEERS=(--peer "$PYTHON_PEER")
      ARGS+=(--filter 'BM_send_[0-9]+MB/|BM_map') ;;
    bench_rb) [[ -x "${TD_TORCHRL_VENV:-$PWD/.venv-torchrl}/bin/python" ]] && PEERS=(--peer "$TORCHRL_PEER") ;;
  esac
  /usr/bin/python3 benchmarks/run.py "$BUILD_DIR/benchmarks/$b" "${ARGS[@]}" "${PEERS[@]}"
done
/usr/bin/python3 benchmarks/run.py "$BUILD_DIR/benchmarks/bench_distributed" \
  --repetitions "$(( (REPETITIONS + 1) / 2 ))" --filter _paired --name distributed_paired
# The per-call rows as instruction counts (valgrind's callgrind), which machine
# load does not move: about 15 minutes (LibTorch starts under valgrind 4 times
# per row). CALLGRIND=0 keeps the counts already in benchmarks/results/.
if [[ ${CALLGRIND:-1} != 0 ]]; then
  /usr/bin/python3 benchmarks/callgrind.py "$BUILD_DIR/benchmarks/bench_core" BM_get BM_nested_get \
    BM_set BM_update BM_keys BM_items --iterations 5000 25000 \
    --json benchmarks/results/callgrind_core.json
  /usr/bin/python3 benchmarks/callgrind.py "$BUILD_DIR/benchmarks/bench_ops" BM_index_int \
    BM_index_slice BM_index_long256 BM_index_mask BM_index_put_int BM_stack64 BM_cat64 \
    BM_apply_mul2 BM_clone --json benchmarks/results/callgrind_ops.json
  # ops' update is ~300 instructions: enough iterations to rise above start-up noise.
  /usr/bin/python3 benchmarks/callgrind.py "$BUILD_DIR/benchmarks/bench_ops" BM_update \
    --iterations 5000 25000 --json benchmarks/results/callgrind_ops_light.json
fi
# The core and tensor operations again against Debian's LibTorch 1.13, where it
# is installed (Debian 12): the report compares the two builds row by row.
torch113=/usr/lib/x86_64-linux-gnu/cmake/Torch
if [[ -f "$torch113/TorchConfig.cmake" ]] && grep -q "TORCH_VERSION_MINOR 13" \
     /usr/include/torch/csrc/api/include/torch/version.h 2>/dev/null; then
  BUILD_113=${BUILD_DIR_113:-build-bench113}
  env -u CMAKE_PREFIX_PATH cmake -S . -B "$BUILD_113" -DCMAKE_BUILD_TYPE=Release \
    -DTorch_DIR="$torch113" -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_EXAMPLES=OFF \
    -DTENSORDICT_BUILD_BENCHMARKS=ON -DTENSORDICT_WITH_HDF5=OFF >/dev/null
  cmake --build "$BUILD_113" -j "$JOBS" --target bench_core bench_ops
  for b in core ops; do
    /usr/bin/python3 benchmarks/run.py "$BUILD_113/benchmarks/bench_$b" --repetitions "$REPETITIONS" \
      --name "${b}_libtorch113"
  done
fi
/usr/bin/python3 benchmarks/report.py
