"""``python -m asyncoll.coordinator``: the same as ``asyncoll-coordinator``."""

import sys

from asyncoll.coordinator.cli import main

sys.exit(main())
