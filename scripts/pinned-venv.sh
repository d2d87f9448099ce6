#!/usr/bin/env bash
# Creates or updates a virtual environment from a requirements file whose
# every version is pinned, torch among them, so that nothing else can pull
# another torch (an unpinned torch may be a CUDA build of several GB).
#   scripts/pinned-venv.sh LABEL VENV REQUIREMENTS CHECK
# CHECK is Python run in the environment once installed (it imports the
# packages and prints their versions). Prints nothing when the environment
# already matches the file (a copy of it is kept in VENV as a stamp).
# scripts/python-env.sh and scripts/torchrl-env.sh call it.
set -euo pipefail
cd "$(dirname "$0")/.."
label=$1 VENV=$2 REQ=$3 check=$4
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
  echo "$label: creating $VENV with $("$PY" --version 2>&1)"
  "$PY" -m venv "$VENV"
fi
echo "$label: installing $(grep -v '^#' "$REQ" | tr '\n' ' ')"
# Every pin is also a constraint, so that no dependency resolves another torch.
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ" -c "$REQ" 2>&1 \
  | grep -v "^WARNING: Location" || true
echo "$label: $("$VENV/bin/python" -c "$check")"
cp "$REQ" "$stamp"
