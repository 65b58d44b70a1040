#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (unit, runtime, compiler, interop with the real ExecuTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest tests -q "$@"
