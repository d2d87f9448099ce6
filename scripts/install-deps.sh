#!/usr/bin/env bash
# Installs what tensordict needs to build, test and benchmark, on Debian 12 or 13:
#  1. Debian's packages (compilers, CMake, HDF5, hiredis, Redis, GoogleTest,
#     Google Benchmark, Gloo's headers, and on Debian 12 its LibTorch 1.13,
#     which CI builds the library against too);
#  2. the project's own Python environment, $TD_VENV (default .venv in the
#     checkout, ignored by git), from scripts/python-requirements.txt: the
#     CPU build of torch 2.13.0, whose LibTorch the scripts build against,
#     and the real Python tensordict, h5py and redis, the tests' peers;
#  3. TorchRL's environment, $TD_TORCHRL_VENV (default .venv-torchrl), from
#     scripts/torchrl-requirements.txt: torchrl with the same torch, which
#     the replay buffer tests exchange checkpoints with (its segment trees
#     are compiled against that torch: python3-dev).
# Idempotent: what is present is not installed again (apt-get update runs
# only when a package is missing). Needs root (or sudo) for step 1.
# TD_SKIP_VENV=1 skips steps 2 and 3.
set -euo pipefail
cd "$(dirname "$0")/.."

. /etc/os-release
PACKAGES=(
  build-essential cmake git ccache python3 python3-venv python3-dev clang-format clang-tidy clang
  nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libfmt-dev
  libhdf5-dev
  libhiredis-dev redis-server
  libgloo-dev libclang-rt-dev
)
case "${VERSION_ID:-}" in
  12) PACKAGES+=(libtorch-dev) ;;  # LibTorch 1.13.1: the second build of .ci/run
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: Debian packages present"
else
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[[ "${TD_SKIP_VENV:-0}" == 1 ]] && exit 0
bash scripts/python-env.sh
bash scripts/torchrl-env.sh
