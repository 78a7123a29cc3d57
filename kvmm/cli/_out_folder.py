"""The ``--out`` folder check that ``kvmm reproduce`` and ``kvmm plan`` run before their (long) work."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kvmm.errors import BadInputError


def check_out_folder(out: Path) -> None:
    """``--out`` must be a folder kvmm can create and write files in; else a one-line BadInputError."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BadInputError(f"--out {str(out)!r}: cannot create or write files in this folder ({reason}); "
                            f"expected a writable folder") from None
