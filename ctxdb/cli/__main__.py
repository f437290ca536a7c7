"""``python -m ctxdb.cli``: the ``ctxdb`` command."""

import sys

from . import main

sys.exit(main())
