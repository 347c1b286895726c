"""``python -m workflows.replay HISTORY.json ...``: replay exported histories."""

import sys

from ._replay import main

if __name__ == "__main__":
    sys.exit(main())
