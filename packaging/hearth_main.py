"""The bundle's entry script: exactly what the `hearth` command runs (`app.main:main`)."""

import sys

from hearth.app.main import main

sys.exit(main())
