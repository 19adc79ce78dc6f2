"""`python -m app` starts Hearth's window."""

import sys

from .main import main

sys.exit(main())
