"""``python -m kvmm.cli ...``: the ``kvmm`` command."""

import sys

from kvmm.cli import main

sys.exit(main())
