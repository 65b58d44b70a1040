#!/usr/bin/env bash
# Sets everything up, then runs the main job: all-MiniLM-L6-v2 exported with edgetorch and run without PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/minilm/main.py "$@"
