"""``python -m ctxdb``: the ``ctxdb`` command."""

import sys

from .cli import main

# guarded: importing every module (tests/test_install.py) must not run the command
if __name__ == "__main__":
    sys.exit(main())
