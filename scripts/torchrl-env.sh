#!/usr/bin/env bash
# Creates or updates TorchRL's environment: $TD_TORCHRL_VENV (default
# .venv-torchrl in the checkout) with scripts/torchrl-requirements.txt, every
# version pinned. The replay buffer tests run TorchRL from it to write and
# read checkpoints; benchmarks/torchrl_rb.py runs in it. Prints nothing more
# when the environment already matches the file.
# torchrl 0.14.1's compiled segment trees were built against another torch
# and do not load under torch 2.13 (its PrioritizedSampler is then
# unavailable); everything else the tests use is pure Python.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/pinned-venv.sh torchrl-env "${TD_TORCHRL_VENV:-$PWD/.venv-torchrl}" \
  scripts/torchrl-requirements.txt '
import torch, tensordict, torchrl
print(f"torch {torch.__version__}, torchrl {torchrl.__version__}, "
      f"tensordict {tensordict.__version__}")'
