#!/usr/bin/env bash
# Creates .venv (if missing) and installs edgetorch with everything the main job and the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.edgetorch-deps
if [ ! -f "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ] || [ requirements-nodeps.txt -nt "$stamp" ] ||
  [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing dependencies (pyproject.toml: torch 2.13.0 CPU, executorch 1.5.1, ...)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  .venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt
  touch "$stamp"
fi
.venv/bin/python -m pip install -q --no-deps -e .
echo "[setup] ready: $(.venv/bin/python -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')"
