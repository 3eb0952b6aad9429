"""``python -m pregel.cli``: the ``pregel`` command."""

import sys

from pregel.cli import main

if __name__ == "__main__":
    sys.exit(main())
