#!/usr/bin/env bash
# Creates or updates the project's Python environment: $TD_VENV (default
# .venv in the checkout) with scripts/python-requirements.txt, every version
# pinned, torch among them so that nothing else can pull another torch.
# Prints nothing more when the environment already matches the file.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TD_VENV:-$PWD/.venv}
REQ=scripts/python-requirements.txt
stamp="$VENV/.tensordict-requirements"
if [[ -x "$VENV/bin/python" ]] && cmp -s "$REQ" "$stamp"; then
  exit 0
fi
# The torch 2.13.0 CPU wheel at hand is built for Python 3.11: prefer it
# (Debian 12's python3 is 3.11; on Debian 13, a pyenv 3.11 if there is one).
PY=${TD_PYTHON:-}
if [[ -z "$PY" ]]; then
  PY=$(command -v python3.11 || true)
  [[ -z "$PY" ]] && PY=$(ls -d "$HOME"/.pyenv/versions/3.11*/bin/python3.11 2>/dev/null | tail -1 || true)
  [[ -z "$PY" ]] && PY=$(command -v python3)
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "python-env: creating $VENV with $("$PY" --version 2>&1)"
  "$PY" -m venv "$VENV"
fi
echo "python-env: installing $(grep -v '^#' "$REQ" | tr '\n' ' ')"
# Every pin is also a constraint, so that no dependency resolves another torch.
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ" -c "$REQ" 2>&1 \
  | grep -v "^WARNING: Location" || true
"$VENV/bin/python" - <<'PY'
import torch, tensordict, h5py, redis
print(f"python-env: torch {torch.__version__}, tensordict {tensordict.__version__}, "
      f"h5py {h5py.__version__}, redis {redis.__version__}")
PY
cp "$REQ" "$stamp"
