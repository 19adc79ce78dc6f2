"""`python -m hearth` starts Hearth's window."""

import sys

from .main import main

sys.exit(main())
