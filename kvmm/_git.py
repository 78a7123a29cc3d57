"""The git commit of a checkout, with the standard library only.

Used at run time by :func:`kvmm.report.git_commit` (kvmm imported from a checkout) and at build
time by ``setup.py``, which records it in the built package as ``kvmm/_build_info.py`` (so a
non-editable ``pip install .`` still knows which commit it was built from).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["checkout_commit"]


def checkout_commit(root: Path) -> str | None:
    """``HEAD`` of the git checkout at ``root`` (``+dirty`` with uncommitted changes to tracked
    files), or ``None`` when ``root`` is not a checkout or git cannot tell."""
    if not (Path(root) / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None
