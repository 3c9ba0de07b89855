"""``python -m asyncoll``: the same as the ``asyncoll`` command."""

import sys

from asyncoll.cli import main

sys.exit(main())
