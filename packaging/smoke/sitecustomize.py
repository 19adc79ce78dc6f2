"""Starts the smoke-test driver in an unbundled Hearth (`python -m hearth`, the `hearth` command):
put this folder on PYTHONPATH and set HEARTH_SMOKE_TEST=1. The bundle does the same from its
runtime hook (packaging/pyi_rth_hearth.py). Does nothing without HEARTH_SMOKE_TEST=1."""

import os
import sys

if os.environ.get("HEARTH_SMOKE_TEST") == "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import hearth_smoke
    finally:
        del sys.path[0]
    hearth_smoke.install()
