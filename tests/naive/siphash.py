"""Moved to kvmm.testing.models.siphash (installed with kvmm); this name stays for old imports."""

import sys

from kvmm.testing.models import siphash as _moved

sys.modules[__name__] = _moved
