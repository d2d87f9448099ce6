#!/usr/bin/env bash
# Creates or updates TorchRL's environment: $TD_TORCHRL_VENV (default
# .venv-torchrl in the checkout) with scripts/torchrl-requirements.txt, every
# version pinned. The replay buffer tests run TorchRL from it to write and
# read checkpoints; benchmarks/torchrl_rb.py runs in it. Prints nothing more
# when the environment is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TD_TORCHRL_VENV:-$PWD/.venv-torchrl}
REQ=scripts/torchrl-requirements.txt
bash scripts/pinned-venv.sh torchrl-env "$VENV" "$REQ" '
import torch, tensordict, torchrl
print(f"torch {torch.__version__}, torchrl {torchrl.__version__}, "
      f"tensordict {tensordict.__version__}")'

# torchrl's compiled extension (torchrl/_torchrl*.so: the segment trees of its
# prioritized sampler) in the 0.14.1 wheel was built against another torch and
# does not load under torch 2.13 (an undefined symbol), which leaves
# PrioritizedSampler unusable. The wheel also ships the extension's C++
# sources (torchrl/csrc); they are compiled here against the environment's
# torch, in place of the shipped library (about 40 s on one core).
stamp="$VENV/.torchrl-extension"
cmp -s "$REQ" "$stamp" && exit 0
py="$VENV/bin/python"
if ! "$py" -c 'import torchrl._torchrl' 2>/dev/null; then
  read -r torchrl_dir torch_dir py_include ext_suffix abi < <("$py" -c '
import importlib.util, os, sysconfig, torch
print(os.path.dirname(importlib.util.find_spec("torchrl").origin), os.path.dirname(torch.__file__),
      sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX"),
      int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  if [[ ! -f "$py_include/Python.h" ]]; then
    echo "torchrl-env: $py_include/Python.h is missing (install python3-dev)" >&2
    exit 1
  fi
  echo "torchrl-env: compiling torchrl's segment trees (torchrl/csrc) against torch $("$py" -c 'import torch; print(torch.__version__)')"
  out="$torchrl_dir/_torchrl$ext_suffix"
  ${CXX:-c++} -O2 -DNDEBUG -std=c++20 -fPIC -shared -w -D_GLIBCXX_USE_CXX11_ABI="$abi" \
    -DTORCH_EXTENSION_NAME=_torchrl -DTORCH_API_INCLUDE_EXTENSION_H \
    -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" -I"$py_include" \
    "$torchrl_dir/csrc/pybind.cpp" "$torchrl_dir/csrc/utils.cpp" \
    -L"$torch_dir/lib" -ltorch -ltorch_cpu -ltorch_python -lc10 -Wl,-rpath,"$torch_dir/lib" \
    -o "$out.new"
  mv "$out.new" "$out"
  "$py" -c 'from torchrl._torchrl import SumSegmentTreeFp32, MinSegmentTreeFp32'
  echo "torchrl-env: torchrl's segment trees load"
fi
cp "$REQ" "$stamp"
