"""`mugraph.storage` gives its names on first use: each one is its module's own object, and importing
the package (as a worker does, for the memo's signing) imports neither Zarr nor the run store."""

from __future__ import annotations

import importlib
import subprocess
import sys

import mugraph.storage as storage


def test_each_name_is_its_modules_object() -> None:
    for name, module in storage._WHERE.items():
        assert getattr(storage, name) is getattr(importlib.import_module(module), name), name
    assert set(storage.__all__) == set(storage._WHERE) <= set(dir(storage))


def test_the_package_imports_no_zarr() -> None:
    loaded = "sorted({'zarr', 'mugraph.storage.run.store'} & set(sys.modules))"
    code = f"import sys, mugraph.storage.memo.auth; print({loaded})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
