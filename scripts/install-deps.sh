#!/usr/bin/env bash
# Installs the Debian 12 packages tensordict needs to build, test and benchmark.
# Idempotent: packages already present are not reinstalled, and apt-get update
# runs only when something is missing. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake git ccache python3 clang-format
  libtorch-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libfmt-dev
  libhdf5-dev python3-h5py
  libhiredis-dev redis-server python3-redis
  libgloo-dev
  libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
