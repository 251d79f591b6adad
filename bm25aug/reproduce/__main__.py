"""``python -m bm25aug.reproduce``: see ``bm25aug.reproduce.conditions``."""

import sys

from bm25aug.reproduce.conditions import main

sys.exit(main())
