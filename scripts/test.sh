#!/usr/bin/env bash
# The project's test command: installs what the tests need, then lint, types and the default suite.
# Extra arguments go to pytest (e.g. `scripts/test.sh -m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
python3 -m ruff check mugraph tests benchmarks
python3 -m mypy
python3 -m pytest "$@"
