"""Moved to kvmm.testing.models.block_allocator (installed with kvmm); this name stays for old imports."""

import sys

from kvmm.testing.models import block_allocator as _moved

sys.modules[__name__] = _moved
