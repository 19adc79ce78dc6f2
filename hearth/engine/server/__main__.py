"""`python -m hearth.engine.server` is `python -m hearth.engine serve`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
