#!/usr/bin/env bash
# Sets everything up, checks lint, formatting and types, then runs the whole test suite (unit, runtime, compiler,
# interop with the real ExecuTorch) on every core, and lists the 15 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check edgetorch tests bench examples scripts
.venv/bin/ruff format --check edgetorch tests bench examples scripts
.venv/bin/mypy
# --no-loadscope-reorder: the files go out longest first, as tests/conftest.py orders them (tests/file_seconds.json).
exec .venv/bin/python -m pytest tests -q -n "${EDGETORCH_TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder \
  --durations=15 "$@"
