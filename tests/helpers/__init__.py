"""Helpers the tests import as ordinary modules: the built-in programs (`builtin`), `mugraph` runs as
subprocesses with their NDJSON events (`cli_runs`), narrowed programs emitted and checked in Triton's
interpreter (`emitting`), the memo tests' verdicts and worker functions (`memo`), the headless browser
(`browser`). Fixtures stay in the conftest.py files."""
