#!/usr/bin/env bash
# The project's test command (what CI runs): install what the checks need, then lint, types and the
# default suite. Extra arguments go to pytest (e.g. `scripts/test.sh -m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
./scripts/check.sh "$@"
