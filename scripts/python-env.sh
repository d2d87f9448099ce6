#!/usr/bin/env bash
# Creates or updates the project's Python environment: $TD_VENV (default
# .venv in the checkout) with scripts/python-requirements.txt, every version
# pinned, torch among them so that nothing else can pull another torch.
# Prints nothing more when the environment already matches the file.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/pinned-venv.sh python-env "${TD_VENV:-$PWD/.venv}" scripts/python-requirements.txt '
import torch, tensordict, h5py, redis
print(f"torch {torch.__version__}, tensordict {tensordict.__version__}, "
      f"h5py {h5py.__version__}, redis {redis.__version__}")'
