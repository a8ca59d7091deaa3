#!/usr/bin/env bash
# Lint, formatting, types and the test suite, installing nothing (run scripts/bootstrap.sh once first).
# Extra arguments go to pytest (e.g. `scripts/check.sh -m slow`, `scripts/check.sh tests/ir -q`).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check mugraph tests benchmarks
python3 -m ruff format --check mugraph tests benchmarks
python3 -m mypy
# Two test processes (MUGRAPH_TEST_PROCESSES to change; 0 runs in this one): most e2e tests wait on
# processes they start, so two share 2 cores well (505 s against 780 s for the default suite). A test
# file stays in one process (--dist loadfile), where its module-scoped fixtures are made once.
python3 -m pytest -n "${MUGRAPH_TEST_PROCESSES:-2}" --dist loadfile "$@"
