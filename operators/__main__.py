"""`python -m operators` is `stead`."""

import sys

from operators.cli import main

sys.exit(main())
