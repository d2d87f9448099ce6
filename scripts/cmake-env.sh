# Sourced by the build scripts: sets TD_CMAKE_ARGS, the CMake arguments that
# choose the LibTorch to build against (docs/getting_started.md) and the
# Python the tests run their peers with.
#  - Torch_DIR=<dir with TorchConfig.cmake> in the environment: that LibTorch;
#  - CMAKE_PREFIX_PATH in the environment: CMake searches it (a libtorch
#    download, or /usr for Debian's libtorch-dev);
#  - otherwise the LibTorch inside the torch wheel of the project's Python
#    environment ($TD_VENV, made by scripts/python-env.sh), given as its
#    prefix (the folder holding lib/ and share/).
# The tests' Python is always that environment's, and their TorchRL the one
# of $TD_TORCHRL_VENV (default .venv-torchrl, made by scripts/torchrl-env.sh).
_td_venv=${TD_VENV:-$PWD/.venv}
TD_CMAKE_ARGS=("-DTENSORDICT_PYTHON=$_td_venv/bin/python"
  "-DTENSORDICT_TORCHRL_PYTHON=${TD_TORCHRL_VENV:-$PWD/.venv-torchrl}/bin/python")
if [[ -n "${Torch_DIR:-}" ]]; then
  TD_CMAKE_ARGS+=("-DTorch_DIR=$Torch_DIR")
elif [[ -z "${CMAKE_PREFIX_PATH:-}" ]]; then
  _td_torch=$("$_td_venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  TD_CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$_td_torch")
fi
unset _td_venv _td_torch
