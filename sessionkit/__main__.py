"""``python -m sessionkit``: the ``sessionkit`` command."""

import sys

from sessionkit.cli import main

sys.exit(main())
