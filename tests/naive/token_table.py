"""Moved to kvmm.testing.models.token_table (installed with kvmm); this name stays for old imports."""

import sys

from kvmm.testing.models import token_table as _moved

sys.modules[__name__] = _moved
