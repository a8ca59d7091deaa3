#!/usr/bin/env bash
# Lint, formatting, types and the test suite, installing nothing (run scripts/bootstrap.sh once first).
# Extra arguments go to pytest (e.g. `scripts/check.sh -m slow`, `scripts/check.sh tests/ir -q`).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check mugraph tests benchmarks
python3 -m ruff format --check mugraph tests benchmarks
python3 -m mypy
python3 -m pytest "$@"
