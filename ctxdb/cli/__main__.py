"""``python -m ctxdb.cli``: the ``ctxdb`` command."""

import sys

from . import main

# guarded: importing every module (tests/test_install.py) must not run the command
if __name__ == "__main__":
    sys.exit(main())
