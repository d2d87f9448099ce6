#!/usr/bin/env bash
# Builds every benchmark, runs each next to its floor, and writes the report:
# benchmarks/results/<name>.{md,json}, docs/benchmarks.md and docs/benchmarks.png.
# Run it on a quiet machine: the ratios of a busy one are noise.
#   REPETITIONS=9 bash scripts/benchmark-report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The plot needs matplotlib, from Debian's package (for /usr/bin/python3).
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  SUDO=""; if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-matplotlib
fi
BUILD_DIR=${BUILD_DIR:-build-bench}
JOBS=${JOBS:-$(nproc)}
REPETITIONS=${REPETITIONS:-9}
export CCACHE_BASEDIR="$PWD"
source scripts/cmake-env.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${TD_CMAKE_ARGS[@]}" \
  -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_EXAMPLES=OFF -DTENSORDICT_BUILD_BENCHMARKS=ON \
  -DTENSORDICT_WITH_HDF5=ON
BENCHES=(bench_core bench_ops bench_memmap bench_lazy bench_replay bench_parity)
[[ -f benchmarks/bench_checkpoint.cpp ]] && BENCHES+=(bench_checkpoint)
BENCHES+=(bench_hdf5 bench_nn bench_nn_runner bench_rb)
# bench_nn_export runs models the real Python torch writes first (TorchScript
# and AOTInductor, ~1 minute), with the project's Python (scripts/python-env.sh).
BENCHES+=(bench_nn_export)
export TENSORDICT_NN_MODELS="$PWD/$BUILD_DIR/nn-models"
"${TD_VENV:-$PWD/.venv}/bin/python" tests/nn/python/make_models.py "$TENSORDICT_NN_MODELS"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${BENCHES[@]}"
# The peers (benchmarks/README.md, "Peers"): the same operations in the real Python
# tensordict, and TorchRL for bench_rb, alternating with each binary round by round.
PYTHON_PEER="${TD_VENV:-$PWD/.venv}/bin/python benchmarks/peers/tensordict_peer.py"
TORCHRL_PEER="${TD_TORCHRL_VENV:-$PWD/.venv-torchrl}/bin/python benchmarks/torchrl_rb.py"
for b in "${BENCHES[@]}"; do
  PEERS=()
  case "$b" in
    bench_core | bench_ops | bench_memmap | bench_hdf5 | bench_parity) PEERS=(--peer "$PYTHON_PEER") ;;
    bench_rb) [[ -x "${TD_TORCHRL_VENV:-$PWD/.venv-torchrl}/bin/python" ]] && PEERS=(--peer "$TORCHRL_PEER") ;;
  esac
  /usr/bin/python3 benchmarks/run.py "$BUILD_DIR/benchmarks/$b" --repetitions "$REPETITIONS" "${PEERS[@]}"
done
/usr/bin/python3 benchmarks/report.py
