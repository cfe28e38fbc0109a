"""``python -m rlpolicy.cli``: the ``rlpolicy`` command."""

import sys

from rlpolicy.cli import main

sys.exit(main())
