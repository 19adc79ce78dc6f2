"""`python -m engine.server` is `python -m engine serve`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
