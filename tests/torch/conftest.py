"""The torch tests need the torch extra; CI installs it (scripts/test.sh), so they skip only where torch
cannot be imported at all."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
