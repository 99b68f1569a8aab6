"""`python -m podracer ...` is `podracer ...`."""

import sys

from podracer.cli import main

sys.exit(main())
